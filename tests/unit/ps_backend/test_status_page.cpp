// The status page's sections about whose the shard is (contract/status_page.h): /job, /place and
// /refusals/recent, unclaimed and claimed, as a reader finds them at the contract's pointers.
#include <gtest/gtest.h>

#include "contract/status_page.h"
#include "ps_backend/status_page.h"
#include "test_support.h"

namespace blockps {
namespace {

nlohmann::json page_of(const ServedShard& shard) { return nlohmann::json::parse(render_status_page(shard)); }

const nlohmann::json& at(const nlohmann::json& page, const char* pointer) {
  return page.at(nlohmann::json::json_pointer(pointer));
}

TEST(StatusPage, AnUnclaimedShardWithoutAPlace) {
  unit::TempDir dir;
  auto shard = unit::make_shard(dir.file("m.ckpt"), "role=grad;size=4K;claim_idle_s=30");
  const nlohmann::json p = page_of(*shard);
  namespace page = status_page;
  EXPECT_EQ(at(p, page::kJobHolder), "");
  EXPECT_EQ(at(p, page::kJobClaimedUnix), 0);
  EXPECT_EQ(at(p, page::kJobSessions), 0);
  EXPECT_EQ(at(p, page::kJobLastActiveMsAgo), -1);
  EXPECT_EQ(at(p, page::kJobClaimIdleS), 30);
  EXPECT_EQ(at(p, page::kJobLapsed), false);
  EXPECT_EQ(at(p, page::kJobRefused), 0);
  EXPECT_EQ(at(p, page::kJobTakeovers), 0);
  EXPECT_EQ(at(p, page::kJob).size(), 8u) << at(p, page::kJob).dump();
  EXPECT_EQ(at(p, page::kPlaceModel), "");
  EXPECT_EQ(at(p, page::kPlaceIndex), 0);
  EXPECT_EQ(at(p, page::kPlaceCount), 0);
  EXPECT_EQ(at(p, page::kPlaceLayout), "");
  EXPECT_EQ(at(p, page::kPlaceText), "");
  EXPECT_EQ(at(p, page::kPlace).size(), 5u);
  EXPECT_TRUE(at(p, page::kRefusalsRecent).is_array());
  EXPECT_TRUE(at(p, page::kRefusalsRecent).empty());
  EXPECT_NE(at(p, page::kShardOptions).get<std::string>().find("claim_idle_s=30"), std::string::npos);
}

TEST(StatusPage, TheHolderThePlaceAndTheRefusalsInWords) {
  unit::TempDir dir;
  auto shard = unit::make_shard(dir.file("m.ckpt"), "role=grad;size=4K");
  const WorkerRef a{1, 10, "iqn.2024-01.test:a"}, b{1, 20, "iqn.2024-01.test:b"};
  ASSERT_EQ(error_text(shard->control("job=run-a\nplace=m-3f9a2c01d4e5b677 1/2 range\n", &a)), "");
  int cmd = 0;
  EXPECT_EQ(shard->admit(nullptr, &cmd, LuRole::grad, false, b, 0, 512), ServedShard::Admitted::conflict);
  EXPECT_EQ(shard->admit(nullptr, &cmd, LuRole::grad, false, b, 0, 512), ServedShard::Admitted::conflict);
  const nlohmann::json p = page_of(*shard);
  namespace page = status_page;
  EXPECT_EQ(at(p, page::kJobHolder), "run-a");
  EXPECT_GT(at(p, page::kJobClaimedUnix).get<std::uint64_t>(), 1600000000u);
  EXPECT_EQ(at(p, page::kJobSessions), 1);
  EXPECT_GE(at(p, page::kJobLastActiveMsAgo).get<std::int64_t>(), 0);
  EXPECT_EQ(at(p, page::kJobClaimIdleS), 30);
  EXPECT_EQ(at(p, page::kJobRefused), 2);
  EXPECT_EQ(at(p, page::kPlaceModel), "m-3f9a2c01d4e5b677");
  EXPECT_EQ(at(p, page::kPlaceIndex), 1);
  EXPECT_EQ(at(p, page::kPlaceCount), 2);
  EXPECT_EQ(at(p, page::kPlaceLayout), "range");
  EXPECT_EQ(at(p, page::kPlaceText), "m-3f9a2c01d4e5b677 1/2 range");
  const nlohmann::json& recent = at(p, page::kRefusalsRecent);
  ASSERT_EQ(recent.size(), 1u) << recent.dump();
  namespace refusal = page::refusal;
  const nlohmann::json& e = recent[0];
  EXPECT_EQ(e.size(), 6u) << e.dump();
  EXPECT_EQ(e.at(refusal::kIqn), "iqn.2024-01.test:b");
  EXPECT_EQ(e.at(refusal::kSession), 20);
  EXPECT_EQ(e.at(refusal::kLu), "grad");
  EXPECT_EQ(e.at(refusal::kCount), 2);
  EXPECT_GT(e.at(refusal::kUnixMs).get<std::uint64_t>(), 1600000000000u);
  EXPECT_NE(e.at(refusal::kReason).get<std::string>().find("is held by job run-a"), std::string::npos);
}

// A refused control line is quoted on the page; an initiator may send any bytes (the control fuzzer sent
// "release" followed by 0xED bytes): the page still renders, the bytes as U+FFFD.
TEST(StatusPage, ARefusalQuotingBytesThatAreNotUtf8StillRenders) {
  unit::TempDir dir;
  auto shard = unit::make_shard(dir.file("m.ckpt"), "role=grad;size=4K");
  const WorkerRef sender{1, 7, "iqn.2024-01.test:a"};
  const std::string bad = "release\xed\xed\xed\n";
  EXPECT_FALSE(shard->control(bad, &sender).ok());
  const nlohmann::json p = page_of(*shard);
  const auto& recent = at(p, status_page::kRefusalsRecent);
  ASSERT_FALSE(recent.empty());
  EXPECT_NE(recent.back()["reason"].get<std::string>().find("\xef\xbf\xbd"), std::string::npos) << recent.dump();
}

}  // namespace
}  // namespace blockps
