// A shard as the PS serves it: the model in memory, its config, counters, and its checkpoint file (created or
// loaded, locked against a second process, written on demand, periodically and at the end). All LUs whose
// --backing-store paths name the same file share one ServedShard (shard_registry.h). Its status page is
// status_page.h; the control lines it obeys are parsed in control_lines.h.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "aggregator/model_shard.h"
#include "ps_backend/contract/status.h"
#include "ps_backend/latency_window.h"
#include "ps_backend/lu_options.h"
#include "ps_backend/rounds/rounds.h"

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
  /// write. Ok or the reason.
  Status checkpoint();
  /// Changes completed since the last checkpoint (periodic and final checkpoints write only then).
  bool dirty();

  /// The rounds of a mode=sync or ssp:K shard; null for async.
  Rounds* rounds() { return rounds_.get(); }
  const Rounds* rounds() const { return rounds_.get(); }

  /// When the shard was created or loaded (Unix time).
  std::uint64_t started_unix() const { return started_unix_; }
  /// The optimizer's time per push (async) or per round applied (sync).
  const LatencyWindow& aggregation_latency() const { return aggregation_latency_; }
  /// The last checkpoint written (Unix time, 0: none yet) and the last one's error ("" when it succeeded).
  struct LastCheckpoint {
    std::uint64_t unix_time = 0;
    std::string error;
  };
  LastCheckpoint last_checkpoint() const;

  /// A control write to the status LU (control_lines.h), every line checked before any is applied. Ok or the
  /// reason it was refused (invalid_argument), or why an action failed.
  Status control(std::string_view text);

 private:
  ServedShard(std::string path, const ShardConfig& config, std::shared_ptr<CpuEngine> engine, Device device);
  void periodic_checkpoints(std::stop_token stop);

  const std::string path_;
  mutable std::mutex config_mutex_;
  ShardConfig config_;
  ModelShard model_;
  std::unique_ptr<Rounds> rounds_;  // after model_: it applies rounds to it
  ShardCounters counters_;
  LatencyWindow aggregation_latency_;
  const std::uint64_t started_unix_;
  // Set once create() succeeded: a shard that failed to open (bad init file, corrupt checkpoint) must not
  // write a "final checkpoint" over the file it could not load.
  bool serving_ = false;

  std::atomic<std::uint64_t> mutations_{0};
  std::mutex checkpoint_mutex_;               // one checkpoint write at a time
  bool file_is_current_ = false;              // the file holds the state as of checkpointed_mutations_
  std::uint64_t checkpointed_mutations_ = 0;  // a new shard's init counts as current: it is reproducible
  std::atomic<std::uint64_t> last_checkpoint_unix_{0};
  mutable std::mutex error_mutex_;     // not checkpoint_mutex_: the status page must not wait on a write
  std::string last_checkpoint_error_;  // "" after a good checkpoint
  int lock_fd_ = -1;                   // flock on PATH.lock: one process per checkpoint file

  std::mutex periodic_mutex_;
  std::condition_variable_any periodic_cv_;
  std::jthread periodic_;
};

}  // namespace blockps
