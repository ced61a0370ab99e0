// A shard's monotonic counters and its aggregation latency, for the status page: written by the data path
// (tgt's I/O threads) and the checkpoints without a lock, read by the page.
#pragma once

#include <atomic>
#include <cstdint>

#include "ps_backend/base/latency_window.h"

namespace blockps {

struct ShardCounters {
  std::atomic<std::uint64_t> pushes{0}, push_bytes{0};
  std::atomic<std::uint64_t> pulls{0}, pull_bytes{0};  // reads of the grad and weights LUs
  std::atomic<std::uint64_t> weight_writes{0}, weight_write_bytes{0};
  std::atomic<std::uint64_t> aggregation_ns{0}, aggregation_max_ns{0};
  std::atomic<std::uint64_t> checkpoints{0}, checkpoint_errors{0};
  std::atomic<std::uint64_t> io_errors{0};
  /// The optimizer's time per push (async) or per round applied (sync).
  LatencyWindow aggregation_latency;

  /// One gradient applied in `ns` (a push in async and ssp, a round's average in sync).
  void note_aggregation(std::uint64_t ns);
};

}  // namespace blockps
