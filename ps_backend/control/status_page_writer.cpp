#include "ps_backend/control/status_page_writer.h"

#include <nlohmann/json.hpp>

#include "contract/status_page.h"

namespace blockps {

nlohmann::json latency_object(const LatencySummary& s) {
  namespace latency = status_page::latency;
  return {{latency::kCount, s.count},     {latency::kP50Ns, s.p50_ns}, {latency::kP90Ns, s.p90_ns},
          {latency::kP99Ns, s.p99_ns},    {latency::kMaxNs, s.max_ns}, {latency::kTotalCount, s.total_count},
          {latency::kTotalNs, s.total_ns}};
}

nlohmann::json rounds_section(const RoundsStatus& s) {
  namespace page = blockps::status_page;
  nlohmann::json workers = nlohmann::json::array();
  for (const RoundsStatus::LiveWorker& w : s.live_workers) {
    namespace worker = page::live_worker;
    workers.push_back({{worker::kIqn, w.iqn},
                       {worker::kSession, w.session},
                       {worker::kPushes, w.pushes},
                       {worker::kLastPushMsAgo, w.last_push_ms_ago},
                       {worker::kJoinedMsAgo, w.joined_ms_ago},
                       {worker::kRoundsBehind, w.rounds_behind}});
  }
  // Written at the contract's pointers into a page of its own, of which the rounds section is returned.
  nlohmann::json j;
  const auto set = [&j](const char* pointer, nlohmann::json value) { set_field(j, pointer, std::move(value)); };
  set(page::kRoundsMode, to_string(s.policy));
  set(page::kRoundsWorkers, s.policy.workers);
  set(page::kRoundsMaxWorkers, s.policy.most_workers());
  set(page::kRoundsMinWorkers, s.policy.min_workers);
  set(page::kRoundsStragglerMs, s.policy.straggler_ms);
  set(page::kRoundsWorkerTimeoutMs, s.policy.worker_timeout_ms);
  set(page::kRoundsMin, s.progress.rounds_min);
  set(page::kRoundsMax, s.progress.rounds_max);
  set(page::kRoundsClosed, s.rounds_closed);
  set(page::kRoundsOpen, s.progress.open_rounds);
  set(page::kRoundsLiveWorkers, std::move(workers));
  set(page::kRoundsStragglersDropped, s.stragglers_dropped);
  set(page::kRoundsWorkersDropped, s.workers_dropped);
  set(page::kRoundsRecentDrops, s.recent_drops);
  set(page::kRoundsParkedCommands, s.parked_commands);
  set(page::kRoundsDegraded, s.degraded);
  set(page::kRoundsDegradedReason, s.degraded_reason);
  set(page::kRoundsApplyFailures, s.apply_failures);
  set(page::kRoundsRoundLatency, latency_object(s.round_latency));
  return std::move(j[nlohmann::json::json_pointer(page::kRounds)]);
}

nlohmann::json refusals_array(const std::vector<RefusalEntry>& entries) {
  namespace refusal = status_page::refusal;
  nlohmann::json out = nlohmann::json::array();
  for (const RefusalEntry& e : entries)
    out.push_back({{refusal::kIqn, e.iqn},
                   {refusal::kSession, e.session},
                   {refusal::kLu, to_string(e.lu)},
                   {refusal::kReason, e.reason},
                   {refusal::kUnixMs, e.unix_ms},
                   {refusal::kCount, e.count}});
  return out;
}

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
  nlohmann::json settings = nlohmann::json::object();
  for (auto& [key, value] : shard_settings(c)) settings[key] = std::move(value);
  set(page::kShardSettings, std::move(settings));
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

  // The last checkpoint before the model's steps: steps only grow, so the page never shows a checkpoint ahead of
  // the model it was written from.
  const LastCheckpoint last = shard.last_checkpoint();
  set(page::kModelBlockSteps, shard.model().total_block_steps());

  set(page::kAggregationTotalNs, rd(k.aggregation_ns));
  set(page::kAggregationMeanNs, pushes ? rd(k.aggregation_ns) / pushes : 0);
  set(page::kAggregationMaxNs, rd(k.aggregation_max_ns));
  const nlohmann::json aggregation_latency = latency_object(shard.aggregation_latency().summary());
  set(page::kAggregationLatency, aggregation_latency);

  if (const Rounds* rounds = shard.rounds()) {
    set(page::kRounds, rounds_section(rounds->status()));
    // A round's sum + optimizer step is what the shard's aggregation time records for sync shards.
    set(page::kRoundsApplyLatency, aggregation_latency);
  } else {
    set(page::kRoundsMode, "async");
  }

  const ClaimStatus claim = shard.claim_status();
  set(page::kJobHolder, claim.holder);
  set(page::kJobClaimedUnix, claim.claimed_unix);
  set(page::kJobSessions, claim.sessions);
  set(page::kJobLastActiveMsAgo, claim.last_active_ms_ago);
  set(page::kJobClaimIdleS, claim.idle_s);
  set(page::kJobLapsed, claim.lapsed);
  set(page::kJobRefused, claim.refused);
  set(page::kJobTakeovers, claim.takeovers);

  const WeightsInit::View init = shard.weights_init_view();
  set(page::kInitState, std::string(to_string(init.state)));
  set(page::kInitBy, init.by);

  const std::optional<Place> place = shard.place();
  set(page::kPlaceModel, place ? place->model : "");
  set(page::kPlaceIndex, place ? place->index : 0);
  set(page::kPlaceCount, place ? place->count : 0);
  set(page::kPlaceLayout, place ? std::string(to_string(place->layout)) : "");
  set(page::kPlaceText, place ? format_place(*place) : "");

  set(page::kRefusalsRecent, refusals_array(shard.recent_refusals()));

  set(page::kCheckpointCount, rd(k.checkpoints));
  set(page::kCheckpointErrors, rd(k.checkpoint_errors));
  set(page::kCheckpointLastUnix, last.unix_time);
  set(page::kCheckpointLastError, last.error);
  set(page::kCheckpointBlockSteps, last.block_steps);
  // Text an initiator sent (a refused control line, an initiator name) may be any bytes: invalid UTF-8 becomes
  // U+FFFD instead of an exception that would leave the page unreadable while the refusal is among the recent ones.
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace blockps
