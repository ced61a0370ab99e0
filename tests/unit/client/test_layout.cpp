// The block mapping: where every block of a model lives under stripe and range, the shards' sizes (with a
// short last block), and the requests runs() makes.
#include <gtest/gtest.h>

#include <map>

#include "blockps/layout.h"

namespace blockps {
namespace {

constexpr std::uint64_t K = 1024;

// Invariants every layout must keep: each model byte on exactly one shard byte, shards packed from 0 without
// holes, shard sizes adding up to the model.
void expect_consistent(const Layout& l) {
  std::vector<std::uint64_t> filled(l.shard_count(), 0);
  std::uint64_t total = 0;
  for (std::size_t s = 0; s < l.shard_count(); ++s) total += l.shard_bytes(s);
  EXPECT_EQ(total, l.model_bytes());
  std::map<std::pair<std::size_t, std::uint64_t>, std::uint64_t> seen;
  for (std::uint64_t b = 0; b < l.block_count(); ++b) {
    const BlockPlace p = l.place(b);
    ASSERT_LT(p.shard, l.shard_count());
    EXPECT_EQ(p.model_offset, b * l.block_bytes());
    EXPECT_EQ(p.bytes, l.bytes_of_block(b));
    EXPECT_TRUE(seen.emplace(std::pair{p.shard, p.shard_offset}, b).second) << "block " << b << " overlaps";
    EXPECT_LE(p.shard_offset + p.bytes, l.shard_bytes(p.shard)) << "block " << b;
    filled[p.shard] += p.bytes;
  }
  for (std::size_t s = 0; s < l.shard_count(); ++s) EXPECT_EQ(filled[s], l.shard_bytes(s)) << "shard " << s;
}

TEST(StripeLayout, BlockIGoesToShardIModS) {
  StripeLayout l(10 * 256 * K, 256 * K, 3);
  ASSERT_EQ(l.block_count(), 10u);
  for (std::uint64_t b = 0; b < 10; ++b) {
    EXPECT_EQ(l.place(b).shard, b % 3);
    EXPECT_EQ(l.place(b).shard_offset, (b / 3) * 256 * K);
  }
  EXPECT_EQ(l.shard_bytes(0), 4 * 256 * K);  // blocks 0 3 6 9
  EXPECT_EQ(l.shard_bytes(1), 3 * 256 * K);
  EXPECT_EQ(l.shard_bytes(2), 3 * 256 * K);
  expect_consistent(l);
}

TEST(StripeLayout, ShortLastBlockShrinksItsShard) {
  StripeLayout l(5 * 64 * K + 4 * K, 64 * K, 2);  // 6 blocks, the last 4K
  ASSERT_EQ(l.block_count(), 6u);
  EXPECT_EQ(l.bytes_of_block(5), 4 * K);
  EXPECT_EQ(l.place(5).shard, 1u);
  EXPECT_EQ(l.shard_bytes(0), 3 * 64 * K);
  EXPECT_EQ(l.shard_bytes(1), 2 * 64 * K + 4 * K);
  expect_consistent(l);
}

TEST(RangeLayout, ContiguousBlocksEarlierShardsGetTheExtra) {
  RangeLayout l(10 * 256 * K, 256 * K, 3);  // 4 + 3 + 3
  EXPECT_EQ(l.first_block(0), 0u);
  EXPECT_EQ(l.first_block(1), 4u);
  EXPECT_EQ(l.first_block(2), 7u);
  const std::size_t expected_shard[] = {0, 0, 0, 0, 1, 1, 1, 2, 2, 2};
  for (std::uint64_t b = 0; b < 10; ++b) {
    EXPECT_EQ(l.place(b).shard, expected_shard[b]) << b;
    EXPECT_EQ(l.place(b).shard_offset, (b - l.first_block(expected_shard[b])) * 256 * K) << b;
  }
  EXPECT_EQ(l.shard_bytes(0), 4 * 256 * K);
  EXPECT_EQ(l.shard_bytes(1), 3 * 256 * K);
  EXPECT_EQ(l.shard_bytes(2), 3 * 256 * K);
  expect_consistent(l);
}

TEST(RangeLayout, ShortLastBlockIsOnTheLastShard) {
  RangeLayout l(6 * 64 * K + 512, 64 * K, 2);  // 7 blocks: 4 + 3, the last 512 bytes
  EXPECT_EQ(l.place(6).shard, 1u);
  EXPECT_EQ(l.shard_bytes(0), 4 * 64 * K);
  EXPECT_EQ(l.shard_bytes(1), 2 * 64 * K + 512);
  expect_consistent(l);
}

TEST(Layout, ManyShapesAreConsistent) {
  for (std::size_t shards = 1; shards <= 5; ++shards) {
    for (std::uint64_t blocks = shards; blocks <= 13; ++blocks) {
      for (std::uint64_t tail : {std::uint64_t{0}, std::uint64_t{512}}) {
        const std::uint64_t size = blocks * 4 * K - (tail != 0 ? 4 * K - tail : 0);
        SCOPED_TRACE(std::to_string(shards) + " shards, " + std::to_string(size) + " bytes");
        expect_consistent(StripeLayout(size, 4 * K, shards));
        expect_consistent(RangeLayout(size, 4 * K, shards));
      }
    }
  }
}

TEST(Layout, StripeRunsAreContiguousOnTheShardAndScatteredInTheModel) {
  StripeLayout l(8 * 256 * K, 256 * K, 2);
  const auto runs = l.runs(0, 8, 1024 * K);  // 4 blocks per shard = one 1M run each
  ASSERT_EQ(runs.size(), 2u);
  for (const ShardRun& r : runs) {
    EXPECT_EQ(r.shard_offset, 0u);
    EXPECT_EQ(r.bytes, 1024 * K);
    ASSERT_EQ(r.pieces.size(), 4u);
    for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(r.pieces[i].model_offset, (2 * i + r.shard) * 256 * K);
  }
  // A smaller limit splits them; a limit under one block still gives one block per run.
  EXPECT_EQ(l.runs(0, 8, 512 * K).size(), 4u);
  EXPECT_EQ(l.runs(0, 8, 1).size(), 8u);
  // A block range in the middle.
  const auto mid = l.runs(3, 3, 1024 * K);  // blocks 3, 4, 5: shard 1 gets 3 and 5, shard 0 gets 4
  ASSERT_EQ(mid.size(), 2u);
  std::uint64_t bytes = 0;
  for (const ShardRun& r : mid) bytes += r.bytes;
  EXPECT_EQ(bytes, 3 * 256 * K);
}

TEST(Layout, RangeRunsMergeIntoOnePiece) {
  RangeLayout l(9 * 256 * K + 512, 256 * K, 2);  // 10 blocks: 5 + 5, the last 512 bytes
  const auto runs = l.runs(0, 10, 4096 * K);
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].pieces.size(), 1u);
  EXPECT_EQ(runs[0].bytes, 5 * 256 * K);
  EXPECT_EQ(runs[1].pieces.size(), 1u);
  EXPECT_EQ(runs[1].pieces[0].model_offset, 5 * 256 * K);
  EXPECT_EQ(runs[1].bytes, 4 * 256 * K + 512);
}

}  // namespace
}  // namespace blockps
