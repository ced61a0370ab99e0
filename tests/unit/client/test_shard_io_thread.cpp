// One shard's I/O thread (client/shard_io_thread.h): which answers of a shard its status page explains, jobs run on
// every shard's thread at once, the status page read without its padding, a control write padded to whole blocks.
// The shards are files standing in for their LUs (shard_files.h): no tgtd. Its stream of exchanges against real
// shards: tests/integration/sync/test_sync.cpp and tests/integration/client/test_client.cpp.
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "client/shard_io_thread.h"
#include "contract/scsi_codes.h"
#include "tests/unit/client/shard_files.h"

namespace blockps::detail {
namespace {

TEST(ShardAnswer, TheAnswersAShardGivesForReasonsOfItsOwn) {
  const auto answered = [](int status, int key) { return LuFailure::answered(0, status, key, "x"); };
  EXPECT_EQ(shard_answer(answered(scsi::kReservationConflict, 0), LuRole::grad, IoDirection::write),
            ShardAnswer::reservation_conflict);
  EXPECT_EQ(shard_answer(answered(scsi::kCheckCondition, scsi::kNotReady), LuRole::grad, IoDirection::read),
            ShardAnswer::not_ready);
  EXPECT_EQ(shard_answer(answered(scsi::kCheckCondition, scsi::kHardwareError), LuRole::grad, IoDirection::write),
            ShardAnswer::hardware_error);
  // ILLEGAL REQUEST is the shard's own word only for a control write; elsewhere it is the initiator's mistake.
  EXPECT_EQ(shard_answer(answered(scsi::kCheckCondition, scsi::kIllegalRequest), LuRole::status, IoDirection::write),
            ShardAnswer::control_refused);
  EXPECT_EQ(shard_answer(answered(scsi::kCheckCondition, scsi::kIllegalRequest), LuRole::grad, IoDirection::write),
            std::nullopt);
  const LuFailure refused =
      answered(scsi::kCheckCondition, scsi::kIllegalRequest).refusing_job([](const std::string& w) { return w; });
  EXPECT_EQ(shard_answer(refused, LuRole::grad, IoDirection::read), ShardAnswer::job_refused);
  EXPECT_EQ(shard_answer(LuFailure::io(0, "short transfer"), LuRole::grad, IoDirection::read), std::nullopt);
}

class ShardIoThreadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!files_.direct_io_works()) GTEST_SKIP() << files_.folder() << ": this file system refuses O_DIRECT";
  }
  // Shards "s0".."s<n-1>" of 8 KiB, each page {"n": i}, connected and started.
  void open(int n) {
    std::string text = "[model]\nsize = \"" + std::to_string(8 * n) +
                       "K\"\ndtype = \"f32\"\nblock = \"4K\"\n"
                       "[client]\nengine = \"psync\"\n";
    for (int i = 0; i < n; ++i) {
      files_.make("s" + std::to_string(i), 8192, R"({"n":)" + std::to_string(i) + "}");
      text += files_.shard_table("s" + std::to_string(i));
    }
    auto parsed = parse_cluster_text(text, "c.toml");
    ASSERT_TRUE(parsed.ok()) << parsed.message();
    config_ = parsed.value();
    TransportOptions transport;
    transport.engine = PosixEngine::psync;
    for (const ShardSpec& spec : config_.shards) {
      shards_.push_back(std::make_unique<ShardIoThread>(spec, QueueLimits{}, SendOrder::ascending, AskingWorker{}));
      ASSERT_TRUE(shards_.back()->connect(transport).ok());
      shards_.back()->start();
    }
  }
  std::string status_file(int i) const {
    std::ifstream in(files_.path("s" + std::to_string(i), "status"), std::ios::binary);
    std::stringstream all;
    all << in.rdbuf();
    return all.str();
  }

  ShardFiles files_;
  ClusterConfig config_;
  ShardIoThreads shards_;
};

TEST_F(ShardIoThreadTest, AJobRunsOnEveryShardsOwnThreadAndTheFirstFailureIsTheAnswer) {
  open(3);
  std::mutex mutex;
  std::set<std::thread::id> threads;
  std::vector<int> ran(3, 0);
  const Status all = run_on_shards(shards_, all_shards(shards_), [&](ShardIoThread&, std::size_t i) {
    std::lock_guard lock(mutex);
    threads.insert(std::this_thread::get_id());
    ++ran[i];
    return Status::Ok();
  });
  EXPECT_TRUE(all.ok());
  EXPECT_EQ(ran, std::vector<int>({1, 1, 1}));
  EXPECT_EQ(threads.size(), 3u) << "one I/O thread a shard";
  EXPECT_EQ(threads.count(std::this_thread::get_id()), 0u) << "not on the caller's thread";
  const Status failed = run_on_shards(shards_, {1, 2}, [](ShardIoThread&, std::size_t i) {
    return i == 2 ? Status::Error(StatusCode::io, "shard 2 failed") : Status::Ok();
  });
  EXPECT_EQ(failed.message(), "shard 2 failed");
  EXPECT_TRUE(run_on_shards(shards_, {}, [](ShardIoThread&, std::size_t) { return Status::Error("never"); }).ok());
}

TEST_F(ShardIoThreadTest, TheStatusPageIsReadWithoutItsPadding) {
  open(2);
  std::vector<std::string> pages(2);
  ASSERT_TRUE(run_on_shards(shards_, all_shards(shards_), [&](ShardIoThread& shard, std::size_t i) {
                auto text = read_status_page(shard);
                if (!text.ok()) return text.status();
                pages[i] = text.value();
                return Status::Ok();
              }).ok());
  EXPECT_EQ(pages[0], R"({"n":0})");
  EXPECT_EQ(pages[1], R"({"n":1})");
}

TEST_F(ShardIoThreadTest, AControlWriteIsItsLinesThenNulsToAWholeBlock) {
  open(1);
  const std::string lines = "job=a\ncheckpoint\n";
  ASSERT_TRUE(
      run_on_shards(shards_, {0}, [&](ShardIoThread& shard, std::size_t) { return shard.control(lines); }).ok());
  const std::string written = status_file(0);
  const std::size_t block = shards_[0]->lu(LuRole::status).block_size();
  ASSERT_GE(written.size(), block);
  EXPECT_EQ(written.substr(0, lines.size()), lines);
  EXPECT_EQ(written.substr(lines.size(), block - lines.size()), std::string(block - lines.size(), '\0'));
}

TEST_F(ShardIoThreadTest, AWaitOnTheThreadLastsAtLeastWhatWasAsked) {
  open(1);
  const auto begin = std::chrono::steady_clock::now();
  ASSERT_TRUE(run_on_shards(shards_, {0}, [](ShardIoThread& shard, std::size_t) {
                shard.wait_keeping_sessions(std::chrono::milliseconds(1200));
                return Status::Ok();
              }).ok());
  EXPECT_GE(std::chrono::steady_clock::now() - begin, std::chrono::milliseconds(1200));
}

}  // namespace
}  // namespace blockps::detail
