// A shard as the PS serves it: the model in memory and its rounds. It is the one owner of a push and a pull once
// they are admitted (whether a command may run now, waits for a round or is refused is the admission gate's:
// admission_gate.h): whether a push is applied at once (async) or joins its rounds (sync, ssp:K), its durability
// (FUA: a checkpoint), the counters, the hand-back of held commands and the SCSI answer when one fails
// (hand_back_parked, lu_outcome.h); and of whose the shard is: which job holds it (job_claim.h) and which part of which
// model it is (its place, contract/place.h), and the latest refusals in words (refusal_log.h). It composes the
// rest: how it is opened (shard_creation.h), when its checkpoint is written (checkpoint_schedule.h), its counters
// (shard_counters.h), the control lines it obeys (control/shard_control.h). ServedLu checks a command against its
// LU's role and calls it; the glue (lu_abi.cpp) only translates tgt's types and threads. All LUs whose
// --backing-store paths name the same file share one ServedShard (shard_registry.h). Its status page is
// control/status_page_writer.h.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "aggregator/model_shard.h"
#include "contract/lu_role.h"
#include "contract/place.h"
#include "contract/result.h"
#include "ps_backend/base/latency_window.h"
#include "ps_backend/checkpoint/checkpoint.h"
#include "ps_backend/checkpoint/checkpoint_schedule.h"
#include "ps_backend/config/lu_options.h"
#include "ps_backend/control/job_claim.h"
#include "ps_backend/control/refusal_log.h"
#include "ps_backend/control/shard_control.h"
#include "ps_backend/control/weights_init.h"
#include "ps_backend/rounds/admission.h"
#include "ps_backend/rounds/rounds.h"
#include "ps_backend/shard/lu_outcome.h"
#include "ps_backend/shard/shard_counters.h"
#include "ps_backend/shard/shard_creation.h"

namespace blockps {

class ServedShard {
 public:
  /// Build a shard for `path` from `opts`: load the checkpoint when the file holds one (its shape must match
  /// the keys given), else initialise from the options. `wrap_store`, when given, gets the engine's store and
  /// returns the one the shard uses (ModelShard's seam: a test's store that fails on demand). Returns the shard or
  /// the reason it cannot be made.
  static Result<std::shared_ptr<ServedShard>> create(const std::string& path, const LuOptions& opts,
                                                     const ModelShard::StoreWrapper& wrap_store = {});
  /// Writes a last checkpoint when the weights changed since the last one (nothing is lost on a clean stop);
  /// only for a shard that opened successfully. Never throws.
  ~ServedShard();

  const std::string& path() const { return path_; }
  ShardConfig config() const;
  ModelShard& model() { return *model_; }
  const ModelShard& model() const { return *model_; }
  ShardCounters& counters() { return counters_; }
  const ShardCounters& counters() const { return counters_; }

  /// Called after every completed change of what a checkpoint holds (weights, optimizer settings, tenancy).
  void note_mutation() { checkpoints_.note_mutation(); }
  /// The optimizer's lr (control line lr=), recorded by the next checkpoint.
  void set_lr(float lr);

  /// Write a checkpoint that holds at least every change completed before the call (CheckpointSchedule).
  Status checkpoint() { return checkpoints_.checkpoint(); }
  /// Changes completed since the last checkpoint, or a copy of it still to make.
  bool dirty() { return checkpoints_.dirty(); }

  /// The rounds of a mode=sync or ssp:K shard; null for async.
  Rounds* rounds() { return rounds_.get(); }
  const Rounds* rounds() const { return rounds_.get(); }

  // A push and a pull. Offsets and lengths are the LU's bytes, already checked against its capacity and the
  // wire dtype (ServedLu). `durable` (FUA): the change is in the checkpoint file before the command completes.
  /// A grad-LU WRITE's gradient (an I/O thread): applied now (async), or landed into its rounds (sync, ssp:K),
  /// which `handle` was admitted to. GOOD; ILLEGAL REQUEST, INVALID FIELD IN PARAMETER LIST for a compressed round's
  /// push of the wrong form or one that does not decode (nothing applied); target_failure() when the update was
  /// not applied; MEDIUM ERROR, WRITE
  /// ERROR when it was but its durable checkpoint failed.
  LuOutcome push(std::uint64_t offset, std::span<const std::byte> data, const void* handle, bool durable = false);
  /// A READ of the grad or weights LU (`lu`; an I/O thread): the weights in the wire dtype; on an averaging shard with
  /// compress=, a grad-LU READ of a block whose last round was compressed returns that round's compressed average
  /// (the compressed block from the block's first byte, zeros after it).
  LuOutcome pull(std::uint64_t offset, std::span<std::byte> out, LuRole lu = LuRole::grad);
  /// A weights-LU WRITE (an I/O thread): the weights replaced; optimizer state and steps stay. Answers as push().
  LuOutcome assign(std::uint64_t offset, std::span<const std::byte> data, bool durable = false);

  // Held commands, on tgt's main thread: the admission gate (admission_gate.h) holds a grad-LU command of a shard
  // with rounds that waits for a round or is refused; `owner` is the LU that holds it, which watches for wake-ups and
  // hands them back when woken.
  /// Whether an LU of `role` on this shard holds commands: a grad LU of a shard with rounds.
  bool holds_commands(LuRole role) const { return role == LuRole::grad && rounds_ != nullptr; }
  /// Drop workers whose session is gone (`alive` false), then give back each command of `owner` that may go on
  /// (`resubmit`) or fails (`fail`, with its SCSI answer; logged with why), keeping the rest parked.
  void hand_back_parked(const void* owner, const std::function<bool(int tid, std::uint64_t itn)>& alive,
                        const std::function<bool(const void* handle)>& aborted,
                        const std::function<void(const void* handle, bool is_push, std::uint64_t len)>& resubmit,
                        const std::function<void(const void* handle, const LuOutcome& outcome)>& fail);
  /// Every command parked for `owner` fails (NOT READY, with `why`) at its next hand_back_parked().
  void refuse_parked(const void* owner, const std::string& why);
  /// `wake` is called (from any thread; it must only signal) when commands of `owner` may go on.
  void watch_parked(const void* owner, std::function<void()> wake);
  void unwatch_parked(const void* owner);

  /// When the shard was created or loaded (Unix time).
  std::uint64_t started_unix() const { return started_unix_; }
  /// The optimizer's time per push (async) or per round applied (sync).
  const LatencyWindow& aggregation_latency() const { return counters_.aggregation_latency; }
  LastCheckpoint last_checkpoint() const { return checkpoints_.last(); }

  /// A control write to the status LU (control_lines.h) from `sender` (null: a session the LU did not admit),
  /// every line checked before any is applied: the job lines first, then the place, then the others. Lines other
  /// than checkpoint and release come only from the holder's sessions while a job holds the shard. Ok, or the
  /// reason it was refused (invalid_argument; also listed in recent_refusals()), or why an action failed.
  Status control(std::string_view text, const WorkerRef* sender);

  /// The job that holds the shard, its sessions and refusals.
  ClaimStatus claim_status() const { return claim_.status(); }
  /// The claim itself: the admission gate checks commands against it, the control lines join, take over and release
  /// it (shard_control.h).
  JobClaim& claim() { return claim_; }
  /// On tgt's main thread, before a control write (whose job= line may find the claim lapsed): forget the claim's
  /// sessions that are gone.
  void forget_gone_sessions(const SessionProbe& alive) {
    claim_.forget_gone_sessions(alive);
    weights_init_.forget_gone_session(alive);
  }
  /// Who sets the weights of a new job (init-weights, init-done; weights_init.h).
  WeightsInit& weights_init() { return weights_init_; }
  /// Whether an update was applied to the weights (since the shard was created, or in the checkpoint it loaded).
  bool trained() const { return model_->total_block_steps() > 0; }
  /// Where that stands: a trained shard reads as set.
  WeightsInit::View weights_init_view() const { return weights_init_.view(trained()); }
  /// Which part of which model the shard holds (none until a place= line or a checkpoint gave it one).
  std::optional<Place> place() const;
  /// Set the place (control line place=); returns the one it replaces.
  std::optional<Place> set_place(const Place& place);
  /// The job and place a checkpoint records.
  ShardTenancy tenancy() const;
  /// A refusal, in one sentence, for the status page (the admission gate's: another job's session, admins=).
  void note_refusal(const WorkerRef& who, LuRole lu, std::string reason) { refusals_.add(who, lu, std::move(reason)); }
  /// The latest refusals, oldest first.
  std::vector<RefusalEntry> recent_refusals() const { return refusals_.recent(); }

 private:
  ServedShard(std::string path, const ShardConfig& config, std::unique_ptr<ModelShard> model);
  /// Creation's last steps: the state of the checkpoint file, or a new shard's weights; then the rounds.
  Status load(const ShardOpening& opening);
  Status initialise();
  void start_rounds();
  /// After start_rounds(): an averaging shard with compress= takes its residuals from its checkpoint (or zeros), and
  /// says which.
  Status restore_residuals(bool from_checkpoint);
  /// The checkpoint a FUA write asks for: GOOD, or MEDIUM ERROR, WRITE ERROR.
  LuOutcome made_durable();
  /// A grad-LU command the rounds refused, in one sentence: what, why, the workers counted, what to change.
  std::string rounds_refusal(const ParkedCommand& p, Refusal as, const std::string& why) const;

  const std::string path_;
  mutable std::mutex config_mutex_;
  ShardConfig config_;
  std::unique_ptr<ModelShard> model_;  // never null
  std::unique_ptr<Rounds> rounds_;     // after model_: it applies rounds to it
  // An averaging shard's compressed averages with their residuals (compress=), shared with its rounds: checkpoints
  // keep the residuals, the last one after the rounds have ended. Null otherwise.
  std::shared_ptr<CompressedAverages> compressed_averages_;
  ShardCounters counters_;
  const std::uint64_t started_unix_;
  JobClaim claim_;
  WeightsInit weights_init_;
  mutable std::mutex place_mutex_;
  std::optional<Place> place_;
  RefusalLog refusals_;
  ShardControl control_{*this};
  CheckpointSchedule checkpoints_;
  std::optional<ShardLock> lock_;  // PATH.lock: one process per checkpoint file
  // Set once create() succeeded: a shard that failed to open (bad init file, corrupt checkpoint) must not
  // write a "final checkpoint" over the file it could not load.
  bool serving_ = false;
};

}  // namespace blockps
