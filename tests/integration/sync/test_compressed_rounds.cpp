// compress= through tgtd and the C API (issue 50): two workers, each its own C cluster (its own initiator, so its own
// session on every shard), exchange with two averaging shards (opt=average;mode=sync;workers=2;compress=sign1;
// compress_after=1), each shard its own tgtd. The warm-up round goes in full precision; the compressed rounds go as
// one compressed WRITE per block, and both workers get back, bit for bit, the average of their decoded pushes (in the
// shard's IQN order) compressed with the shard's error feedback, which the weights LU holds decoded. A push of the
// other form is refused with nothing applied; the C API's compress and decompress are the library's; bad arguments
// are refused before any I/O.
#include <blockps/blockps.h>
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <future>
#include <random>
#include <string>
#include <vector>

#include "tests/support/blockps_shard.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tgtd_instance.h"

namespace blockps::testing {
namespace {

constexpr std::uint64_t K = 1024;
constexpr int kShards = 2;
constexpr std::uint64_t kModelBytes = 512 * K, kBlockBytes = 64 * K, kShardBytes = kModelBytes / kShards;
constexpr std::uint64_t kBlocks = kModelBytes / kBlockBytes, kBlockElements = kBlockBytes / 4;
constexpr blockps_compressed_format kSign1 = BLOCKPS_COMPRESSED_SIGN1;

std::string shard_iqn(int s) { return "iqn.2026-11.io.blockps:compressed-shard" + std::to_string(s); }
std::string outcome(blockps_result r) { return std::string(blockps_result_name(r)) + ": " + blockps_last_error(); }

std::vector<float> gradient(std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(kModelBytes / 4);
  for (float& x : v) x = dist(gen);
  return v;
}

// Every block of `x` compressed with its residual (error feedback), packed.
std::vector<std::byte> compress_blocks(const std::vector<float>& x, std::vector<float>& residual) {
  const std::size_t per_block = blockps_compressed_block_bytes(kSign1, kBlockElements);
  std::vector<std::byte> packed(kBlocks * per_block);
  for (std::uint64_t b = 0; b < kBlocks; ++b) {
    const blockps_result r =
        blockps_compress(kSign1, x.data() + b * kBlockElements, residual.data() + b * kBlockElements, kBlockElements,
                         packed.data() + b * per_block, per_block);
    EXPECT_EQ(r, BLOCKPS_OK) << outcome(r);
  }
  return packed;
}

std::vector<float> decompress_blocks(const std::vector<std::byte>& packed) {
  const std::size_t per_block = blockps_compressed_block_bytes(kSign1, kBlockElements);
  std::vector<float> out(kModelBytes / 4);
  for (std::uint64_t b = 0; b < kBlocks; ++b) {
    const blockps_result r = blockps_decompress(kSign1, packed.data() + b * per_block, per_block,
                                                out.data() + b * kBlockElements, kBlockElements);
    EXPECT_EQ(r, BLOCKPS_OK) << outcome(r);
  }
  return out;
}

class CompressedRoundsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    BLOCKPS_REQUIRE_TGTD_AND_MODULE();
    ASSERT_TRUE(dir_.create("blockps-compressed-").ok());
    for (int s = 0; s < kShards; ++s) {
      const std::string shape = "size=" + std::to_string(kShardBytes) + ";block=" + std::to_string(kBlockBytes) +
                                ";opt=average;mode=sync;workers=2;min_workers=2;straggler_ms=60000;"
                                "compress=sign1;compress_after=1";
      const Status st =
          add_blockps_shard(tgtd_[s], 1, shard_iqn(s), dir_.path("shard" + std::to_string(s) + ".ckpt"), shape);
      ASSERT_TRUE(st.ok()) << st.message();
    }
    for (int w = 0; w < 2; ++w) {
      const blockps_result r = blockps_cluster_open(cluster_file(w).c_str(), &workers_[w]);
      ASSERT_EQ(r, BLOCKPS_OK) << outcome(r);
    }
  }
  void TearDown() override {
    for (blockps_cluster* c : workers_) blockps_cluster_close(c);
    if (!HasFailure()) return;
    for (int s = 0; s < kShards; ++s)
      if (tgtd_[s].running()) std::cerr << "---- shard " << s << " tgtd log ----\n" << tgtd_[s].log_text() << "\n";
  }
  // Worker w's cluster file: its own initiator name ("...-a" sorts before "...-b": the shards sum a, then b).
  std::string cluster_file(int w) {
    std::string text = "[model]\nsize = " + std::to_string(kModelBytes) +
                       "\ndtype = \"f32\"\nblock = " + std::to_string(kBlockBytes) +
                       "\n[client]\ninitiator = \"iqn.2026-11.io.blockps:worker-" +
                       std::string(1, static_cast<char>('a' + w)) + "\"\nreconnect_s = 0\n";
    for (int s = 0; s < kShards; ++s) {
      text += "[[shard]]\nname = \"shard" + std::to_string(s) + "\"\n";
      text += "grad = \"" + tgtd_[s].url(shard_iqn(s), 1) + "\"\n";
      text += "weights = \"" + tgtd_[s].url(shard_iqn(s), 2) + "\"\n";
      text += "status = \"" + tgtd_[s].url(shard_iqn(s), 3) + "\"\n";
    }
    const std::string path = dir_.path("cluster-" + std::to_string(w) + ".toml");
    std::ofstream(path) << text;
    return path;
  }
  // Both workers' compressed exchanges of the whole model, at once (a round needs both); what each pulled.
  std::vector<std::vector<std::byte>> compressed_round(const std::vector<std::byte> (&pushed)[2]) {
    std::vector<std::vector<std::byte>> pulled(2, std::vector<std::byte>(pushed[0].size()));
    std::future<blockps_result> other = std::async(std::launch::async, [&] {
      return blockps_exchange_compressed_blocks(workers_[1], 0, kBlocks, kSign1, BLOCKPS_PULL_COMPRESSED_AVERAGE,
                                                pushed[1].data(), pushed[1].size(), pulled[1].data(), pulled[1].size());
    });
    const blockps_result mine =
        blockps_exchange_compressed_blocks(workers_[0], 0, kBlocks, kSign1, BLOCKPS_PULL_COMPRESSED_AVERAGE,
                                           pushed[0].data(), pushed[0].size(), pulled[0].data(), pulled[0].size());
    EXPECT_EQ(mine, BLOCKPS_OK) << outcome(mine);
    const blockps_result theirs = other.get();
    EXPECT_EQ(theirs, BLOCKPS_OK) << blockps_result_name(theirs);
    return pulled;
  }

  TempDir dir_;
  TgtdInstance tgtd_[kShards];
  blockps_cluster* workers_[2] = {nullptr, nullptr};
};

TEST_F(CompressedRoundsTest, AfterAFullPrecisionWarmUpEveryWorkerPullsTheCompressedAverageWithTheShardsFeedback) {
  // Round 0, the warm-up: the plain exchange, full precision.
  const std::vector<float> g0[2] = {gradient(1), gradient(2)};
  std::vector<float> pulled0[2] = {std::vector<float>(kModelBytes / 4), std::vector<float>(kModelBytes / 4)};
  std::future<blockps_result> other = std::async(
      std::launch::async, [&] { return blockps_exchange(workers_[1], g0[1].data(), pulled0[1].data(), kModelBytes); });
  blockps_result r = blockps_exchange(workers_[0], g0[0].data(), pulled0[0].data(), kModelBytes);
  ASSERT_EQ(r, BLOCKPS_OK) << outcome(r);
  ASSERT_EQ(other.get(), BLOCKPS_OK);
  std::vector<float> average0(kModelBytes / 4);
  for (std::size_t i = 0; i < average0.size(); ++i) average0[i] = (g0[0][i] + g0[1][i]) * 0.5f;
  EXPECT_EQ(pulled0[0], average0);
  EXPECT_EQ(pulled0[1], average0);

  // Round 1: each worker compresses with its own residual; the shard sums the decoded pushes (worker a, then b),
  // halves, compresses the average with its residual (zero so far), and keeps what the workers decode.
  std::vector<float> residual[2] = {std::vector<float>(kModelBytes / 4), std::vector<float>(kModelBytes / 4)};
  std::vector<float> shard_residual(kModelBytes / 4, 0.0f);
  const std::size_t packed = blockps_packed_bytes(workers_[0], kSign1, 0, kBlocks);
  ASSERT_EQ(packed, kBlocks * blockps_compressed_block_bytes(kSign1, kBlockElements));
  // 16Ki elements a block: 256 B of scales and 2 KiB of bits, padded to 2560 B (25.6x; 28.4x at 64Ki-element blocks).
  EXPECT_EQ(packed, kBlocks * 2560);
  for (std::uint32_t round = 1; round <= 2; ++round) {
    const std::vector<float> g[2] = {gradient(10 * round), gradient(10 * round + 1)};
    const std::vector<std::byte> pushed[2] = {compress_blocks(g[0], residual[0]), compress_blocks(g[1], residual[1])};
    const std::vector<float> da = decompress_blocks(pushed[0]), db = decompress_blocks(pushed[1]);
    std::vector<float> average(kModelBytes / 4);
    for (std::size_t i = 0; i < average.size(); ++i) average[i] = (da[i] + db[i]) * 0.5f;
    const std::vector<std::byte> expected = compress_blocks(average, shard_residual);

    if (round == 2) {
      // A full-precision push in a compressed round: refused, nothing applied (the round still needs both).
      std::vector<float> pulled(kModelBytes / 4);
      r = blockps_exchange_blocks(workers_[0], 0, 1, g[0].data(), pulled.data(), kBlockBytes);
      EXPECT_EQ(r, BLOCKPS_ERR_IO) << outcome(r);
      EXPECT_NE(std::string(blockps_last_error()).find("ILLEGAL_REQUEST(0x05) INVALID_FIELD_IN_PARAMETER_LIST"),
                std::string::npos)
          << blockps_last_error();
      EXPECT_NE(tgtd_[0].log_text().find("compress=sign1: a push of 65536 bytes at byte 0 of block 0 in its round 2 "
                                         "is refused, nothing applied"),
                std::string::npos);
    }
    const std::vector<std::vector<std::byte>> pulled = compressed_round(pushed);
    EXPECT_TRUE(pulled[0] == expected) << "round " << round << ": not the shard's compressed average, bit for bit";
    EXPECT_TRUE(pulled[1] == expected) << "round " << round;
    std::vector<float> weights(kModelBytes / 4);
    r = blockps_read_weights(workers_[0], weights.data(), kModelBytes);
    ASSERT_EQ(r, BLOCKPS_OK) << outcome(r);
    EXPECT_EQ(weights, decompress_blocks(expected)) << "the weights LU holds what the workers decode";
  }

  // Bad arguments, refused before any I/O.
  std::vector<std::byte> small(512), into(512);
  r = blockps_exchange_compressed_blocks(workers_[0], 0, kBlocks, kSign1, BLOCKPS_PULL_COMPRESSED_AVERAGE, small.data(),
                                         small.size(), into.data(), into.size());
  EXPECT_EQ(r, BLOCKPS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(blockps_last_error()),
            "exchange_compressed: the compressed gradient buffer (sign1) holds 512 bytes, blocks [0, 8) are " +
                std::to_string(packed) + " bytes");
  r = blockps_exchange_compressed_blocks(workers_[0], 0, 1, 7, BLOCKPS_PULL_WEIGHTS, small.data(), small.size(),
                                         into.data(), into.size());
  EXPECT_EQ(r, BLOCKPS_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(blockps_last_error()).find("unknown compressed format 7"), std::string::npos);
  const std::vector<float> nan_block(kBlockElements, std::nanf(""));
  std::vector<std::byte> block(blockps_compressed_block_bytes(kSign1, kBlockElements));
  r = blockps_compress(kSign1, nan_block.data(), nullptr, kBlockElements, block.data(), block.size());
  EXPECT_EQ(r, BLOCKPS_ERR_INVALID_ARGUMENT);
}

}  // namespace
}  // namespace blockps::testing
