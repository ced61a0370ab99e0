// Latency samples over a sliding window, for the status page's percentiles (a round's latency, a shard's
// aggregation time).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace blockps {

/// A window's percentiles (the status page writes them as a latency object, contract/status_page.h).
struct LatencySummary {
  std::uint64_t count = 0;  // samples in the window
  std::uint64_t p50_ns = 0, p90_ns = 0, p99_ns = 0, max_ns = 0;
  std::uint64_t total_count = 0, total_ns = 0;  // since the start (a monitoring system's summary)
};

/// Latency samples (ns) over a sliding window. Lock-free: every push adds a sample from tgt's I/O threads.
class LatencyWindow {
 public:
  void add(std::uint64_t ns);
  /// Percentiles over the last kSamples samples, and the totals since the start.
  LatencySummary summary() const;

 private:
  static constexpr std::size_t kSamples = 4096;
  std::array<std::atomic<std::uint64_t>, kSamples> samples_{};
  std::atomic<std::uint64_t> added_{0};
  std::atomic<std::uint64_t> total_ns_{0};
};

}  // namespace blockps
