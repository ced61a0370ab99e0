#include "ps_backend/status_page.h"

#include <nlohmann/json.hpp>

#include "ps_backend/contract/status_page.h"

namespace blockps {

std::string render_status_page(const ServedShard& shard) {
  namespace page = blockps::status_page;
  const ShardConfig c = shard.config();
  const ShardGeometry& g = c.geometry;
  const ShardCounters& k = shard.counters();
  const auto rd = [](const std::atomic<std::uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  nlohmann::json j;
  const auto set = [&j](const char* pointer, nlohmann::json value) { set_field(j, pointer, std::move(value)); };
  set(page::kFormatField, page::kFormat);

  set(page::kShardPath, shard.path());
  set(page::kShardOptions, format_shard_options(c));
  set(page::kShardSize, g.bytes);
  set(page::kShardDtype, to_string(g.dtype));
  set(page::kShardBlock, g.block_bytes);
  set(page::kShardElements, g.elements());
  set(page::kShardBlocks, g.blocks());
  set(page::kShardOpt, to_string(c.optimizer.kind));
  set(page::kShardLr, c.optimizer.lr);
  set(page::kShardMode, to_string(c.rounds));
  set(page::kShardDevice, c.device);
  set(page::kShardEngine, shard.model().device().name());
  set(page::kShardCheckpointS, c.checkpoint_s);
  set(page::kShardStartedUnix, shard.started_unix());

  const std::uint64_t pushes = rd(k.pushes);
  set(page::kPushes, pushes);
  set(page::kPushBytes, rd(k.push_bytes));
  set(page::kPulls, rd(k.pulls));
  set(page::kPullBytes, rd(k.pull_bytes));
  set(page::kWeightWrites, rd(k.weight_writes));
  set(page::kWeightWriteBytes, rd(k.weight_write_bytes));
  set(page::kIoErrors, rd(k.io_errors));

  set(page::kAggregationTotalNs, rd(k.aggregation_ns));
  set(page::kAggregationMeanNs, pushes ? rd(k.aggregation_ns) / pushes : 0);
  set(page::kAggregationMaxNs, rd(k.aggregation_max_ns));
  const nlohmann::json aggregation_latency = shard.aggregation_latency().percentiles();
  set(page::kAggregationLatency, aggregation_latency);

  if (const Rounds* rounds = shard.rounds()) {
    set(page::kRounds, rounds->status());
    // A round's sum + optimizer step is what the shard's aggregation time records for sync shards.
    set(page::kRoundsApplyLatency, aggregation_latency);
  } else {
    set(page::kRoundsMode, "async");
  }

  const ServedShard::LastCheckpoint last = shard.last_checkpoint();
  set(page::kCheckpointCount, rd(k.checkpoints));
  set(page::kCheckpointErrors, rd(k.checkpoint_errors));
  set(page::kCheckpointLastUnix, last.unix_time);
  set(page::kCheckpointLastError, last.error);
  return j.dump(2) + "\n";
}

}  // namespace blockps
