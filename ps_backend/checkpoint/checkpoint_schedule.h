// When a shard's checkpoint file is written: on demand (SYNCHRONIZE CACHE, FUA, the checkpoint control line),
// every checkpoint_s seconds while changes wait, and at the end; only when changes completed since the last
// write (or a checkpoint_copy= copy is behind). It keeps what became of the last write for the status page. What
// a checkpoint holds is checkpoint.h's; this says only when, and counts.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <stop_token>
#include <string>
#include <thread>

#include "contract/result.h"
#include "ps_backend/checkpoint/checkpoint.h"

namespace blockps {

/// The last checkpoint written (Unix time, 0: none yet), the last one's error or its copy's ("" when both
/// succeeded), and the step counts summed over the blocks of the file last written or loaded (0: none).
struct LastCheckpoint {
  std::uint64_t unix_time = 0;
  std::string error;
  std::uint64_t block_steps = 0;
};

/// The shard a schedule writes: its file, how to write it from the shard's state now, where its copy goes now
/// (checkpoint_copy=; "": none), and the counters of writes and failures (the shard's, for its status page).
struct CheckpointTarget {
  std::string path;
  std::function<Result<CheckpointWritten>()> write;
  std::function<std::string()> copy_to;
  std::atomic<std::uint64_t>* written = nullptr;
  std::atomic<std::uint64_t>* failed = nullptr;
};

class CheckpointSchedule {
 public:
  explicit CheckpointSchedule(CheckpointTarget target);
  /// Stops the periodic writes (no final checkpoint: the shard writes that, once nothing changes any more).
  ~CheckpointSchedule();
  CheckpointSchedule(const CheckpointSchedule&) = delete;
  CheckpointSchedule& operator=(const CheckpointSchedule&) = delete;

  /// Called after every completed change of what a checkpoint holds (weights, optimizer settings, tenancy).
  void note_mutation() { mutations_.fetch_add(1, std::memory_order_release); }
  /// The file holds the shard as loaded from it (`block_steps`, summed): nothing to write until the next change.
  void loaded(std::uint64_t block_steps);
  /// Write a checkpoint that holds at least every change completed before the call; concurrent calls share one
  /// write. Then, with a copy target, copy the file there when the copy is behind it; a failed copy is counted
  /// and shown (last()) but not returned. Ok or the reason the checkpoint was not written.
  Status checkpoint();
  /// Changes completed since the last checkpoint, or a copy of it still to make (periodic and final checkpoints
  /// write only then).
  bool dirty();
  LastCheckpoint last() const;

  /// Every `seconds` (> 0), a checkpoint when dirty(), on a thread of its own until stop_periodic().
  void start_periodic(std::uint32_t seconds);
  void stop_periodic();

 private:
  void periodic(std::stop_token stop, std::chrono::seconds period);
  Status write_file();
  void copy_file();
  /// A checkpoint or its copy failed (`why` names the file): counted, logged, shown by last().
  void note_failure(const std::string& why);

  const CheckpointTarget target_;
  std::atomic<std::uint64_t> mutations_{0};
  std::mutex mutex_;                          // one checkpoint write at a time
  bool file_is_current_ = false;              // the file holds the state as of checkpointed_mutations_
  std::uint64_t checkpointed_mutations_ = 0;  // a new shard's init counts as current: it is reproducible
  bool copy_is_current_ = true;               // the copy holds the file's last write (or there is none)
  mutable std::mutex last_mutex_;             // not mutex_: the status page must not wait on a write
  LastCheckpoint last_;

  std::mutex periodic_mutex_;
  std::condition_variable_any periodic_cv_;
  std::jthread periodic_;
};

}  // namespace blockps
