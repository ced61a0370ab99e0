// What Cluster::open checks of each connected shard (client/open_checks.h): its LUs' capacities and its status page's
// size, dtype and block against the cluster file and its layout, each refusal naming the field and both values; and
// the request cap its transports carry. The shards are files standing in for their LUs (shard_files.h): no tgtd.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "client/open_checks.h"
#include "client/shard_io_thread.h"
#include "tests/unit/client/shard_files.h"

namespace blockps {
namespace {

constexpr std::uint64_t kBlock = 4096;
constexpr std::uint64_t kModel = 3 * kBlock;  // one shard: all three blocks

std::string page(std::uint64_t size, const std::string& dtype = "f32", std::uint64_t block = kBlock) {
  return R"({"shard":{"size":)" + std::to_string(size) + R"(,"dtype":")" + dtype + R"(","block":)" +
         std::to_string(block) + "}}";
}

class OpenChecksTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!files_.direct_io_works()) GTEST_SKIP() << files_.folder() << ": this file system refuses O_DIRECT";
  }
  // A one-shard cluster file over the files of shard "s0", and that shard connected.
  void connect(const std::string& max_request = "1M") {
    const std::string text =
        "[model]\nsize = \"12K\"\ndtype = \"f32\"\nblock = \"4K\"\n[client]\nengine = \"psync\"\n"
        "max_request = \"" +
        max_request + "\"\n" + files_.shard_table("s0");
    auto parsed = parse_cluster_text(text, "c.toml");
    ASSERT_TRUE(parsed.ok()) << parsed.message();
    config_ = parsed.value();
    layout_ = make_layout(LayoutKind::stripe, kModel, kBlock, 1);
    shards_.push_back(std::make_unique<detail::ShardIoThread>(config_.shards[0], QueueLimits{}, SendOrder::ascending,
                                                              AskingWorker{}));
    TransportOptions transport;
    transport.engine = PosixEngine::psync;
    ASSERT_TRUE(shards_[0]->connect(transport).ok());
  }
  Result<nlohmann::json> check() { return check_shard_shape(*shards_[0], 0, config_, *layout_); }

  ShardFiles files_;
  ClusterConfig config_;
  std::unique_ptr<Layout> layout_;
  std::vector<std::unique_ptr<detail::ShardIoThread>> shards_;
};

TEST_F(OpenChecksTest, AShardOfTheFilesShapeGivesItsPage) {
  files_.make("s0", kModel, page(kModel));
  connect();
  const auto j = check();
  ASSERT_TRUE(j.ok()) << j.message();
  EXPECT_EQ(j.value()["shard"]["dtype"], "f32");
}

TEST_F(OpenChecksTest, ACapacityOtherThanTheLayoutGivesIsRefusedNamingBoth) {
  files_.make("s0", kModel + kBlock, page(kModel));
  connect();
  const auto j = check();
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.status().code(), StatusCode::mismatch);
  EXPECT_NE(j.message().find("capacity is 16384 bytes, the layout gives this shard 12288 (model 12288 bytes in blocks "
                             "of 4096, stripe layout over 1 shards)"),
            std::string::npos)
      << j.message();
}

TEST_F(OpenChecksTest, APageThatDisagreesOnSizeDtypeOrBlockIsRefusedNamingTheField) {
  files_.make("s0", kModel, page(kModel, "bf16"));
  connect();
  EXPECT_NE(check().message().find("status page says dtype = bf16, the cluster file says dtype = f32"),
            std::string::npos)
      << check().message();
  files_.make("s0", kModel, page(kModel, "f32", 2 * kBlock));
  EXPECT_NE(check().message().find("says block = 8192 bytes, the cluster file says block = 4096"), std::string::npos)
      << check().message();
  files_.make("s0", kModel, page(kBlock));
  EXPECT_NE(check().message().find("says size = 4096 bytes, the cluster file's layout needs 12288"), std::string::npos)
      << check().message();
}

TEST_F(OpenChecksTest, APageThatIsNoBlockpsPageIsRefused) {
  files_.make("s0", kModel, R"({"counters":{}})");
  connect();
  EXPECT_NE(check().message().find("is not a blockps status page"), std::string::npos) << check().message();
  files_.make("s0", kModel, R"({"shard":{"size":12288}})");
  EXPECT_NE(check().message().find("lacks shard.size, shard.dtype or shard.block"), std::string::npos)
      << check().message();
}

TEST_F(OpenChecksTest, RequestsAreCappedAtTheFilesMaxRequestWhereTheTransportHasNoLimit) {
  files_.make("s0", kModel, page(kModel));
  connect("8K");
  const auto cap = cap_requests(shards_, config_);
  ASSERT_TRUE(cap.ok()) << cap.message();
  EXPECT_EQ(cap.value(), 8192u);
  EXPECT_EQ(config_.client.max_request_bytes, 8192u);
}

}  // namespace
}  // namespace blockps
