// The C API (<blockps/blockps.h>, libblockps.so) against a 2-shard cluster: each shard its own tgtd with grad,
// weights and status blockps LUs (opt=sum, so every expected value is exact), opened from a generated cluster
// file. Pushes (blocking, asynchronous with a callback, block ranges) then pulls give init + the sum of the
// gradients exactly; the weights calls, the status page, a shard that disagrees with the file (MISMATCH), a
// dead shard (IO, then CONNECT on reopening), each with the message naming the shard. The shards are set up as
// in test_client.cpp; everything the worker does goes through the C functions only.
#include <blockps/blockps.h>
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/blockps_shard.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tgtd_instance.h"

namespace blockps::testing {
namespace {

constexpr std::uint64_t K = 1024;
constexpr int kShards = 2;
// 16 blocks of 64K, striped: 8 blocks (512K) on each shard.
constexpr std::uint64_t kModelBytes = 1024 * K;
constexpr std::uint64_t kBlockBytes = 64 * K;
constexpr std::uint64_t kShardBytes = kModelBytes / kShards;

std::string shard_iqn(int s) { return "iqn.2026-11.io.blockps:capi-shard" + std::to_string(s); }

// Small whole numbers: sums of them are exact in f32.
std::vector<float> whole_numbers(std::size_t n, int seed) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = static_cast<float>(static_cast<int>((i * 7 + static_cast<std::size_t>(seed) * 13) % 97) - 48);
  return v;
}

// A result code and the message with it, for assertion messages.
std::string outcome(blockps_result r) { return std::string(blockps_result_name(r)) + ": " + blockps_last_error(); }

class ClientCTest : public ::testing::Test {
 protected:
  void SetUp() override {
    BLOCKPS_REQUIRE_TGTD_AND_MODULE();
    ASSERT_TRUE(dir_.create("blockps-client-c-").ok());
    for (int s = 0; s < kShards; ++s) {
      const std::string shape =
          "size=" + std::to_string(kShardBytes) + ";block=" + std::to_string(kBlockBytes) + ";dtype=f32;opt=sum";
      const Status st =
          add_blockps_shard(tgtd_[s], 1, shard_iqn(s), dir_.path("shard" + std::to_string(s) + ".ckpt"), shape);
      ASSERT_TRUE(st.ok()) << st.message();
    }
  }
  void TearDown() override {
    blockps_cluster_close(cluster_);
    if (!HasFailure()) return;
    for (int s = 0; s < kShards; ++s)
      if (tgtd_[s].running()) std::cerr << "---- shard " << s << " tgtd log ----\n" << tgtd_[s].log_text() << "\n";
  }

  // A cluster file for the running shards saying `block` (the shards have kBlockBytes). reconnect_s = 0: the dead
  // shard's test wants the failure at once (test_reconnect.cpp has the recovery).
  // `initiator`: the worker's iSCSI name ("": the library's default, which every cluster of this process shares).
  std::string cluster_file(std::uint64_t block = kBlockBytes, const std::string& initiator = "") {
    std::string text = "[model]\nsize = " + std::to_string(kModelBytes) +
                       "\ndtype = \"f32\"\nblock = " + std::to_string(block) +
                       "\n[client]\nqueue_depth = 4\nmax_request = \"256K\"\nreconnect_s = 0\n" +
                       (initiator.empty() ? "" : "initiator = \"" + initiator + "\"\n");
    for (int s = 0; s < kShards; ++s) {
      text += "[[shard]]\nname = \"shard" + std::to_string(s) + "\"\n";
      text += "grad = \"" + tgtd_[s].url(shard_iqn(s), 1) + "\"\n";
      text += "weights = \"" + tgtd_[s].url(shard_iqn(s), 2) + "\"\n";
      text += "status = \"" + tgtd_[s].url(shard_iqn(s), 3) + "\"\n";
    }
    std::string path = dir_.path("cluster" + std::to_string(++files_) + ".toml");
    std::ofstream(path) << text;
    return path;
  }

  TempDir dir_;
  TgtdInstance tgtd_[kShards];
  blockps_cluster* cluster_ = nullptr;
  int files_ = 0;
};

struct Done {
  std::promise<std::string> promise;
};

void on_done(blockps_result result, const char* message, void* user) {
  static_cast<Done*>(user)->promise.set_value(std::string(blockps_result_name(result)) + message);
}

TEST_F(ClientCTest, PushesSumAndPullsGiveExactValues) {
  blockps_result r = blockps_cluster_open(cluster_file().c_str(), &cluster_);
  ASSERT_EQ(r, BLOCKPS_OK) << outcome(r);
  ASSERT_EQ(blockps_cluster_model_bytes(cluster_), kModelBytes);
  ASSERT_EQ(blockps_cluster_block_count(cluster_), kModelBytes / kBlockBytes);
  ASSERT_EQ(blockps_cluster_shard_count(cluster_), std::size_t{kShards});
  EXPECT_STREQ(blockps_cluster_dtype(cluster_), "f32");
  EXPECT_STREQ(blockps_last_error(), "");
  const std::size_t n = kModelBytes / 4;

  // Initial weights, then a blocking push and an asynchronous one (with a callback): opt=sum adds them.
  const auto init = whole_numbers(n, 1), g1 = whole_numbers(n, 2), g2 = whole_numbers(n, 3);
  r = blockps_write_weights(cluster_, init.data(), kModelBytes);
  ASSERT_EQ(r, BLOCKPS_OK) << outcome(r);
  r = blockps_push(cluster_, g1.data(), kModelBytes);
  ASSERT_EQ(r, BLOCKPS_OK) << outcome(r);
  blockps_op* op = nullptr;
  r = blockps_push_async(cluster_, g2.data(), kModelBytes, &op);
  ASSERT_EQ(r, BLOCKPS_OK) << outcome(r);
  Done done;
  ASSERT_EQ(blockps_op_on_done(op, on_done, &done), BLOCKPS_OK) << blockps_last_error();
  r = blockps_op_wait(op);
  EXPECT_EQ(r, BLOCKPS_OK) << outcome(r);
  EXPECT_EQ(blockps_op_ready(op), 1);
  EXPECT_EQ(done.promise.get_future().get(), "BLOCKPS_OK");
  blockps_op_free(op);
  std::vector<float> expected(n);
  for (std::size_t i = 0; i < n; ++i) expected[i] = init[i] + g1[i] + g2[i];

  // Blocks [5, 9): ones there; only those change.
  const std::uint64_t first = 5, count = 4;
  const std::uint64_t offset = blockps_cluster_block_offset(cluster_, first);
  const std::uint64_t part_bytes = blockps_cluster_block_offset(cluster_, first + count) - offset;
  ASSERT_EQ(part_bytes, count * kBlockBytes);
  const std::vector<float> ones(part_bytes / 4, 1.0f);
  r = blockps_push_blocks(cluster_, first, count, ones.data(), part_bytes);
  ASSERT_EQ(r, BLOCKPS_OK) << outcome(r);
  for (std::uint64_t i = offset / 4; i < (offset + part_bytes) / 4; ++i) expected[i] += 1.0f;

  std::vector<float> pulled(n);
  r = blockps_pull(cluster_, pulled.data(), kModelBytes);
  ASSERT_EQ(r, BLOCKPS_OK) << outcome(r);
  EXPECT_EQ(pulled, expected);
  std::vector<float> pulled_async(n);
  op = nullptr;
  r = blockps_pull_async(cluster_, pulled_async.data(), kModelBytes, &op);
  ASSERT_EQ(r, BLOCKPS_OK) << outcome(r);
  blockps_op_free(op);  // waits
  EXPECT_EQ(pulled_async, expected);
  std::vector<float> part(part_bytes / 4);
  op = nullptr;
  r = blockps_pull_blocks_async(cluster_, first, count, part.data(), part_bytes, &op);
  ASSERT_EQ(r, BLOCKPS_OK) << outcome(r);
  EXPECT_EQ(blockps_op_wait(op), BLOCKPS_OK) << blockps_last_error();
  blockps_op_free(op);
  EXPECT_EQ(part, std::vector<float>(expected.begin() + static_cast<std::ptrdiff_t>(offset / 4),
                                     expected.begin() + static_cast<std::ptrdiff_t>((offset + part_bytes) / 4)));
  std::vector<float> snapshot(n);
  r = blockps_read_weights(cluster_, snapshot.data(), kModelBytes);
  ASSERT_EQ(r, BLOCKPS_OK) << outcome(r);
  EXPECT_EQ(snapshot, expected) << "the weights LUs and the grad LUs disagree";

  // The pipelined exchange (API version 3): blocking, in place, and asynchronous on a block range.
  std::vector<float> grads(n, 2.0f), weights(n);
  r = blockps_exchange(cluster_, grads.data(), weights.data(), kModelBytes);
  ASSERT_EQ(r, BLOCKPS_OK) << outcome(r);
  for (float& e : expected) e += 2.0f;
  EXPECT_EQ(weights, expected);
  std::fill(grads.begin(), grads.end(), -1.0f);
  r = blockps_exchange(cluster_, grads.data(), grads.data(), kModelBytes);
  ASSERT_EQ(r, BLOCKPS_OK) << outcome(r);
  for (float& e : expected) e -= 1.0f;
  EXPECT_EQ(grads, expected) << "an exchange in place";
  op = nullptr;
  r = blockps_exchange_blocks_async(cluster_, first, count, ones.data(), part.data(), part_bytes, &op);
  ASSERT_EQ(r, BLOCKPS_OK) << outcome(r);
  EXPECT_EQ(blockps_op_wait(op), BLOCKPS_OK) << blockps_last_error();
  blockps_op_free(op);
  for (std::uint64_t i = offset / 4; i < (offset + part_bytes) / 4; ++i) expected[i] += 1.0f;
  EXPECT_EQ(part, std::vector<float>(expected.begin() + static_cast<std::ptrdiff_t>(offset / 4),
                                     expected.begin() + static_cast<std::ptrdiff_t>((offset + part_bytes) / 4)));
  r = blockps_exchange(cluster_, nullptr, weights.data(), kModelBytes);
  EXPECT_EQ(r, BLOCKPS_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(blockps_last_error(), "blockps_exchange: grads is NULL with bytes = 1048576");
  op = reinterpret_cast<blockps_op*>(&r);  // must come back NULL
  r = blockps_exchange_async(cluster_, grads.data(), weights.data(), 100, &op);
  EXPECT_EQ(r, BLOCKPS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(op, nullptr);
  EXPECT_STREQ(blockps_last_error(), "exchange: the gradient buffer holds 100 bytes, blocks [0, 16) are 1048576 bytes");

  // Wrong sizes are refused before any I/O.
  r = blockps_pull(cluster_, pulled.data(), 100);
  EXPECT_EQ(r, BLOCKPS_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(blockps_last_error(), "pull: the buffer holds 100 bytes, blocks [0, 16) are 1048576 bytes");

  // The shard's status page, as JSON.
  std::vector<char> json(1 << 20);
  std::size_t json_bytes = 0;
  r = blockps_status_page(cluster_, 1, json.data(), json.size(), &json_bytes);
  ASSERT_EQ(r, BLOCKPS_OK) << outcome(r);
  EXPECT_EQ(json_bytes, std::strlen(json.data()));
  EXPECT_NE(std::string(json.data()).find("\"shard\""), std::string::npos) << json.data();

  // What the shard's sessions did: commands, and no recovery on a healthy run.
  blockps_shard_counters counters{};
  r = blockps_get_shard_counters(cluster_, 1, &counters);
  ASSERT_EQ(r, BLOCKPS_OK) << outcome(r);
  EXPECT_GT(counters.commands, 0u);
  EXPECT_EQ(counters.reconnects, 0u);
  EXPECT_EQ(counters.unanswered_pushes_dropped, 0u);
  r = blockps_get_shard_counters(cluster_, 7, &counters);
  EXPECT_EQ(r, BLOCKPS_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(blockps_last_error(), "blockps_get_shard_counters: shard 7 is out of range: the cluster has 2 shards");
  EXPECT_EQ(blockps_get_shard_counters(cluster_, 0, nullptr), BLOCKPS_ERR_INVALID_ARGUMENT);
}

TEST_F(ClientCTest, MismatchesAndADeadShardAreResultCodesNamingTheShard) {
  blockps_cluster* other = nullptr;
  blockps_result r = blockps_cluster_open(cluster_file(2 * kBlockBytes).c_str(), &other);
  EXPECT_EQ(r, BLOCKPS_ERR_MISMATCH) << outcome(r);
  EXPECT_EQ(other, nullptr);
  EXPECT_NE(std::string(blockps_last_error())
                .find("shard 'shard0': status page says block = 65536 bytes, the cluster file says block = 131072"),
            std::string::npos)
      << blockps_last_error();

  r = blockps_cluster_open(cluster_file().c_str(), &cluster_);
  ASSERT_EQ(r, BLOCKPS_OK) << outcome(r);
  std::vector<float> buf(kModelBytes / 4);
  ASSERT_EQ(blockps_pull(cluster_, buf.data(), kModelBytes), BLOCKPS_OK) << blockps_last_error();
  ASSERT_TRUE(tgtd_[1].kill9().ok());
  r = blockps_pull(cluster_, buf.data(), kModelBytes);
  EXPECT_EQ(r, BLOCKPS_ERR_IO) << outcome(r);
  const std::string lu = "shard 'shard1' grad LU (" + tgtd_[1].url(shard_iqn(1), 1) + "): ";
  EXPECT_NE(std::string(blockps_last_error()).find(lu + "read of "), std::string::npos) << blockps_last_error();
  blockps_op* op = nullptr;
  r = blockps_push_async(cluster_, buf.data(), kModelBytes, &op);
  ASSERT_EQ(r, BLOCKPS_OK) << outcome(r);
  r = blockps_op_wait(op);
  EXPECT_EQ(r, BLOCKPS_ERR_IO) << outcome(r);
  EXPECT_NE(std::string(blockps_last_error()).find("shard 'shard1'"), std::string::npos) << blockps_last_error();
  blockps_op_free(op);

  r = blockps_cluster_open(cluster_file().c_str(), &other);
  EXPECT_EQ(r, BLOCKPS_ERR_CONNECT) << outcome(r);
  EXPECT_EQ(other, nullptr);
  EXPECT_NE(std::string(blockps_last_error()).find("shard 'shard1' grad LU"), std::string::npos)
      << blockps_last_error();
}

// An elastic job's start (issue 51) through the C API: three workers of their own (their own iSCSI names). C is granted
// first and its set_weights fails: its result comes back, A then waits its patience out (the error names C), and once
// C's sessions closed the grant lapses. A is granted and sets the weights slowly while B asks: B waits until they are
// set and finds A's weights.
struct Setter {
  blockps_cluster* cluster = nullptr;
  std::vector<float> weights;
  std::promise<void> granted;
  blockps_result result = BLOCKPS_OK;
};

blockps_result set_slowly(void* user) {
  auto* s = static_cast<Setter*>(user);
  s->granted.set_value();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // B asks meanwhile
  return blockps_write_weights(s->cluster, s->weights.data(), kModelBytes);
}

blockps_result set_fails(void* user) { return static_cast<Setter*>(user)->result; }

TEST_F(ClientCTest, TheFirstWorkerToAskSetsTheWeightsAndTheOthersWaitForThem) {
  blockps_cluster *a = nullptr, *b = nullptr, *c = nullptr;
  const std::string iqn = "iqn.2026-11.io.blockps:capi-elastic-";
  ASSERT_EQ(blockps_cluster_open(cluster_file(kBlockBytes, iqn + "a").c_str(), &a), BLOCKPS_OK) << blockps_last_error();
  ASSERT_EQ(blockps_cluster_open(cluster_file(kBlockBytes, iqn + "b").c_str(), &b), BLOCKPS_OK) << blockps_last_error();
  ASSERT_EQ(blockps_cluster_open(cluster_file(kBlockBytes, iqn + "c").c_str(), &c), BLOCKPS_OK) << blockps_last_error();
  int set_them = -1;
  Setter failing;
  failing.result = BLOCKPS_ERR_IO;
  EXPECT_EQ(blockps_set_or_take_weights(c, set_fails, &failing, 1000, &set_them), BLOCKPS_ERR_IO);
  EXPECT_EQ(set_them, -1);
  blockps_result r = blockps_set_or_take_weights(a, set_fails, &failing, 300, &set_them);
  EXPECT_EQ(r, BLOCKPS_ERR_IO) << outcome(r);
  EXPECT_NE(std::string(blockps_last_error()).find(iqn + "c holds the init-weights grant"), std::string::npos)
      << blockps_last_error();
  blockps_cluster_close(c);  // its sessions end: the grant lapses at the shard's next look

  Setter setter;
  setter.cluster = a;
  setter.weights = whole_numbers(kModelBytes / 4, 5);
  std::future<blockps_result> first = std::async(std::launch::async, [&] {
    int set = -1;
    const blockps_result done = blockps_set_or_take_weights(a, set_slowly, &setter, 10000, &set);
    return done == BLOCKPS_OK && set == 1 ? BLOCKPS_OK : BLOCKPS_ERR_INTERNAL;
  });
  setter.granted.get_future().wait();
  Setter never_called;
  never_called.result = BLOCKPS_ERR_INTERNAL;
  r = blockps_set_or_take_weights(b, set_fails, &never_called, 10000, &set_them);
  ASSERT_EQ(r, BLOCKPS_OK) << outcome(r);
  EXPECT_EQ(set_them, 0) << "B asked second: A sets them";
  EXPECT_EQ(first.get(), BLOCKPS_OK) << "A was granted and set them";
  std::vector<float> taken(kModelBytes / 4, -1.0f);
  ASSERT_EQ(blockps_read_weights(b, taken.data(), kModelBytes), BLOCKPS_OK) << blockps_last_error();
  EXPECT_EQ(taken, setter.weights) << "B returned before A's weights were all written";
  r = blockps_set_or_take_weights(b, set_fails, &never_called, 1000, &set_them);
  EXPECT_EQ(r, BLOCKPS_OK) << outcome(r);
  EXPECT_EQ(set_them, 0) << "set weights stay set";
  EXPECT_EQ(blockps_set_or_take_weights(b, set_fails, &never_called, 0, &set_them), BLOCKPS_ERR_INVALID_ARGUMENT);
  blockps_cluster_close(a);
  blockps_cluster_close(b);
}

}  // namespace
}  // namespace blockps::testing
