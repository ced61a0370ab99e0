// The rounds of a shard with mode=sync or mode=ssp:K (docs/OPTIONS.md, "Synchronous rounds"): which grad-LU
// commands may run now, which wait ("park") and when the workers' gradients are applied. This coordinator owns
// what every mode shares (RoundContext: the worker membership, the parked commands, the counters), the keeper
// thread and the status page's "rounds" object, and hands each decision to the round mode of the shard:
// BspMode (bsp_mode.h) or SspMode (ssp_mode.h). Nothing here knows tgt: the glue asks before it queues a
// grad-LU READ or WRITE (admit_*), hands parked commands back when woken (process_parked), and reports which
// sessions still exist (the `alive` callback).
//
// Threads: admit_*, process_parked and the alive callback run on tgtd's main thread; land_push on tgt's I/O
// pool threads; a keeper thread closes rounds on the straggler deadline and drops silent workers. The math of a
// round (sum, average, optimizer step) never runs on the main thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "aggregator/model_shard.h"
#include "ps_backend/config/round_policy.h"
#include "ps_backend/rounds/admission.h"
#include "ps_backend/rounds/parking.h"
#include "ps_backend/rounds/round_mode.h"
#include "ps_backend/rounds/worker_ref.h"

namespace blockps {

/// What the rounds report for the status page's "rounds" section (ps_backend/control/status_page_writer.cpp writes it
/// as JSON).
struct RoundsStatus {
  RoundPolicy policy;
  RoundProgress progress;
  struct LiveWorker {
    std::string iqn;
    std::uint64_t session = 0, pushes = 0, last_push_ms_ago = 0, joined_ms_ago = 0, rounds_behind = 0;
  };
  std::vector<LiveWorker> live_workers;
  std::uint64_t rounds_closed = 0, stragglers_dropped = 0, workers_dropped = 0, parked_commands = 0;
  std::vector<std::string> recent_drops;  // "IQN (session N): why", oldest first
  bool degraded = false;
  std::string degraded_reason;  // "" when not degraded
  std::uint64_t apply_failures = 0;
  LatencySummary round_latency;  // first push of a round -> applied
};

class Rounds {
 public:
  /// Starts the keeper thread. `model` must outlive this object; `policy.mode` picks the round mode (ssp:K or
  /// else sync). `on_applied(ns)` is called after each gradient is applied (a round's average in mode=sync, a
  /// push in mode=ssp:K), with the time its sum and optimizer step took.
  Rounds(ModelShard& model, const RoundPolicy& policy, std::function<void(std::uint64_t ns)> on_applied);
  ~Rounds();
  Rounds(const Rounds&) = delete;
  Rounds& operator=(const Rounds&) = delete;

  /// A grad-LU WRITE of [offset, offset+len) by `worker` (the first one makes it a member). run: its blocks are
  /// claimed for the worker and `handle` must reach land_push; park: the round mode makes it wait (sync: it
  /// overlaps what the worker already pushed in an open round; ssp: the worker is too far ahead); not_ready:
  /// it would wait while live workers are below min_workers.
  /// mode=sync: a push from a worker the shard does not know yet while `workers` are live is refused (not_ready, and
  /// refusal_reason() says why); `alive` (may be empty; tgt's main thread) first drops members whose session is
  /// gone, so a restarted job's new sessions replace its dead ones at once.
  Admission admit_push(const void* handle, const WorkerRef& worker, std::uint64_t offset, std::uint64_t len,
                       const std::function<bool(int tid, std::uint64_t itn)>& alive = {});
  /// The data of an admitted push (I/O thread). invalid_argument, with nothing of it applied, for a compressed
  /// round's push of the wrong form or one that does not decode (compress=). An error when `handle` was not admitted
  /// (nothing is changed), or when an update this push made due (its own in ssp, its round's in sync) was not applied:
  /// from then on every grad-LU command fails (Admission::failed) until reset().
  Status land_push(const void* handle, std::span<const std::byte> data);
  /// A grad-LU READ: park while `itn` pushed one of the blocks in a round not applied yet (sync); not_ready
  /// instead of parking when live workers are below min_workers.
  Admission admit_pull(std::uint64_t itn, std::uint64_t offset, std::uint64_t len);

  /// Hold a command the glue parked (ParkingLot::park).
  void park(const void* owner, const void* handle, bool is_push, const WorkerRef& worker, std::uint64_t offset,
            std::uint64_t len, std::string refusal = {}, Refusal refused_as = Refusal::not_ready);
  /// Main thread, when woken: drop workers whose session is gone (`alive(tid, itn)` false), then give back every
  /// command of `owner` that may go on (`resubmit`), is refused, past its deadline or aborted (`fail`),
  /// keeping the rest parked.
  void process_parked(const void* owner, const std::function<bool(int tid, std::uint64_t itn)>& alive,
                      const std::function<bool(const void* handle)>& aborted, const ParkingLot::Resubmit& resubmit,
                      const ParkingLot::Fail& fail);
  /// Every command parked for `owner` fails (with `why`) at the glue's next process_parked: its LU is closing.
  void refuse_parked(const void* owner, const std::string& why);
  /// `wake` is called (from any thread) when parked commands of `owner` may go on; it must only signal.
  void subscribe(const void* owner, std::function<void()> wake);
  void unsubscribe(const void* owner);

  /// Control: drop every open round (nothing of them is applied), restart the round counters at 0 and forget a
  /// failed update (commands are served again; a device that still fails fails the next round the same way).
  void reset();
  /// Another job took the shard over (docs/OPTIONS.md, "Jobs and places"): as reset(), and every worker leaves the
  /// membership (logged with `why`), so that the next workers form anew, and every parked command fails with
  /// `why` as Refusal::reservation_conflict at the glue's next wake.
  void restart(const std::string& why);
  /// Whether the rounds hold nothing a restart would drop: no member, no parked command, no open round.
  bool idle() const;
  /// Why commands are refused now ("" when they are not): a failed update, or live workers below min_workers.
  std::string degraded_reason() const;
  /// Why a command of `worker` was refused as not_ready: the membership is full without it, or degraded_reason().
  std::string refusal_reason(const WorkerRef& worker) const;
  /// The members now (workers that pushed and were not dropped).
  std::size_t live_workers() const;
  const RoundPolicy& policy() const { return ctx_.policy; }
  /// An averaging shard's compressed rounds (compress=): what its grad LU's READs return; null otherwise.
  const CompressedAverages* compressed_averages() const { return ctx_.compressed_averages.get(); }
  CompressedAverages* compressed_averages() { return ctx_.compressed_averages.get(); }
  std::shared_ptr<CompressedAverages> shared_compressed_averages() const { return ctx_.compressed_averages; }
  RoundsStatus status() const;

 private:
  using Clock = std::chrono::steady_clock;
  void drop_member_locked(std::uint64_t itn, const std::string& why);
  std::string degraded_reason_locked() const;
  void keep(const std::stop_token& stop);

  RoundContext ctx_;
  std::unique_ptr<RoundMode> mode_;
  std::unordered_map<const void*, Ticket> tickets_;  // admitted pushes whose data has not landed, by handle

  std::condition_variable_any keeper_cv_;
  bool recheck_ = false;  // under ctx_.lock: a worker left, so a round may close now
  std::jthread keeper_;   // last: stopped before what it reads is destroyed
};

}  // namespace blockps
