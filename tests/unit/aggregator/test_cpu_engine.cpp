#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "aggregator/cpu_engine.h"
#include "aggregator/update_dispatch.h"

namespace blockps {
namespace {

// The plain scalar loop that cpu_update's vectorised clones must reproduce bit for bit.
template <OptimizerKind K, WireDtype D>
void scalar_update(const StepConstants& k, float* w, const void* g, float* s0, float* s1, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    float a = s0 != nullptr ? s0[i] : 0.0f;
    float b = s1 != nullptr ? s1[i] : 0.0f;
    ElementUpdate<K>::apply(k, w[i], load_wire<D>(g, i), a, b);
    if (s0 != nullptr) s0[i] = a;
    if (s1 != nullptr) s1[i] = b;
  }
}

void scalar_update(OptimizerKind kind, WireDtype d, const StepConstants& k, float* w, const void* g, float* s0,
                   float* s1, std::size_t n) {
  dispatch_update(
      kind, d, [&]<OptimizerKind K, WireDtype D>() { scalar_update<K, D>(k, w, g, s0, s1, n); }, [] {});
}

void expect_bitwise_equal(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(std::bit_cast<std::uint32_t>(got[i]), std::bit_cast<std::uint32_t>(want[i]))
        << what << "[" << i << "]: " << got[i] << " vs " << want[i];
  }
}

TEST(CpuUpdate, MatchesScalarElementUpdateBitForBit) {
  constexpr std::size_t n = 1037;  // not a multiple of any vector width: the tail runs too
  std::mt19937 random(3);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  for (OptimizerKind kind : kAllOptimizerKinds) {
    for (WireDtype d : {WireDtype::f32, WireDtype::bf16, WireDtype::f16}) {
      for (bool nesterov : {false, true}) {
        SCOPED_TRACE(std::string(to_string(kind)) + " " + std::string(to_string(d)) + (nesterov ? " nesterov" : ""));
        OptimizerParams p{.kind = kind, .lr = 0.03f, .weight_decay = 0.01f, .nesterov = nesterov};
        std::vector<float> w(n), s0(n), s1(n);
        for (std::size_t i = 0; i < n; ++i) {
          w[i] = 2 * unit(random);
          s0[i] = unit(random);
          s1[i] = std::abs(unit(random));
        }
        std::vector<float> w_ref = w, s0_ref = s0, s1_ref = s1;
        const int slots = state_slots(kind);
        for (std::uint64_t t = 1; t <= 3; ++t) {
          std::vector<float> g(n);
          for (float& x : g) x = unit(random);
          std::vector<unsigned char> wire(n * wire_size(d));
          encode_wire(d, g.data(), wire.data(), n);
          const StepConstants k = step_constants(p, t);
          cpu_update(kind, d, k, w.data(), wire.data(), slots > 0 ? s0.data() : nullptr,
                     slots > 1 ? s1.data() : nullptr, n);
          scalar_update(kind, d, k, w_ref.data(), wire.data(), slots > 0 ? s0_ref.data() : nullptr,
                        slots > 1 ? s1_ref.data() : nullptr, n);
        }
        expect_bitwise_equal(w, w_ref, "w");
        expect_bitwise_equal(s0, s0_ref, "s0");
        expect_bitwise_equal(s1, s1_ref, "s1");
      }
    }
  }
}

TEST(CpuEngine, ThreadCounts) {
  EXPECT_EQ(CpuEngine(1).threads(), 1u);
  EXPECT_EQ(CpuEngine(3).threads(), 3u);
  EXPECT_EQ(CpuEngine(0).threads(), std::max(1u, std::thread::hardware_concurrency()));
}

TEST(CpuEngine, OneThreadRunsOnTheCaller) {
  CpuEngine engine(1);
  const auto caller = std::this_thread::get_id();
  std::vector<int> seen(100, 0);
  engine.parallel_for(seen.size(), [&](std::size_t i) {
    EXPECT_EQ(std::this_thread::get_id(), caller);
    ++seen[i];
  });
  EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), 100);
}

TEST(CpuEngine, EmptyAndSingleTaskRanges) {
  CpuEngine engine(4);
  int calls = 0;
  engine.parallel_for(0, [&](std::size_t) { ++calls; });
  EXPECT_EQ(calls, 0);
  engine.parallel_for(1, [&](std::size_t i) {
    EXPECT_EQ(i, 0u);
    ++calls;
  });
  EXPECT_EQ(calls, 1);
}

TEST(CpuEngine, SpreadsTasksOverThreads) {
  CpuEngine engine(4);
  std::mutex mutex;
  std::set<std::thread::id> threads;
  engine.parallel_for(64, [&](std::size_t) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::lock_guard lock(mutex);
    threads.insert(std::this_thread::get_id());
  });
  EXPECT_GT(threads.size(), 1u);
  EXPECT_LE(threads.size(), 4u);
}

// Several callers at once (tgtd's I/O threads): every call runs each of its own indices exactly once and
// returns only after all of them ran.
TEST(CpuEngine, ConcurrentCallersEachGetAllTheirTasks) {
  CpuEngine engine(3);
  constexpr int kCallers = 4;
  constexpr int kRounds = 200;
  std::atomic<int> failures{0};
  std::vector<std::jthread> callers;
  callers.reserve(kCallers);
  for (int c = 0; c < kCallers; ++c) {
    callers.emplace_back([&, c] {
      for (int round = 0; round < kRounds; ++round) {
        const std::size_t n = 1 + static_cast<std::size_t>((round * 7 + c * 13) % 300);
        std::vector<std::atomic<int>> runs(n);
        engine.parallel_for(n, [&](std::size_t i) { runs[i].fetch_add(1, std::memory_order_relaxed); });
        for (const auto& r : runs) {
          if (r.load(std::memory_order_relaxed) != 1) failures.fetch_add(1);
        }
      }
    });
  }
  callers.clear();  // joins
  EXPECT_EQ(failures.load(), 0);
}

TEST(CpuEngine, TaskMayCallParallelForItself) {
  CpuEngine engine(2);
  std::atomic<int> leaves{0};
  engine.parallel_for(8, [&](std::size_t) { engine.parallel_for(8, [&](std::size_t) { leaves.fetch_add(1); }); });
  EXPECT_EQ(leaves.load(), 64);
}

}  // namespace
}  // namespace blockps
