// compress= on a sync shard (issue 50): an averaging shard's compressed averages with their error feedback
// (CompressedAverages), and the rounds that take compressed pushes after the full-precision warm-up: the form each
// round takes, what is refused with nothing applied, and the average the shard applies or serves. Through tgtd and
// an initiator: tests/integration/sync/test_compressed_rounds.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "ps_backend/rounds/compressed_averages.h"
#include "tests/unit/ps_backend/rounds/rounds_fixture.h"

namespace blockps::unit {
namespace {

constexpr std::size_t kElements = kBlockBytes / 4;  // one block: 256 f32, one chunk

std::vector<float> values(std::size_t n, float seed) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = seed * std::sin(0.37f * static_cast<float>(i) + seed);
  return v;
}

std::vector<std::byte> compressed(CompressedFormat f, const std::vector<float>& x) {
  std::vector<std::byte> out(compressed_block_bytes(f, x.size()));
  EXPECT_TRUE(compress(f, x, {}, out).ok());
  return out;
}

std::vector<float> decoded(CompressedFormat f, const std::vector<std::byte>& block, std::size_t n) {
  std::vector<float> out(n);
  EXPECT_TRUE(decompress(f, block, out).ok());
  return out;
}

TEST(CompressedAverages, APublishedAverageIsReadAsItsCompressedBlockAndTheResidualCarriesWhatItLeftOut) {
  const ShardGeometry g{kShardBytes, WireDtype::f32, kBlockBytes};
  CompressedAverages averages(g, CompressedFormat::sign1);
  std::vector<std::byte> out(kBlockBytes, std::byte{0x55});
  EXPECT_FALSE(averages.read(1, 0, out)) << "no compressed round yet: the shard reads its weights";

  const std::vector<float> first = values(kElements, 1.0f);
  std::vector<float> average = first;
  ASSERT_TRUE(averages.publish(1, average).ok());
  const std::vector<std::byte> image = compressed(CompressedFormat::sign1, first);
  EXPECT_EQ(average, decoded(CompressedFormat::sign1, image, kElements)) << "the average becomes what workers decode";
  ASSERT_TRUE(averages.read(1, 0, out));
  EXPECT_TRUE(std::equal(image.begin(), image.end(), out.begin()));
  EXPECT_TRUE(std::all_of(out.begin() + static_cast<std::ptrdiff_t>(image.size()), out.end(), [](std::byte b) {
    return b == std::byte{0};
  })) << "the rest of the block's range reads as zeros";
  std::vector<std::byte> tail(16);
  ASSERT_TRUE(averages.read(1, 8, tail));
  EXPECT_TRUE(std::equal(tail.begin(), tail.end(), image.begin() + 8)) << "a READ inside the block reads its bytes";

  // The error-feedback identity: the residual is what the decoded average lacks, and the next round compresses
  // its average plus that residual.
  const std::vector<float> residual = averages.residual(1);
  for (std::size_t i = 0; i < kElements; ++i) EXPECT_EQ(residual[i], first[i] - average[i]) << i;
  const std::vector<float> second = values(kElements, -0.5f);
  std::vector<float> with_feedback(kElements);
  for (std::size_t i = 0; i < kElements; ++i) with_feedback[i] = second[i] + residual[i];
  average = second;
  ASSERT_TRUE(averages.publish(1, average).ok());
  EXPECT_EQ(average, decoded(CompressedFormat::sign1, compressed(CompressedFormat::sign1, with_feedback), kElements));

  averages.forget(1);
  EXPECT_FALSE(averages.read(1, 0, out)) << "a full-precision round: READs return the weights again";
  averages.reset();
  EXPECT_EQ(averages.residual(1), std::vector<float>(kElements, 0.0f)) << "reset-rounds starts the feedback afresh";
  EXPECT_FALSE(averages.restore_residual(1, std::vector<float>(kElements - 1)));
  EXPECT_TRUE(averages.restore_residual(1, first));
  EXPECT_EQ(averages.residual(1), first);
}

TEST(CompressedAverages, AnAverageThatIsNotFiniteIsRefusedAndTheBlockKeepsItsImage) {
  const ShardGeometry g{kShardBytes, WireDtype::f32, kBlockBytes};
  CompressedAverages averages(g, CompressedFormat::int8);
  std::vector<float> average = values(kElements, 2.0f);
  ASSERT_TRUE(averages.publish(0, average).ok());
  std::vector<std::byte> before(kBlockBytes), after(kBlockBytes);
  ASSERT_TRUE(averages.read(0, 0, before));
  std::vector<float> bad = values(kElements, 3.0f);
  bad[7] = INFINITY;
  EXPECT_EQ(averages.publish(0, bad).code(), StatusCode::invalid_argument);
  ASSERT_TRUE(averages.read(0, 0, after));
  EXPECT_EQ(before, after);
}

// A shard of 4 blocks of 256 f32 with rounds of two workers and compress=FORMAT after `warmup` rounds.
struct CompressedShard {
  ModelShard model;
  Rounds rounds;
  CompressedShard(OptimizerKind kind, CompressedFormat format, std::uint64_t warmup)
      : model({kShardBytes, WireDtype::f32, kBlockBytes}, optimizer(kind), nullptr),
        rounds(model, policy(format, warmup), nullptr) {}
  static OptimizerParams optimizer(OptimizerKind kind) {
    OptimizerParams p = sgd(1.0f);
    p.kind = kind;
    return p;
  }
  static RoundPolicy policy(CompressedFormat format, std::uint64_t warmup) {
    RoundPolicy p = sync_policy(2, 2);
    p.compress = format;
    p.compress_after = warmup;
    return p;
  }
  /// Admit and land a push; the landing's status (run is expected of the admission).
  Status push(const WorkerRef& w, const std::vector<std::byte>& data, std::uint64_t offset) {
    EXPECT_EQ(rounds.admit_push(&data, w, offset, data.size()), Admission::run);
    return rounds.land_push(&data, data);
  }
  std::vector<float> block_weights(std::uint64_t block) const {
    std::vector<float> w = weights(model);
    return {w.begin() + static_cast<std::ptrdiff_t>(block * kElements),
            w.begin() + static_cast<std::ptrdiff_t>((block + 1) * kElements)};
  }
};

std::vector<std::byte> f32_bytes(const std::vector<float>& v) {
  std::vector<std::byte> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

TEST(CompressedRounds, TheWarmUpTakesFullPrecisionThenEachBlockIsOneCompressedWriteAndTheOtherFormIsRefused) {
  CompressedShard s(OptimizerKind::average, CompressedFormat::sign1, 1);
  const std::vector<float> a0 = values(kElements, 1.0f), b0 = values(kElements, -3.0f);
  const std::uint64_t block = 2, at = block * kBlockBytes;
  // Round 0, the warm-up: wire-dtype sectors; a compressed block is refused.
  EXPECT_EQ(s.push(kA, compressed(CompressedFormat::sign1, a0), at).code(), StatusCode::invalid_argument)
      << "a compressed push in the warm-up";
  ASSERT_TRUE(s.push(kA, f32_bytes(a0), at).ok());
  ASSERT_TRUE(s.push(kB, f32_bytes(b0), at).ok());
  std::vector<float> average0(kElements);
  for (std::size_t i = 0; i < kElements; ++i) average0[i] = (a0[i] + b0[i]) * 0.5f;
  EXPECT_EQ(s.block_weights(block), average0) << "the warm-up round's average, in full precision";
  std::vector<std::byte> image(kBlockBytes);
  EXPECT_FALSE(s.rounds.compressed_averages()->read(block, 0, image)) << "a warm-up round's READ gives the weights";

  // Round 1: compressed. A full-precision push, or half of a compressed block, is refused and changes nothing.
  EXPECT_EQ(s.push(kA, f32_bytes(a0), at).code(), StatusCode::invalid_argument);
  const std::vector<float> a1 = values(kElements, 0.25f), b1 = values(kElements, 4.0f);
  const std::vector<std::byte> ca = compressed(CompressedFormat::sign1, a1),
                               cb = compressed(CompressedFormat::sign1, b1);
  ASSERT_EQ(ca.size(), 512u);
  EXPECT_EQ(s.block_weights(block), average0);
  // A compressed block that does not decode (a negative scale): refused, and the worker may push the block again.
  std::vector<std::byte> garbled = ca;
  garbled[3] = std::byte{0x80};
  EXPECT_EQ(s.push(kA, garbled, at).code(), StatusCode::invalid_argument);
  ASSERT_TRUE(s.push(kA, ca, at).ok()) << "the refused push left no claim behind";
  EXPECT_EQ(s.block_weights(block), average0) << "one worker of two pushed: the round is open";
  ASSERT_TRUE(s.push(kB, cb, at).ok());
  const std::vector<float> da = decoded(CompressedFormat::sign1, ca, kElements),
                           db = decoded(CompressedFormat::sign1, cb, kElements);
  std::vector<float> sum(kElements);
  for (std::size_t i = 0; i < kElements; ++i) sum[i] = (da[i] + db[i]) * 0.5f;
  // The shard compresses the average with its residual (zero so far) and keeps what workers decode.
  const std::vector<std::byte> served = compressed(CompressedFormat::sign1, sum);
  ASSERT_TRUE(s.rounds.compressed_averages()->read(block, 0, image));
  EXPECT_TRUE(std::equal(served.begin(), served.end(), image.begin()));
  EXPECT_EQ(s.block_weights(block), decoded(CompressedFormat::sign1, served, kElements));
  EXPECT_EQ(s.rounds.status().progress.rounds_max, 2u);

  s.rounds.reset();
  EXPECT_EQ(s.push(kA, ca, at).code(), StatusCode::invalid_argument) << "after reset-rounds the warm-up starts again";
}

TEST(CompressedRounds, AnOptimizerShardAppliesTheAverageOfTheDecodedPushes) {
  CompressedShard s(OptimizerKind::sgd, CompressedFormat::int8, 0);
  EXPECT_EQ(s.rounds.compressed_averages(), nullptr) << "an optimizer shard's READs return weights";
  const std::vector<float> a = values(kElements, 1.5f), b = values(kElements, -0.75f);
  const std::vector<std::byte> ca = compressed(CompressedFormat::int8, a), cb = compressed(CompressedFormat::int8, b);
  ASSERT_TRUE(s.push(kB, cb, 0).ok());
  ASSERT_TRUE(s.push(kA, ca, 0).ok());
  const std::vector<float> da = decoded(CompressedFormat::int8, ca, kElements),
                           db = decoded(CompressedFormat::int8, cb, kElements);
  std::vector<float> expected(kElements);
  for (std::size_t i = 0; i < kElements; ++i) expected[i] = -((da[i] + db[i]) * 0.5f);  // sgd, lr 1: w -= average
  EXPECT_EQ(s.block_weights(0), expected);
}

}  // namespace
}  // namespace blockps::unit
