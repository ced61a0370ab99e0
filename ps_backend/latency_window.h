// Latency samples over a sliding window, for the status page's percentiles (a round's latency, a shard's
// aggregation time).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>

namespace blockps {

/// Latency samples (ns) over a sliding window. Lock-free: every push adds a sample from tgt's I/O threads.
class LatencyWindow {
 public:
  void add(std::uint64_t ns);
  /// {"count", "p50_ns", "p90_ns", "p99_ns", "max_ns"} over the last kSamples samples, and since the start
  /// "total_count" and "total_ns" (what a monitoring system's summary needs: blockps exporter).
  nlohmann::json percentiles() const;

 private:
  static constexpr std::size_t kSamples = 4096;
  std::array<std::atomic<std::uint64_t>, kSamples> samples_{};
  std::atomic<std::uint64_t> added_{0};
  std::atomic<std::uint64_t> total_ns_{0};
};

}  // namespace blockps
