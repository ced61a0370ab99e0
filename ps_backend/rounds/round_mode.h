// A round mode: what admitting a push or a pull, landing a push's data and the keeper's tick mean under one
// mode= of the bsopts. BspMode (bsp_mode.h, mode=sync) and SspMode (ssp_mode.h, mode=ssp:K) implement it; the
// coordinator (rounds.h) owns what they share (RoundContext) and calls exactly one of them.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <span>
#include <utility>
#include <vector>

#include "aggregator/model_shard.h"
#include "ps_backend/base/latency_window.h"
#include "ps_backend/config/round_policy.h"
#include "ps_backend/rounds/admission.h"
#include "ps_backend/rounds/compressed_averages.h"
#include "ps_backend/rounds/contribution.h"
#include "ps_backend/rounds/membership.h"
#include "ps_backend/rounds/parking.h"
#include "ps_backend/rounds/worker_ref.h"

namespace blockps {

/// What the coordinator shares with its round mode. `lock` guards `members`, the counters and the mode's own
/// state; `parking` has its own lock. `model` must outlive it.
struct RoundContext {
  RoundContext(ModelShard& shard, const RoundPolicy& rounds, std::function<void(std::uint64_t ns)> applied)
      : model(shard),
        geometry(shard.geometry()),
        policy(rounds),
        on_applied(std::move(applied)),
        members(rounds),
        parking(rounds.worker_timeout_ms),
        compressed_averages(rounds.compress && shard.params().kind == OptimizerKind::average
                                ? std::make_shared<CompressedAverages>(geometry, *rounds.compress)
                                : nullptr) {}

  ModelShard& model;
  const ShardGeometry geometry;
  const RoundPolicy policy;
  // Called after each gradient is applied, with the time its sum and optimizer step took.
  const std::function<void(std::uint64_t ns)> on_applied;

  mutable std::mutex lock;
  Membership members;
  ParkingLot parking;
  std::uint64_t rounds_closed = 0, stragglers_dropped = 0;
  LatencyWindow round_latency;  // first push of a round -> applied
  // The first update the shard failed to apply since it opened or its rounds were reset ("" while none), and
  // how many failed. While set, every grad-LU command the rounds see fails (Refusal::failed): a READ would
  // return weights without that update, and later rounds would build on them.
  std::string apply_failure;
  std::uint64_t apply_failures = 0;

  // An averaging shard with compress=: its compressed rounds' averages as READs return them, and its residuals.
  // Null otherwise (an optimizer shard's READs return weights, compressed rounds or not).
  // Shared with the shard, whose checkpoints keep the residuals (also the last one, written after the rounds ended).
  const std::shared_ptr<CompressedAverages> compressed_averages;

  /// Without the lock: an update was not applied (`why` names the block); logged, and the shard fails commands.
  void failed_to_apply(const std::string& why);
};

/// The shard's round numbers for the status page.
struct RoundProgress {
  std::uint64_t rounds_min = 0, rounds_max = 0;  // over the blocks
  std::uint64_t open_rounds = 0;                 // blocks with a push in an open round
};

class RoundMode {
 public:
  using Clock = std::chrono::steady_clock;
  virtual ~RoundMode() = default;

  // Under the context's lock.
  /// Whether `worker`'s push of `spans` (a member's, at `now`) may go on. On run, `ticket` holds what the push
  /// claimed; land() gets it back with the data.
  virtual Admission admit_push(const WorkerRef& worker, std::span<const BlockSpan> spans, Clock::time_point now,
                               Ticket& ticket) = 0;
  /// Whether member `itn`'s READ of blocks [first_block, last_block] must wait for a round.
  virtual Admission admit_pull(std::uint64_t itn, std::uint64_t first_block, std::uint64_t last_block) = 0;
  /// The push of `ticket` has landed: its sectors count.
  virtual void landed(const Ticket& ticket) = 0;
  /// The worker left: its half-pushed gradients are discarded and it holds nobody back.
  virtual void drop_worker(std::uint64_t itn) = 0;
  /// Drop every open round (nothing of them is applied) and restart the round counters at 0.
  virtual void reset() = 0;
  virtual RoundProgress progress() const = 0;
  /// The rounds worker `itn` has pushed into on this shard: the fewest over the blocks.
  virtual std::uint64_t rounds_pushed(std::uint64_t itn) const = 0;

  // Without the context's lock (they take it where they need it).
  /// The data of an admitted push, on an I/O thread: the ticket's sectors are this push's alone. An error: an
  /// update this push made due was not applied (RoundContext::failed_to_apply was called).
  /// A piece whose data was refused (a compressed block that does not decode) is marked `rejected`: landed() gives
  /// its claim back, and the error names it.
  virtual Status land(Ticket& ticket, std::span<const std::byte> data) = 0;
  /// After landed(): apply what is due and wake the parked commands that may go on. An error as for land().
  virtual Status after_landing(const Ticket& ticket) = 0;
  /// The keeper's tick: rounds due by the straggler deadline close (a failed apply is recorded, as above).
  virtual void tick() = 0;
};

}  // namespace blockps
