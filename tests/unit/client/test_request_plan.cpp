// A Cluster request cut into each shard's commands (client/request_plan.h): the refusals of a request outside the
// model or with buffers of another size, runs within the caps, and an exchange's READs after its WRITEs, each waiting
// for its own, cut into slices a shard. No shard: the commands are compared as planned.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "blockps/layout.h"
#include "client/request_plan.h"

namespace blockps::detail {
namespace {

constexpr std::uint64_t kBlock = 4096;

// A model of `blocks` blocks striped over `shards`, and buffers that fit [first, first + count).
struct Model {
  std::unique_ptr<Layout> layout;
  std::vector<std::byte> data, pulled;
  Model(std::uint64_t blocks, std::size_t shards, LayoutKind kind = LayoutKind::stripe)
      : layout(make_layout(kind, blocks * kBlock, kBlock, shards)), data(blocks * kBlock), pulled(blocks * kBlock) {}
  Buffers buffers(std::uint64_t count) { return {data.data(), count * kBlock, pulled.data(), count * kBlock}; }
};

TEST(CheckRequest, BlocksOutsideTheModelAreRefusedNamingTheCall) {
  Model m(8, 2);
  const Status s = check_request(*m.layout, Transfer::push, 6, 3, m.buffers(3));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::invalid_argument);
  EXPECT_EQ(s.message(), "push: blocks [6, 9) are outside the model's 8 blocks");
  EXPECT_FALSE(check_request(*m.layout, Transfer::pull, 9, 0, m.buffers(0)).ok()) << "first block past the end";
  EXPECT_TRUE(check_request(*m.layout, Transfer::pull, 8, 0, m.buffers(0)).ok()) << "an empty request at the end";
}

TEST(CheckRequest, ABufferOfAnotherSizeIsRefusedNamingWhichBuffer) {
  Model m(8, 2);
  Buffers b = m.buffers(2);
  b.data_bytes -= 1;
  EXPECT_EQ(check_request(*m.layout, Transfer::read_weights, 0, 2, b).message(),
            "read_weights: the buffer holds 8191 bytes, blocks [0, 2) are 8192 bytes");
  b = m.buffers(2);
  b.pulled_bytes = 0;
  EXPECT_EQ(check_request(*m.layout, Transfer::exchange, 0, 2, b).message(),
            "exchange: the weights buffer holds 0 bytes, blocks [0, 2) are 8192 bytes");
  EXPECT_TRUE(check_request(*m.layout, Transfer::push, 0, 2, b).ok()) << "only an exchange reads into `pulled`";
}

TEST(PlanRequest, APushIsRunsOfEachShardsBlocksWithinTheWriteCap) {
  Model m(8, 2);
  const auto parts = plan_request(*m.layout, {.write_bytes = 2 * kBlock, .read_bytes = 64 * kBlock}, Transfer::push, 0,
                                  8, m.buffers(8));
  ASSERT_EQ(parts.size(), 2u);
  for (std::size_t shard = 0; shard < 2; ++shard) {
    // Blocks shard, shard + 2, ... : 4 blocks a shard, contiguous on its LU, 2 a command.
    ASSERT_EQ(parts[shard].commands.size(), 2u);
    for (std::size_t c = 0; c < 2; ++c) {
      const LuCommand& cmd = parts[shard].commands[c];
      EXPECT_EQ(cmd.direction, IoDirection::write);
      EXPECT_EQ(cmd.offset, c * 2 * kBlock);
      EXPECT_EQ(cmd.bytes(), 2 * kBlock);
      ASSERT_EQ(cmd.segments.size(), 2u) << "a stripe run is one segment per block of the model";
      EXPECT_EQ(cmd.segments[0].data, m.data.data() + (shard + 4 * c) * kBlock);
      EXPECT_EQ(parts[shard].model_offsets[c], (shard + 4 * c) * kBlock);
    }
  }
}

TEST(PlanRequest, AReadUsesTheReadCapAndAPartialRequestOffsetsIntoTheBuffer) {
  Model m(8, 2, LayoutKind::range);
  const auto parts =
      plan_request(*m.layout, {.write_bytes = kBlock, .read_bytes = 64 * kBlock}, Transfer::pull, 2, 4, m.buffers(4));
  // range: shard 0 holds blocks 0-3, shard 1 blocks 4-7; blocks 2-5 are one READ on each.
  ASSERT_EQ(parts[0].commands.size(), 1u);
  ASSERT_EQ(parts[1].commands.size(), 1u);
  EXPECT_EQ(parts[0].commands[0].direction, IoDirection::read);
  EXPECT_EQ(parts[0].commands[0].offset, 2 * kBlock);
  EXPECT_EQ(parts[0].commands[0].segments[0].data, m.data.data()) << "block 2 is the buffer's first byte";
  EXPECT_EQ(parts[1].commands[0].offset, 0u);
  EXPECT_EQ(parts[1].commands[0].segments[0].data, m.data.data() + 2 * kBlock);
}

TEST(PlanRequest, AnExchangeReadsEachWriteBackAfterItIntoThePulledBuffer) {
  Model m(64, 2);
  const auto parts = plan_request(*m.layout, {.write_bytes = 64 * kBlock, .read_bytes = 64 * kBlock},
                                  Transfer::exchange, 0, 64, m.buffers(64));
  for (const ShardCommands& part : parts) {
    // 32 blocks a shard cut into kExchangeSlices WRITEs of 4 blocks, then their READs.
    ASSERT_EQ(part.commands.size(), 2 * kExchangeSlices);
    for (std::size_t w = 0; w < kExchangeSlices; ++w) {
      const LuCommand& write = part.commands[w];
      const LuCommand& read = part.commands[kExchangeSlices + w];
      EXPECT_EQ(write.direction, IoDirection::write);
      EXPECT_EQ(write.bytes(), 4 * kBlock);
      EXPECT_EQ(read.direction, IoDirection::read);
      EXPECT_EQ(read.after, w) << "each READ waits for its own WRITE";
      EXPECT_EQ(read.offset, write.offset);
      EXPECT_EQ(read.segments[0].data - m.pulled.data(), write.segments[0].data - m.data.data());
      EXPECT_EQ(part.model_offsets[kExchangeSlices + w], part.model_offsets[w]);
    }
  }
}

TEST(PlanRequest, AnExchangeOfFewBlocksIsAtLeastABlockACommand) {
  Model m(4, 2);
  const auto parts = plan_request(*m.layout, {.write_bytes = 64 * kBlock, .read_bytes = 64 * kBlock},
                                  Transfer::exchange, 0, 4, m.buffers(4));
  for (const ShardCommands& part : parts) {
    ASSERT_EQ(part.commands.size(), 4u) << "2 blocks a shard: a WRITE and a READ each";
    for (const LuCommand& c : part.commands) EXPECT_EQ(c.bytes(), kBlock);
  }
}

// A compressed exchange: a WRITE of each block's compressed image at the block's first byte, its READ after it, of
// the image (an averaging shard) or of the whole block (weights); packed buffers hold the images back to back.
TEST(PlanCompressedExchange, EachBlockIsOneWriteOfItsImageAndOneReadAfterIt) {
  // 5 blocks of 1024 f32 and a last one of 256 (5 x 4096 + 1024 bytes), striped over 2 shards.
  const auto layout = make_layout(LayoutKind::stripe, 5 * kBlock + 1024, kBlock, 2);
  const CompressedExchange averaged{CompressedFormat::sign1, 4, true}, weights{CompressedFormat::sign1, 4, false};
  // sign1 of 1024 elements: 16 B of scales and 128 B of bits, padded to 512; of 256: 4 + 32, padded to 512.
  EXPECT_EQ(packed_bytes(*layout, averaged, 0, 6), 6 * 512u);
  EXPECT_EQ(packed_bytes(*layout, CompressedExchange{CompressedFormat::int8, 4, true}, 4, 2), 1536u + 512u);
  std::vector<std::byte> packed(packed_bytes(*layout, averaged, 2, 4)), pulled(packed.size()),
      block_weights(4 * kBlock);
  const Buffers buffers{packed.data(), packed.size(), pulled.data(), pulled.size()};
  ASSERT_TRUE(check_compressed_exchange(*layout, averaged, 2, 4, buffers).ok());
  const auto parts = plan_compressed_exchange(*layout, averaged, 2, 4, buffers);
  for (std::size_t s = 0; s < 2; ++s) {
    const ShardCommands& part = parts[s];
    ASSERT_EQ(part.commands.size(), 4u) << "two blocks of each shard: two WRITEs, then their READs";
    for (std::size_t w = 0; w < 2; ++w) {
      const std::uint64_t block = 2 + s + 2 * w;  // stripe: shard s holds the blocks b with b % 2 == s
      const LuCommand& write = part.commands[w];
      const LuCommand& read = part.commands[2 + w];
      EXPECT_EQ(write.direction, IoDirection::write);
      EXPECT_EQ(write.offset, layout->place(block).shard_offset);
      EXPECT_EQ(write.bytes(), 512u);
      EXPECT_EQ(write.segments[0].data - packed.data(), static_cast<std::ptrdiff_t>((block - 2) * 512));
      EXPECT_EQ(read.direction, IoDirection::read);
      EXPECT_EQ(read.after, w);
      EXPECT_EQ(read.offset, write.offset);
      EXPECT_EQ(read.segments[0].data - pulled.data(), write.segments[0].data - packed.data());
      EXPECT_EQ(read.bytes(), 512u);
    }
  }
  // Weights back: each READ takes the whole block into the wire-dtype buffer.
  const Buffers for_weights{packed.data(), packed.size(), block_weights.data(), block_weights.size() - 3072};
  ASSERT_TRUE(check_compressed_exchange(*layout, weights, 2, 4, for_weights).ok())
      << check_compressed_exchange(*layout, weights, 2, 4, for_weights).message();
  const auto weight_parts = plan_compressed_exchange(*layout, weights, 2, 4, for_weights);
  const LuCommand& last_read = weight_parts[1].commands[3];  // block 5, the short one
  EXPECT_EQ(last_read.bytes(), 1024u);
  EXPECT_EQ(last_read.segments[0].data - block_weights.data(), static_cast<std::ptrdiff_t>(3 * kBlock));
  // Refusals name the buffer and the sizes.
  const Buffers short_push{packed.data(), 100, pulled.data(), pulled.size()};
  EXPECT_EQ(
      check_compressed_exchange(*layout, averaged, 2, 4, short_push).message(),
      "exchange_compressed: the compressed gradient buffer (sign1) holds 100 bytes, blocks [2, 6) are 2048 bytes");
  EXPECT_EQ(check_compressed_exchange(*layout, averaged, 5, 2, buffers).message(),
            "exchange_compressed: blocks [5, 7) are outside the model's 6 blocks");
}

TEST(Transfers, NamesAndLus) {
  EXPECT_STREQ(name_of(Transfer::assign_weights), "write_weights");
  EXPECT_TRUE(writes(Transfer::exchange));
  EXPECT_FALSE(writes(Transfer::read_weights));
  EXPECT_TRUE(uses_weights_lu(Transfer::read_weights));
  EXPECT_FALSE(uses_weights_lu(Transfer::pull));
}

}  // namespace
}  // namespace blockps::detail
