#include <gtest/gtest.h>

#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <latch>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "aggregator/model_shard.h"
#include "reference.h"
#include "shard_snapshot.h"
#include "tests/support/status_text.h"

namespace blockps {
namespace {

constexpr std::uint64_t kF32Bytes = 4;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

/// The shard as plain vectors, updated by the written-out formulas of reference.h.
struct ReferenceShard {
  ShardGeometry geometry;
  OptimizerParams params;
  std::vector<float> w, s0, s1;
  std::vector<std::uint64_t> steps;

  ReferenceShard(const ShardGeometry& g, const OptimizerParams& p)
      : geometry(g), params(p), w(g.elements()), s0(g.elements()), s1(g.elements()), steps(g.blocks()) {}

  void push(std::uint64_t first, const std::vector<float>& g) {
    const std::uint64_t per_block = geometry.block_elements();
    const std::uint64_t last_block = (first + g.size() - 1) / per_block;
    for (std::uint64_t b = first / per_block; b <= last_block; ++b) ++steps[b];
    for (std::size_t i = 0; i < g.size(); ++i) {
      const std::uint64_t e = first + i;
      test::reference_step(params, steps[e / per_block], w[e], g[i], s0[e], s1[e]);
    }
  }
};

/// Wire bytes for `values` (which must be exactly representable in d), built from the format's definition.
std::vector<std::byte> to_wire(WireDtype d, const std::vector<float>& values) {
  std::vector<std::byte> out(values.size() * wire_size(d));
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (d == WireDtype::f32) {
      std::memcpy(out.data() + 4 * i, &values[i], 4);
    } else {
      const std::uint16_t bits = test::bits_of_value(test::format_of(d), values[i]);
      EXPECT_EQ(test::value_of_bits(test::format_of(d), bits), values[i]) << "not a " << to_string(d) << " value";
      std::memcpy(out.data() + 2 * i, &bits, 2);
    }
  }
  return out;
}

/// Random gradient values that the wire dtype holds exactly.
std::vector<float> random_gradient(std::mt19937& random, WireDtype d, std::size_t n) {
  std::uniform_real_distribution<double> unit(-1.0, 1.0);
  std::vector<float> g(n);
  for (float& x : g) x = static_cast<float>(test::round_to(test::format_of(d), static_cast<float>(unit(random))));
  return g;
}

using test::Snapshot;
using test::snapshot;

void expect_bitwise_equal(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(std::bit_cast<std::uint32_t>(got[i]), std::bit_cast<std::uint32_t>(want[i]))
        << what << "[" << i << "]: " << got[i] << " vs " << want[i];
  }
}

/// What for_each_block shows of a reference state array: all of it for a slot the optimizer uses, else nothing.
std::vector<float> as_visible(const std::vector<float>& v, int slots, int slot) {
  return slot < slots ? v : std::vector<float>{};
}

// ---- Every optimizer x every dtype against the reference --------------------------------------------------

struct Case {
  OptimizerKind kind;
  WireDtype dtype;
  float weight_decay;
  bool nesterov;
};

std::string describe(const Case& c) {
  return std::string(to_string(c.kind)) + "_" + std::string(to_string(c.dtype)) +
         (c.weight_decay != 0 ? "_decay" : "") + (c.nesterov ? "_nesterov" : "");
}
void PrintTo(const Case& c, std::ostream* out) { *out << describe(c); }
std::string case_name(const testing::TestParamInfo<Case>& info) { return describe(info.param); }

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (OptimizerKind kind : kAllOptimizerKinds) {
    for (WireDtype d : {WireDtype::f32, WireDtype::bf16, WireDtype::f16}) {
      for (float decay : {0.0f, 0.01f}) {
        // sum and average have no hyper-parameters
        if ((kind == OptimizerKind::sum || kind == OptimizerKind::average) && decay != 0) continue;
        cases.push_back({kind, d, decay, false});
        if (kind == OptimizerKind::momentum) cases.push_back({kind, d, decay, true});
      }
    }
  }
  return cases;
}

class ShardMatchesReference : public testing::TestWithParam<Case> {};

TEST_P(ShardMatchesReference, OverSeveralStepsAndRanges) {
  const Case c = GetParam();
  const std::size_t size = wire_size(c.dtype);
  // 16 elements a block, 6 blocks, the last one 7 elements long.
  const ShardGeometry geometry{
      .bytes = (5 * 16 + 7) * size, .dtype = c.dtype, .block_bytes = static_cast<std::uint32_t>(16 * size)};
  ASSERT_EQ(error_text(check_geometry(geometry)), "");
  const OptimizerParams params{
      .kind = c.kind, .lr = 0.05f, .weight_decay = c.weight_decay, .momentum = 0.9f, .nesterov = c.nesterov};
  ModelShard shard(geometry, params, std::make_shared<CpuEngine>(3));
  ReferenceShard reference(geometry, params);
  const auto initial = [](std::uint64_t e) { return std::sin(static_cast<float>(e)) * 0.5f; };
  EXPECT_EQ(error_text(shard.fill_weights(initial)), "");
  for (std::uint64_t e = 0; e < geometry.elements(); ++e) reference.w[e] = initial(e);

  struct Range {
    std::uint64_t first, count;  // elements
  };
  const std::uint64_t all = geometry.elements();
  const Range ranges[] = {
      {0, all},  // every block, the short last one included
      {3, 5},    // inside block 0
      {10, 30},  // partial block 0, all of block 1, partial block 2
      {16, 16},  // exactly block 1
      {75, 12},  // partial block 4 and the whole short last block
      {80, 7},   // exactly the short last block
      {33, 1},   // one element
  };
  std::mt19937 random(11);
  const int slots = state_slots(c.kind);
  for (int round = 0; round < 3; ++round) {
    for (const Range& r : ranges) {
      SCOPED_TRACE("round " + std::to_string(round) + " range " + std::to_string(r.first) + "+" +
                   std::to_string(r.count));
      const std::vector<float> g = random_gradient(random, c.dtype, r.count);
      EXPECT_EQ(error_text(shard.push_gradient(r.first * size, to_wire(c.dtype, g))), "");
      reference.push(r.first, g);

      const Snapshot got = snapshot(shard);
      EXPECT_EQ(got.steps, reference.steps);
      expect_bitwise_equal(got.w, reference.w, "weights");
      expect_bitwise_equal(got.s0, as_visible(reference.s0, slots, 0), "state0");
      expect_bitwise_equal(got.s1, as_visible(reference.s1, slots, 1), "state1");
      if (HasFatalFailure()) return;
    }
  }

  // Reading back in the wire dtype rounds each master weight to nearest even; a partial range reads its part.
  std::vector<std::byte> wire(geometry.bytes);
  shard.read_weights(0, wire);
  std::vector<std::byte> part(20 * size);
  shard.read_weights(13 * size, part);
  for (std::uint64_t e = 0; e < all; ++e) {
    const double want = test::round_to(test::format_of(c.dtype), reference.w[e]);
    double got = 0;
    if (c.dtype == WireDtype::f32) {
      float f;
      std::memcpy(&f, wire.data() + 4 * e, 4);
      got = f;
    } else {
      std::uint16_t h;
      std::memcpy(&h, wire.data() + 2 * e, 2);
      got = test::value_of_bits(test::format_of(c.dtype), h);
    }
    ASSERT_EQ(got, want) << "element " << e;
  }
  EXPECT_EQ(0, std::memcmp(part.data(), wire.data() + 13 * size, part.size()));
}

INSTANTIATE_TEST_SUITE_P(AllOptimizersAndDtypes, ShardMatchesReference, testing::ValuesIn(all_cases()), case_name);

// ---- Geometry ---------------------------------------------------------------------------------------------

TEST(ShardGeometry, BlocksAndTheShortLastBlock) {
  const ShardGeometry g{.bytes = 100, .dtype = WireDtype::f32, .block_bytes = 32};
  EXPECT_EQ(g.elements(), 25u);
  EXPECT_EQ(g.block_elements(), 8u);
  EXPECT_EQ(g.blocks(), 4u);
  EXPECT_EQ(g.elements_in_block(0), 8u);
  EXPECT_EQ(g.elements_in_block(3), 1u);
  EXPECT_EQ(g.elements_in_block(4), 0u);
  const ShardGeometry exact{.bytes = 64, .dtype = WireDtype::bf16, .block_bytes = 32};
  EXPECT_EQ(exact.blocks(), 2u);
  EXPECT_EQ(exact.elements_in_block(1), 16u);
  EXPECT_EQ((ShardGeometry{.bytes = 64, .block_bytes = 0}).blocks(), 0u);  // no division by zero
}

TEST(ShardGeometry, ErrorsSayWhatIsWrong) {
  EXPECT_EQ(error_text(check_geometry(ShardGeometry{.bytes = 1024, .dtype = WireDtype::f16, .block_bytes = 256})), "");
  EXPECT_EQ(error_text(check_geometry(ShardGeometry{.bytes = 6, .dtype = WireDtype::bf16, .block_bytes = 4})), "");

  const std::string zero = error_text(check_geometry(ShardGeometry{.bytes = 0}));
  EXPECT_TRUE(contains(zero, "bytes 0")) << zero;
  const std::string odd =
      error_text(check_geometry(ShardGeometry{.bytes = 10, .dtype = WireDtype::f32, .block_bytes = 8}));
  EXPECT_TRUE(contains(odd, "10") && contains(odd, "f32") && contains(odd, "4")) << odd;
  const std::string no_block =
      error_text(check_geometry(ShardGeometry{.bytes = 8, .dtype = WireDtype::f32, .block_bytes = 0}));
  EXPECT_TRUE(contains(no_block, "block_bytes 0")) << no_block;
  const std::string odd_block =
      error_text(check_geometry(ShardGeometry{.bytes = 8, .dtype = WireDtype::f32, .block_bytes = 6}));
  EXPECT_TRUE(contains(odd_block, "block_bytes 6")) << odd_block;
  const std::string odd_f16 =
      error_text(check_geometry(ShardGeometry{.bytes = 7, .dtype = WireDtype::f16, .block_bytes = 4}));
  EXPECT_TRUE(contains(odd_f16, "7") && contains(odd_f16, "f16")) << odd_f16;
  const std::string dtype = error_text(check_geometry(ShardGeometry{.bytes = 8, .dtype = static_cast<WireDtype>(9)}));
  EXPECT_TRUE(contains(dtype, "9") && contains(dtype, "bf16")) << dtype;
}

TEST(ShardGeometry, RangeErrors) {
  const ShardGeometry g{.bytes = 64, .dtype = WireDtype::f32, .block_bytes = 16};
  EXPECT_EQ(error_text(check_range(g, 0, 64)), "");
  EXPECT_EQ(error_text(check_range(g, 60, 4)), "");
  EXPECT_EQ(error_text(check_range(g, 64, 0)), "");
  EXPECT_TRUE(contains(error_text(check_range(g, 2, 4)), "offset 2"));
  EXPECT_TRUE(contains(error_text(check_range(g, 0, 6)), "length 6"));
  EXPECT_TRUE(contains(error_text(check_range(g, 60, 8)), "64 bytes"));
  EXPECT_FALSE(error_text(check_range(g, 68, 0)).empty());
  EXPECT_FALSE(error_text(check_range(g, 0xfffffffffffffffcull, 8)).empty());  // offset + len would wrap
  EXPECT_TRUE(contains(error_text(check_range(ShardGeometry{.bytes = 0}, 0, 0)), "geometry"));
}

// ---- Out-of-contract calls change nothing and never crash ----------------------------------------------

// They are refused with the reason (not reported as success), and change nothing.
TEST(ModelShard, RangesOutsideTheContractAreRefusedAndChangeNothing) {
  const ShardGeometry g{.bytes = 64, .dtype = WireDtype::f32, .block_bytes = 16};
  ModelShard shard(g, OptimizerParams{.kind = OptimizerKind::sum}, std::make_shared<CpuEngine>(2));
  EXPECT_EQ(error_text(shard.fill_weights([](std::uint64_t e) { return float(e); })), "");
  const Snapshot before = snapshot(shard);
  const std::vector<std::byte> grad(8, std::byte{0x3f});
  EXPECT_TRUE(contains(error_text(shard.push_gradient(2, grad)), "push refused: ")) << "misaligned offset";
  EXPECT_TRUE(contains(error_text(shard.push_gradient(60, grad)), "64 bytes")) << "runs past the end";
  EXPECT_TRUE(contains(error_text(shard.push_gradient(0, std::span(grad).first(6))), "length 6")) << "partial element";
  EXPECT_TRUE(contains(error_text(shard.assign_weights(64, std::span(grad).first(4))), "assignment refused: "));
  EXPECT_EQ(error_text(shard.push_gradient(0, {})), "") << "an empty push is no error";
  const Snapshot after = snapshot(shard);
  EXPECT_EQ(after.steps, before.steps);
  expect_bitwise_equal(after.w, before.w, "weights");

  std::vector<std::byte> out(8, std::byte{0x55});
  shard.read_weights(60, out);
  EXPECT_EQ(out, std::vector<std::byte>(8, std::byte{0}));
}

TEST(ModelShard, UnusableGeometryGivesAnEmptyShard) {
  ModelShard shard(ShardGeometry{.bytes = 10, .dtype = WireDtype::f32, .block_bytes = 0}, OptimizerParams{}, nullptr);
  int visited = 0;
  shard.for_each_block([&](const BlockView&) { ++visited; });
  EXPECT_EQ(visited, 0);
  EXPECT_EQ(error_text(shard.fill_weights([](std::uint64_t) { return 1.0f; })), "");
  EXPECT_TRUE(contains(error_text(shard.push_gradient(0, std::vector<std::byte>(4))), "unusable geometry"))
      << "refused, not dropped";
  EXPECT_FALSE(shard.restore_block(0, 1, {}, {}, {}));
}

TEST(ModelShard, SetParamsKeepsTheKind) {
  const ShardGeometry g{.bytes = 16, .dtype = WireDtype::f32, .block_bytes = 16};
  ModelShard shard(g, OptimizerParams{.kind = OptimizerKind::sgd, .lr = 1.0f}, nullptr);
  shard.set_params(OptimizerParams{.kind = OptimizerKind::adam, .lr = 0.5f});
  EXPECT_EQ(shard.params().kind, OptimizerKind::sgd);
  EXPECT_EQ(shard.params().lr, 0.5f);
  EXPECT_EQ(error_text(shard.push_gradient(0, to_wire(WireDtype::f32, {1.0f, 2.0f, 3.0f, 4.0f}))), "");
  const Snapshot s = snapshot(shard);
  EXPECT_EQ(s.w, (std::vector<float>{-0.5f, -1.0f, -1.5f, -2.0f}));
}

TEST(ModelShard, AssignThenReadRoundTripsWireValues) {
  for (WireDtype d : {WireDtype::f32, WireDtype::bf16, WireDtype::f16}) {
    SCOPED_TRACE(to_string(d));
    const std::size_t size = wire_size(d);
    const ShardGeometry g{.bytes = 40 * size, .dtype = d, .block_bytes = static_cast<std::uint32_t>(16 * size)};
    ModelShard shard(g, OptimizerParams{.kind = OptimizerKind::adam}, std::make_shared<CpuEngine>(2));
    std::mt19937 random(5);
    const std::vector<float> values = random_gradient(random, d, 30);
    const std::vector<std::byte> in = to_wire(d, values);
    EXPECT_EQ(error_text(shard.assign_weights(5 * size, in)), "");
    std::vector<std::byte> out(in.size());
    shard.read_weights(5 * size, out);
    EXPECT_EQ(out, in);
    const Snapshot s = snapshot(shard);
    EXPECT_EQ(std::vector<float>(s.w.begin() + 5, s.w.begin() + 35), values);
    EXPECT_EQ(s.steps, std::vector<std::uint64_t>(3, 0));  // assigning is not an optimizer step
  }
}

// ---- Checkpoints ------------------------------------------------------------------------------------------

TEST(ModelShard, CheckpointRoundTripContinuesIdentically) {
  for (OptimizerKind kind : {OptimizerKind::sgd, OptimizerKind::momentum, OptimizerKind::adam}) {
    SCOPED_TRACE(to_string(kind));
    const ShardGeometry g{.bytes = 50 * kF32Bytes, .dtype = WireDtype::f32, .block_bytes = 16 * kF32Bytes};
    const OptimizerParams p{.kind = kind, .lr = 0.1f};
    auto engine = std::make_shared<CpuEngine>(2);
    ModelShard original(g, p, engine);
    std::mt19937 random(9);
    EXPECT_EQ(
        error_text(original.push_gradient(0, to_wire(WireDtype::f32, random_gradient(random, WireDtype::f32, 50)))),
        "");
    EXPECT_EQ(error_text(original.push_gradient(20 * kF32Bytes,
                                                to_wire(WireDtype::f32, random_gradient(random, WireDtype::f32, 10)))),
              "");

    ModelShard restored(g, p, engine);
    original.for_each_block([&](const BlockView& b) {
      EXPECT_TRUE(restored.restore_block(b.index, b.step, b.weights, b.state[0], b.state[1]));
    });
    const Snapshot before = snapshot(original);
    const Snapshot copy = snapshot(restored);
    EXPECT_EQ(copy.steps, before.steps);
    expect_bitwise_equal(copy.w, before.w, "weights");
    expect_bitwise_equal(copy.s0, before.s0, "state0");
    expect_bitwise_equal(copy.s1, before.s1, "state1");

    // The step counts came along too: the next step (bias corrections included) is the same on both.
    const std::vector<std::byte> next = to_wire(WireDtype::f32, random_gradient(random, WireDtype::f32, 50));
    EXPECT_EQ(error_text(original.push_gradient(0, next)), "");
    EXPECT_EQ(error_text(restored.push_gradient(0, next)), "");
    expect_bitwise_equal(snapshot(restored).w, snapshot(original).w, "weights after a step");
  }
}

TEST(ModelShard, RestoreRefusesMismatchedSpans) {
  const ShardGeometry g{.bytes = 20 * kF32Bytes, .dtype = WireDtype::f32, .block_bytes = 16 * kF32Bytes};
  ModelShard shard(g, OptimizerParams{.kind = OptimizerKind::momentum}, nullptr);
  const std::vector<float> full(16, 1.0f), last(4, 1.0f), wrong(5, 1.0f);
  EXPECT_FALSE(shard.restore_block(2, 1, last, last, {}));   // no such block
  EXPECT_FALSE(shard.restore_block(0, 1, wrong, full, {}));  // weights size
  EXPECT_FALSE(shard.restore_block(1, 1, last, wrong, {}));  // state size
  EXPECT_FALSE(shard.restore_block(1, 1, last, {}, {}));     // momentum needs its state slot
  const Snapshot unchanged = snapshot(shard);
  EXPECT_EQ(unchanged.steps, (std::vector<std::uint64_t>{0, 0}));
  EXPECT_EQ(unchanged.w, std::vector<float>(20, 0.0f));
  EXPECT_TRUE(shard.restore_block(1, 7, last, last, wrong));  // the unused slot is ignored
  EXPECT_EQ(snapshot(shard).steps, (std::vector<std::uint64_t>{0, 7}));
}

// ---- Concurrency ------------------------------------------------------------------------------------------

// With `sum` and a gradient of ones, every element of a block holds the number of pushes that block took, so
// a snapshot of a block with two different values would be a torn read.
TEST(ModelShard, ReadersNeverSeeATornBlock) {
  constexpr std::uint64_t kBlockElements = 1024;
  constexpr std::uint64_t kBlocks = 8;
  const ShardGeometry g{
      .bytes = kBlocks * kBlockElements * 4, .dtype = WireDtype::f32, .block_bytes = kBlockElements * 4};
  ModelShard shard(g, OptimizerParams{.kind = OptimizerKind::sum}, std::make_shared<CpuEngine>(2));
  const std::vector<std::byte> ones_all = to_wire(WireDtype::f32, std::vector<float>(g.elements(), 1.0f));
  const std::vector<std::byte> ones_block = to_wire(WireDtype::f32, std::vector<float>(kBlockElements, 1.0f));

  // Writers keep pushing until the readers have looked often enough, so the two really overlap.
  constexpr int kWriters = 2;
  constexpr int kReaders = 2;
  constexpr long kMinReads = 2000;
  std::latch start(kWriters + kReaders);
  std::atomic<int> writers_done{0};
  std::atomic<std::uint64_t> pushes{0};
  std::atomic<int> torn{0};
  std::atomic<long> reads{0};
  {
    std::vector<std::jthread> threads;
    threads.reserve(kWriters + kReaders);
    for (int w = 0; w < kWriters; ++w) {
      threads.emplace_back([&, w] {
        start.arrive_and_wait();
        for (std::uint64_t i = 0; i < 50 || reads.load() < kMinReads; ++i) {
          EXPECT_EQ(error_text(shard.push_gradient(0, ones_all)), "");
          EXPECT_EQ(error_text(shard.push_gradient(((i + w) % kBlocks) * g.block_bytes, ones_block)), "");
          pushes.fetch_add(1);
        }
        writers_done.fetch_add(1);
      });
    }
    for (int r = 0; r < kReaders; ++r) {
      threads.emplace_back([&, r] {
        std::vector<std::byte> out(g.bytes);
        std::vector<float> values(g.elements());
        start.arrive_and_wait();
        do {
          // Alternate whole-shard reads (several blocks, in parallel) and single-block reads.
          const long n = reads.fetch_add(1);
          const bool whole = n % 2 == 0;
          const std::uint64_t offset = whole ? 0 : ((n + r) % kBlocks) * g.block_bytes;
          const std::size_t len = whole ? g.bytes : g.block_bytes;
          shard.read_weights(offset, std::span(out).first(len));
          std::memcpy(values.data(), out.data(), len);
          for (std::size_t b = 0; b < len / g.block_bytes; ++b) {
            const float* first = values.data() + b * kBlockElements;
            for (std::size_t e = 1; e < kBlockElements; ++e) {
              if (first[e] != first[0]) {
                torn.fetch_add(1);
                break;
              }
            }
          }
        } while (writers_done.load() < kWriters);
      });
    }
  }
  EXPECT_EQ(torn.load(), 0);
  EXPECT_GT(reads.load(), 0);
  const Snapshot s = snapshot(shard);
  for (std::uint64_t b = 0; b < kBlocks; ++b) {
    EXPECT_EQ(s.w[b * kBlockElements], static_cast<float>(s.steps[b])) << "block " << b;
  }
  std::uint64_t total = 0;
  for (std::uint64_t step : s.steps) total += step;
  EXPECT_EQ(total, pushes.load() * (kBlocks + 1));
}

}  // namespace
}  // namespace blockps
