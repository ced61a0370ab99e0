#include "ps_backend/shard/shard_counters.h"

namespace blockps {

void ShardCounters::note_aggregation(std::uint64_t ns) {
  aggregation_latency.add(ns);
  aggregation_ns.fetch_add(ns, std::memory_order_relaxed);
  std::uint64_t seen = aggregation_max_ns.load(std::memory_order_relaxed);
  while (ns > seen && !aggregation_max_ns.compare_exchange_weak(seen, ns, std::memory_order_relaxed)) {
  }
}

}  // namespace blockps
