// The status page's sections about whose the shard is (contract/status_page.h): /job, /place and
// /refusals/recent, unclaimed and claimed, as a reader finds them at the contract's pointers; and the optimizer
// steps of the model and of its last checkpoint.
#include <gtest/gtest.h>

#include <filesystem>
#include <utility>
#include <vector>

#include "contract/scsi_codes.h"
#include "contract/status_page.h"
#include "ps_backend/control/status_page_writer.h"
#include "ps_backend/shard/admission_gate.h"
#include "tests/unit/ps_backend/test_support.h"

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
  AdmissionGate grad(LuRole::grad, *shard);
  EXPECT_EQ(grad.admit(nullptr, &cmd, scsi::kRead16, 0, 512, b).what, Admission::conflict);
  EXPECT_EQ(grad.admit(nullptr, &cmd, scsi::kRead16, 0, 512, b).what, Admission::conflict);
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

// /model/block_steps counts the optimizer's steps per block, summed; /checkpoint/block_steps is that sum in the
// file last written (or loaded): equal right after a checkpoint, behind after one more push, and where a shard
// loaded from the file starts.
TEST(StatusPage, BlockStepsOfTheModelAndOfTheLastCheckpoint) {
  namespace page = status_page;
  unit::TempDir dir;
  // 3 blocks of 1K, the last shorter.
  auto shard = unit::make_shard(dir.file("m.ckpt"), "role=grad;size=2560;block=1K;opt=adam");
  using Steps = std::pair<std::uint64_t, std::uint64_t>;  // the model's, the checkpoint's
  const auto steps = [](const ServedShard& s) {
    const nlohmann::json p = page_of(s);
    return Steps{at(p, page::kModelBlockSteps).get<std::uint64_t>(),
                 at(p, page::kCheckpointBlockSteps).get<std::uint64_t>()};
  };
  EXPECT_EQ(steps(*shard), Steps(0, 0));
  const std::vector<std::byte> whole(2560), block1(1024);
  ASSERT_EQ(error_text(shard->model().push_gradient(0, whole)), "");      // a step of each block: 3
  ASSERT_EQ(error_text(shard->model().push_gradient(1024, block1)), "");  // block 1 again: 4
  shard->note_mutation();
  EXPECT_EQ(steps(*shard), Steps(4, 0));
  ASSERT_EQ(error_text(shard->checkpoint()), "");
  EXPECT_EQ(steps(*shard), Steps(4, 4));
  ASSERT_EQ(error_text(shard->model().push_gradient(0, block1)), "");
  EXPECT_EQ(steps(*shard), Steps(5, 4));

  // What the file holds: a shard loaded from it (a copy: `shard` holds the original's lock) starts there.
  std::filesystem::copy_file(dir.file("m.ckpt"), dir.file("copy.ckpt"));
  auto loaded = unit::make_shard(dir.file("copy.ckpt"), "role=grad");
  EXPECT_EQ(steps(*loaded), Steps(4, 4));
}

// An averaging shard (opt=average, mode=sync) counts a step for each round applied to a block, as its rounds
// apply them (ModelShard::apply_gradient_f32, the sync rounds' path).
TEST(StatusPage, AnAveragingShardCountsTheRoundsAppliedAsSteps) {
  unit::TempDir dir;
  auto shard = unit::make_shard(dir.file("m.ckpt"), "role=grad;size=2K;block=1K;opt=average;mode=sync;workers=2");
  const std::vector<float> both_blocks(512, 0.5f), block1(256, 0.5f);
  ASSERT_EQ(error_text(shard->model().apply_gradient_f32(0, both_blocks)), "");
  ASSERT_EQ(error_text(shard->model().apply_gradient_f32(1024, block1)), "");
  EXPECT_EQ(at(page_of(*shard), status_page::kModelBlockSteps), 3);
}

}  // namespace
}  // namespace blockps
