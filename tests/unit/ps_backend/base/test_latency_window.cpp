// The status page's latency percentiles over a sliding window.
#include <gtest/gtest.h>

#include <memory>

#include "ps_backend/base/latency_window.h"

namespace blockps {
namespace {

TEST(LatencyWindow, AnEmptyWindowReportsZeros) {
  const auto w = std::make_unique<LatencyWindow>();
  const auto p = w->summary();
  EXPECT_EQ(p.count, 0);
  EXPECT_EQ(p.p50_ns, 0);
  EXPECT_EQ(p.max_ns, 0);
  EXPECT_EQ(p.total_count, 0);
  EXPECT_EQ(p.total_ns, 0);
}

TEST(LatencyWindow, PercentilesOfTheSamples) {
  const auto w = std::make_unique<LatencyWindow>();
  for (std::uint64_t ns = 100; ns >= 1; --ns) w->add(ns);  // 1..100 in any order
  const auto p = w->summary();
  EXPECT_EQ(p.count, 100);
  EXPECT_EQ(p.p50_ns, 50);
  EXPECT_EQ(p.p90_ns, 90);
  EXPECT_EQ(p.p99_ns, 99);
  EXPECT_EQ(p.max_ns, 100);
  EXPECT_EQ(p.total_ns, 5050);
}

TEST(LatencyWindow, TheWindowHoldsTheLatestSamplesAndTheTotalsEverySample) {
  const auto w = std::make_unique<LatencyWindow>();
  for (int i = 0; i < 4096; ++i) w->add(1000);
  for (int i = 0; i < 4096; ++i) w->add(1);
  const auto p = w->summary();
  EXPECT_EQ(p.count, 4096);
  EXPECT_EQ(p.max_ns, 1) << "the older samples left the window";
  EXPECT_EQ(p.total_count, 8192);
  EXPECT_EQ(p.total_ns, 4096 * 1001);
}

}  // namespace
}  // namespace blockps
