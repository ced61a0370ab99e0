// A shard as the PS serves it: the model in memory, its config, counters, and its checkpoint file (created or
// loaded, locked against a second process, written on demand, periodically and at the end). It is the one owner
// of a push and a pull: whether a grad-LU command may run now or waits for a round (admit, hand_back_parked),
// whether a push is applied at once (async) or joins its rounds (sync, ssp:K), the counters, and the SCSI answer
// when it fails (lu_outcome.h); and of whose the shard is: which job holds it (job_claim.h) and which part of which
// model it is (its place, contract/place.h), which commands of other jobs' sessions it refuses, and the latest
// refusals in words (refusal_log.h). ServedLu checks a command against its LU's role and calls it; the glue
// (lu_abi.cpp) only translates tgt's types and threads. All LUs whose --backing-store paths name the same file
// share one ServedShard (shard_registry.h). Its status page is status_page.h; the control lines it obeys are
// parsed in control_lines.h.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "aggregator/model_shard.h"
#include "contract/lu_role.h"
#include "contract/place.h"
#include "contract/result.h"
#include "ps_backend/checkpoint/checkpoint.h"
#include "ps_backend/control/job_claim.h"
#include "ps_backend/control/refusal_log.h"
#include "ps_backend/rounds/rounds.h"
#include "ps_backend/shard/latency_window.h"
#include "ps_backend/shard/lu_options.h"
#include "ps_backend/shard/lu_outcome.h"

namespace blockps {

/// Monotonic counters for the status page.
struct ShardCounters {
  std::atomic<std::uint64_t> pushes{0}, push_bytes{0};
  std::atomic<std::uint64_t> pulls{0}, pull_bytes{0};  // reads of the grad and weights LUs
  std::atomic<std::uint64_t> weight_writes{0}, weight_write_bytes{0};
  std::atomic<std::uint64_t> aggregation_ns{0}, aggregation_max_ns{0};
  std::atomic<std::uint64_t> checkpoints{0}, checkpoint_errors{0};
  std::atomic<std::uint64_t> io_errors{0};
};

class ServedShard {
 public:
  /// Build a shard for `path` from `opts`: load the checkpoint when the file holds one (its shape must match
  /// the keys given), else initialise from the options. Returns the shard or the reason it cannot be made.
  static Result<std::shared_ptr<ServedShard>> create(const std::string& path, const LuOptions& opts);
  /// Writes a last checkpoint when the weights changed since the last one (nothing is lost on a clean stop);
  /// only for a shard that opened successfully. Never throws.
  ~ServedShard();

  const std::string& path() const { return path_; }
  ShardConfig config() const;
  ModelShard& model() { return model_; }
  const ModelShard& model() const { return model_; }
  ShardCounters& counters() { return counters_; }
  const ShardCounters& counters() const { return counters_; }

  /// Called after every completed change of the weights (push or weights-LU write).
  void note_mutation() { mutations_.fetch_add(1, std::memory_order_release); }
  void note_aggregation(std::uint64_t ns);

  /// Write a checkpoint that holds at least every change completed before the call; concurrent calls share one
  /// write. Then, with checkpoint_copy=, copy the file there when the copy is behind it; a failed copy is counted
  /// and shown (last_checkpoint()) but not returned. Ok or the reason the checkpoint was not written.
  Status checkpoint();
  /// Changes completed since the last checkpoint, or a copy of it still to make (periodic and final checkpoints
  /// write only then).
  bool dirty();

  /// The rounds of a mode=sync or ssp:K shard; null for async.
  Rounds* rounds() { return rounds_.get(); }
  const Rounds* rounds() const { return rounds_.get(); }

  // A push and a pull. Offsets and lengths are the LU's bytes, already checked against its capacity and the
  // wire dtype (ServedLu).
  /// A grad-LU WRITE's gradient (an I/O thread): applied now (async), or landed into its rounds (sync, ssp:K),
  /// which `handle` was admitted to. GOOD, or target_failure() when the update was not applied.
  LuOutcome push(std::uint64_t offset, std::span<const std::byte> data, const void* handle);
  /// A READ of the grad or weights LU (an I/O thread): the weights in the wire dtype.
  LuOutcome pull(std::uint64_t offset, std::span<std::byte> out);
  /// A weights-LU WRITE (an I/O thread): the weights replaced; optimizer state and steps stay.
  LuOutcome assign(std::uint64_t offset, std::span<const std::byte> data);

  // Admission, on tgt's main thread, of the commands a job's claim fences (a grad-LU READ or WRITE, a weights-LU
  // write) and of those that wait for a round (grad-LU commands of a shard with rounds). `owner` is the LU that
  // holds parked commands; it watches for wake-ups and hands them back when woken.
  /// Whether grad-LU commands of this shard may wait (it has rounds).
  bool parks_commands() const { return rounds_ != nullptr; }
  /// What becomes of a command before it is queued. run: queue it; parked: held for `owner`, it comes back through
  /// hand_back_parked(); refused: held too, and failed at the next hand_back_parked(), which the caller triggers
  /// now (a store answers a command with its own status only asynchronously or through its I/O threads);
  /// conflict: another job holds the shard and `owner` cannot hold commands (no rounds, or not the grad LU):
  /// queue it, and answer it reservation_conflict() when it executes. Every admitted command of the holder's
  /// sessions counts as the job's activity (claim_idle_s).
  enum class Admitted { run, parked, refused, conflict };
  /// `alive` (may be empty): which sessions still exist, for a push that finds the rounds' membership full.
  Admitted admit(const void* owner, const void* handle, LuRole lu, bool is_write, const WorkerRef& worker,
                 std::uint64_t offset, std::uint64_t len, const SessionProbe& alive = {});
  /// Drop workers whose session is gone (`alive` false), then give back each command of `owner` that may go on
  /// (`resubmit`) or fails (`fail`, with its SCSI answer; logged with why), keeping the rest parked.
  void hand_back_parked(const void* owner, const std::function<bool(int tid, std::uint64_t itn)>& alive,
                        const std::function<bool(const void* handle)>& aborted,
                        const std::function<void(const void* handle)>& resubmit,
                        const std::function<void(const void* handle, const LuOutcome& outcome)>& fail);
  /// Every command parked for `owner` fails (NOT READY, with `why`) at its next hand_back_parked().
  void refuse_parked(const void* owner, const std::string& why);
  /// `wake` is called (from any thread; it must only signal) when commands of `owner` may go on.
  void watch_parked(const void* owner, std::function<void()> wake);
  void unwatch_parked(const void* owner);

  /// When the shard was created or loaded (Unix time).
  std::uint64_t started_unix() const { return started_unix_; }
  /// The optimizer's time per push (async) or per round applied (sync).
  const LatencyWindow& aggregation_latency() const { return aggregation_latency_; }
  /// The last checkpoint written (Unix time, 0: none yet), the last one's error or its copy's ("" when both
  /// succeeded), and the step counts summed over the blocks of the file last written or loaded (0: none).
  struct LastCheckpoint {
    std::uint64_t unix_time = 0;
    std::string error;
    std::uint64_t block_steps = 0;
  };
  LastCheckpoint last_checkpoint() const;

  /// A control write to the status LU (control_lines.h) from `sender` (null: a session the LU did not admit),
  /// every line checked before any is applied: the job lines first, then the place, then the others. Lines other
  /// than checkpoint and release come only from the holder's sessions while a job holds the shard. Ok, or the
  /// reason it was refused (invalid_argument; also listed in recent_refusals()), or why an action failed.
  Status control(std::string_view text, const WorkerRef* sender);

  /// The job that holds the shard, its sessions and refusals.
  ClaimStatus claim_status() const { return claim_.status(); }
  /// On tgt's main thread, before a control write (whose job= line may find the claim lapsed): forget the claim's
  /// sessions that are gone.
  void forget_gone_sessions(const SessionProbe& alive) { claim_.forget_gone_sessions(alive); }
  /// Which part of which model the shard holds (none until a place= line or a checkpoint gave it one).
  std::optional<Place> place() const;
  /// The job and place a checkpoint records.
  ShardTenancy tenancy() const;
  /// A refusal the shard answered for a reason of its own, in one sentence, for the status page (an LU's own
  /// refusals: admins=).
  void note_refusal(const WorkerRef& who, LuRole lu, std::string reason) { refusals_.add(who, lu, std::move(reason)); }
  /// The latest refusals, oldest first.
  std::vector<RefusalEntry> recent_refusals() const { return refusals_.recent(); }

 private:
  ServedShard(std::string path, const ShardConfig& config, std::shared_ptr<CpuEngine> engine, Device device);
  void periodic_checkpoints(std::stop_token stop);
  /// A checkpoint or its copy failed (`why` names the file): counted, logged, shown on the status page.
  void note_checkpoint_failure(const std::string& why);
  Status apply_control(std::string_view text, const WorkerRef* sender);
  void joined_job(const JobClaim::Joined& joined, const std::string& job, const WorkerRef& sender);
  /// A grad-LU command the rounds refused, in one sentence: what, why, the workers counted, what to change.
  std::string rounds_refusal(const ParkedCommand& p, Refusal as, const std::string& why) const;

  const std::string path_;
  mutable std::mutex config_mutex_;
  ShardConfig config_;
  ModelShard model_;
  std::unique_ptr<Rounds> rounds_;  // after model_: it applies rounds to it
  ShardCounters counters_;
  LatencyWindow aggregation_latency_;
  const std::uint64_t started_unix_;
  JobClaim claim_;
  mutable std::mutex place_mutex_;
  std::optional<Place> place_;
  RefusalLog refusals_;
  std::mutex control_mutex_;  // one control write at a time: what it checked holds until it is applied
  // Set once create() succeeded: a shard that failed to open (bad init file, corrupt checkpoint) must not
  // write a "final checkpoint" over the file it could not load.
  bool serving_ = false;

  std::atomic<std::uint64_t> mutations_{0};
  std::mutex checkpoint_mutex_;               // one checkpoint write at a time
  bool file_is_current_ = false;              // the file holds the state as of checkpointed_mutations_
  std::uint64_t checkpointed_mutations_ = 0;  // a new shard's init counts as current: it is reproducible
  bool copy_is_current_ = true;               // checkpoint_copy= holds the file's last write (or there is none)
  mutable std::mutex last_checkpoint_mutex_;  // not checkpoint_mutex_: the status page must not wait on a write
  LastCheckpoint last_checkpoint_;
  int lock_fd_ = -1;  // flock on PATH.lock: one process per checkpoint file

  std::mutex periodic_mutex_;
  std::condition_variable_any periodic_cv_;
  std::jthread periodic_;
};

}  // namespace blockps
