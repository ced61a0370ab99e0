// How a push is cut into blocks and sectors, and how a contribution's sectors are claimed and land.
#include <gtest/gtest.h>

#include "ps_backend/rounds/contribution.h"
#include "tests/unit/ps_backend/rounds/rounds_fixture.h"

namespace blockps::unit {
namespace {

const ShardGeometry kF32{kShardBytes, WireDtype::f32, kBlockBytes};

TEST(SplitIntoBlocks, AWriteIsCutAtBlockBoundariesInSectorsAndElements) {
  const auto spans = split_into_blocks(kF32, 512, 2 * kBlockBytes);  // half of block 0, block 1, half of block 2
  ASSERT_EQ(spans.size(), 3u);
  EXPECT_EQ(spans[0].block, 0u);
  EXPECT_EQ(spans[0].data_offset, 0u);
  EXPECT_EQ(spans[0].first_sector, 1u);
  EXPECT_EQ(spans[0].sectors, 1u);
  EXPECT_EQ(spans[0].element_in_block, 128u);
  EXPECT_EQ(spans[0].elements, 128u);
  EXPECT_EQ(spans[1].block, 1u);
  EXPECT_EQ(spans[1].data_offset, 512u);
  EXPECT_EQ(spans[1].first_sector, 0u);
  EXPECT_EQ(spans[1].sectors, 2u);
  EXPECT_EQ(spans[1].elements, 256u);
  EXPECT_EQ(spans[2].block, 2u);
  EXPECT_EQ(spans[2].data_offset, 1536u);
  EXPECT_EQ(spans[2].sectors, 1u);
}

TEST(SplitIntoBlocks, ElementsFollowTheWireDtype) {
  const auto spans = split_into_blocks({kShardBytes, WireDtype::bf16, kBlockBytes}, kBlockBytes, 512);
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_EQ(spans[0].element_in_block, 0u);
  EXPECT_EQ(spans[0].elements, 256u);
}

TEST(SplitIntoBlocks, ARangeThatIsNotWholeSectorsInsideTheShardGivesNoSpans) {
  EXPECT_TRUE(split_into_blocks(kF32, 0, 0).empty());
  EXPECT_TRUE(split_into_blocks(kF32, 4, 512).empty());
  EXPECT_TRUE(split_into_blocks(kF32, 0, 500).empty());
  EXPECT_TRUE(split_into_blocks(kF32, kShardBytes - 512, 1024).empty());
  EXPECT_TRUE(split_into_blocks(kF32, UINT64_MAX - 511, 1024).empty()) << "offset + len wraps";
}

TEST(Contribution, SectorsAreClaimedThenLandAndTheBlockIsCompleteWhenAllHave) {
  Contribution c(kF32, 1, 7, kA, true);
  EXPECT_EQ(c.itn, kA.itn);
  EXPECT_EQ(c.iqn, kA.iqn);
  EXPECT_EQ(c.round, 7u);
  EXPECT_EQ(c.sectors, 2u);
  EXPECT_EQ(c.elements, 256u);
  const auto spans = split_into_blocks(kF32, kBlockBytes + 512, 512);  // block 1's second sector
  ASSERT_EQ(spans.size(), 1u);
  const auto first = split_into_blocks(kF32, kBlockBytes, 512);
  EXPECT_FALSE(c.claims_any(spans[0]));
  c.claim(spans[0]);
  EXPECT_TRUE(c.claims_any(spans[0]));
  EXPECT_FALSE(c.claims_any(first[0]));
  EXPECT_TRUE(c.in_flight());
  EXPECT_FALSE(c.fully_claimed());
  c.landed_n += 1;
  EXPECT_FALSE(c.in_flight());
  EXPECT_FALSE(c.complete());
  c.claim(first[0]);
  c.landed_n += 1;
  EXPECT_TRUE(c.fully_claimed());
  EXPECT_TRUE(c.complete());
}

TEST(Contribution, TheLastBlockOfAShardMayBeShorter) {
  const ShardGeometry g{3 * kBlockBytes + 512, WireDtype::f32, kBlockBytes};
  Contribution c(g, 3, 0, kA, true);
  EXPECT_EQ(c.sectors, 1u);
  EXPECT_EQ(c.elements, 128u);
  EXPECT_EQ(Contribution(g, 3, 0, kA, false).elements, 0u) << "not decoded: no gradient kept";
}

TEST(Contribution, ASpansDataIsDecodedIntoItsPlaceInTheBlock) {
  Contribution c(kF32, 0, 0, kA, true);
  const auto data = gradient(kBlockBytes, 3);  // a WRITE of block 0 and 1's first half, from byte 512
  const auto spans = split_into_blocks(kF32, 512, kBlockBytes);
  ASSERT_EQ(spans.size(), 2u);
  ASSERT_TRUE(c.decode(WireDtype::f32, spans[0], data).ok());
  ASSERT_EQ(c.grad.size(), 256u);
  EXPECT_EQ(c.grad[0], 0.0f) << "the first sector was not in the WRITE";
  for (std::size_t i = 0; i < 128; ++i) EXPECT_EQ(c.grad[128 + i], f32_at(data, i));
}

}  // namespace
}  // namespace blockps::unit
