// The worker-PS contract: the status page a shard's status LU serves (JSON, NUL-padded to kStatusLuBytes).
// Every field is named here once, as the JSON pointer a reader uses ("/shard/size") and the writer sets, so
// that ServedShard, the rounds engine, the client's shape checks, `blockps status` and the exporter agree.
// Header-only and dependency-free (docs/ARCHITECTURE.md, "The contract between worker and PS").
#pragma once

namespace blockps::status_page {

/// "/blockps/status_format": the page's format; a reader refuses another.
inline constexpr int kFormat = 1;
inline constexpr char kFormatField[] = "/blockps/status_format";

// The shard: what it is and how it is configured.
inline constexpr char kShard[] = "/shard";
inline constexpr char kShardPath[] = "/shard/path";
inline constexpr char kShardOptions[] = "/shard/options";  // every shard key as bsopts ("k=v;k=v")
inline constexpr char kShardSettings[] = "/shard/settings";  // the same as an object: {"k": "v", ...}
inline constexpr char kShardSize[] = "/shard/size";        // wire bytes
inline constexpr char kShardDtype[] = "/shard/dtype";      // wire dtype name (contract/wire_dtype.h)
inline constexpr char kShardBlock[] = "/shard/block";      // wire bytes per block
inline constexpr char kShardElements[] = "/shard/elements";
inline constexpr char kShardBlocks[] = "/shard/blocks";
inline constexpr char kShardOpt[] = "/shard/opt";
inline constexpr char kShardLr[] = "/shard/lr";
inline constexpr char kShardMode[] = "/shard/mode";      // async, sync, ssp:K
inline constexpr char kShardDevice[] = "/shard/device";  // as configured (cpu, auto, gpu:N)
inline constexpr char kShardEngine[] = "/shard/engine";  // what runs the optimizer (device=auto's choice)
inline constexpr char kShardCheckpointS[] = "/shard/checkpoint_s";
inline constexpr char kShardStartedUnix[] = "/shard/started_unix";

// Counters since the shard was created or loaded.
inline constexpr char kPushes[] = "/counters/pushes";
inline constexpr char kPushBytes[] = "/counters/push_bytes";
inline constexpr char kPulls[] = "/counters/pulls";  // READs of the grad and weights LUs
inline constexpr char kPullBytes[] = "/counters/pull_bytes";
inline constexpr char kWeightWrites[] = "/counters/weight_writes";
inline constexpr char kWeightWriteBytes[] = "/counters/weight_write_bytes";
inline constexpr char kIoErrors[] = "/counters/io_errors";

// The optimizer's time: per push (async) or per round applied (sync).
inline constexpr char kAggregationTotalNs[] = "/aggregation/total_ns";
inline constexpr char kAggregationMeanNs[] = "/aggregation/mean_ns";
inline constexpr char kAggregationMaxNs[] = "/aggregation/max_ns";
inline constexpr char kAggregationLatency[] = "/aggregation/latency";  // a latency object (below)

// The model: the optimizer steps applied so far, summed over the shard's blocks (each block counts its own:
// ModelShard::block_step). A shard loaded from a checkpoint starts at the checkpoint's.
inline constexpr char kModelBlockSteps[] = "/model/block_steps";

// Checkpoints. Errors count failed writes of the checkpoint and of its copy (checkpoint_copy=).
inline constexpr char kCheckpointCount[] = "/checkpoint/count";
inline constexpr char kCheckpointErrors[] = "/checkpoint/errors";
inline constexpr char kCheckpointLastUnix[] = "/checkpoint/last_unix";    // 0: none yet
inline constexpr char kCheckpointLastError[] = "/checkpoint/last_error";  // "" after a good one
// The steps summed as /model/block_steps, as the checkpoint file this process wrote or loaded last holds them (0:
// none): /model/block_steps minus this is what a kill -9 now would lose.
inline constexpr char kCheckpointBlockSteps[] = "/checkpoint/block_steps";

// Rounds (mode=sync/ssp; an async shard has only /rounds/mode).
inline constexpr char kRounds[] = "/rounds";
inline constexpr char kRoundsMode[] = "/rounds/mode";
inline constexpr char kRoundsWorkers[] = "/rounds/workers";  // expected workers
inline constexpr char kRoundsMaxWorkers[] = "/rounds/max_workers";  // the most live workers (max_workers, or workers)
inline constexpr char kRoundsMinWorkers[] = "/rounds/min_workers";
inline constexpr char kRoundsStragglerMs[] = "/rounds/straggler_ms";
inline constexpr char kRoundsWorkerTimeoutMs[] = "/rounds/worker_timeout_ms";
inline constexpr char kRoundsMin[] = "/rounds/rounds_min";
inline constexpr char kRoundsMax[] = "/rounds/rounds_max";
inline constexpr char kRoundsClosed[] = "/rounds/rounds_closed";
inline constexpr char kRoundsOpen[] = "/rounds/open_rounds";
inline constexpr char kRoundsLiveWorkers[] = "/rounds/live_workers";  // an array of live-worker objects (below)
inline constexpr char kRoundsStragglersDropped[] = "/rounds/stragglers_dropped";
inline constexpr char kRoundsWorkersDropped[] = "/rounds/workers_dropped";
inline constexpr char kRoundsRecentDrops[] = "/rounds/recent_drops";
inline constexpr char kRoundsParkedCommands[] = "/rounds/parked_commands";
// Degraded: grad-LU commands fail instead of waiting or being served, and why (live workers below min_workers,
// or an update the shard failed to apply).
inline constexpr char kRoundsDegraded[] = "/rounds/degraded";
inline constexpr char kRoundsDegradedReason[] = "/rounds/degraded_reason";
inline constexpr char kRoundsApplyFailures[] = "/rounds/apply_failures";  // updates not applied (GPU fault, ...)
inline constexpr char kRoundsRoundLatency[] = "/rounds/round_latency";    // first push of a round -> applied
inline constexpr char kRoundsApplyLatency[] = "/rounds/apply_latency";    // the round's sum + optimizer step

// The job that holds the shard (docs/OPTIONS.md, "Jobs and places").
inline constexpr char kJob[] = "/job";
inline constexpr char kJobHolder[] = "/job/holder";                       // "" when unclaimed
inline constexpr char kJobClaimedUnix[] = "/job/claimed_unix";            // 0 when unclaimed
inline constexpr char kJobSessions[] = "/job/sessions";                   // member sessions joined (a count)
inline constexpr char kJobLastActiveMsAgo[] = "/job/last_active_ms_ago";  // -1 when unclaimed
inline constexpr char kJobClaimIdleS[] = "/job/claim_idle_s";             // 0: the claim never lapses
inline constexpr char kJobLapsed[] = "/job/lapsed";    // held, but idle claim_idle_s: a job= may claim it
inline constexpr char kJobRefused[] = "/job/refused";  // commands refused because of the claim
inline constexpr char kJobTakeovers[] = "/job/takeovers";

// Which part of which model the shard holds (contract/place.h); "" and 0 when it has no place.
inline constexpr char kPlace[] = "/place";
inline constexpr char kPlaceModel[] = "/place/model";
inline constexpr char kPlaceIndex[] = "/place/index";
inline constexpr char kPlaceCount[] = "/place/count";
inline constexpr char kPlaceLayout[] = "/place/layout";  // stripe, range
inline constexpr char kPlaceText[] = "/place/text";      // as `place=` writes it: "MODEL INDEX/COUNT LAYOUT"

// Who sets the weights of a new job (control lines init-weights, init-done): "unset", "granted" (to /init/by) or
// "set" (by /init/by; "" when an applied update, from training or a checkpoint, is what says so).
inline constexpr char kInit[] = "/init";
inline constexpr char kInitState[] = "/init/state";
inline constexpr char kInitBy[] = "/init/by";

// The latest refusals the shard answered for a reason of its own (a job's claim, a control line, too few
// workers, a degraded shard, a command parked past its deadline): an array of refusal objects (below), oldest
// first, at most kRecentRefusals. A client whose command failed reads the newest with its own initiator name.
inline constexpr char kRefusalsRecent[] = "/refusals/recent";
inline constexpr int kRecentRefusals = 16;

/// The keys of a latency object: quantiles of recent samples and totals since the start.
namespace latency {
inline constexpr char kCount[] = "count";
inline constexpr char kP50Ns[] = "p50_ns";
inline constexpr char kP90Ns[] = "p90_ns";
inline constexpr char kP99Ns[] = "p99_ns";
inline constexpr char kMaxNs[] = "max_ns";
inline constexpr char kTotalCount[] = "total_count";
inline constexpr char kTotalNs[] = "total_ns";
}  // namespace latency

/// The keys of one entry of /rounds/live_workers.
namespace live_worker {
inline constexpr char kIqn[] = "iqn";
inline constexpr char kSession[] = "session";
inline constexpr char kPushes[] = "pushes";
inline constexpr char kLastPushMsAgo[] = "last_push_ms_ago";
inline constexpr char kJoinedMsAgo[] = "joined_ms_ago";
inline constexpr char kRoundsBehind[] = "rounds_behind";
}  // namespace live_worker

/// The keys of one entry of /refusals/recent.
namespace refusal {
inline constexpr char kIqn[] = "iqn";          // the sender's initiator name
inline constexpr char kSession[] = "session";  // its session (tgt's itn_id)
inline constexpr char kLu[] = "lu";            // grad, weights, status
inline constexpr char kReason[] = "reason";    // one sentence: what was refused, why, what to change
inline constexpr char kUnixMs[] = "unix_ms";   // the latest time (ms since the epoch)
inline constexpr char kCount[] = "count";      // times refused for this reason since the entry was made
}  // namespace refusal

}  // namespace blockps::status_page
