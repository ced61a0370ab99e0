// A control write to a shard's status LU, applied (docs/OPTIONS.md, "Control writes" and "Jobs and places"): the
// lines parsed (control_parser.h), every one checked before any is applied (the claim: a job= line joins, or the
// sender must have joined the holder; then the place), then applied in order: the job lines, the release, the
// place, the actions (lr=, checkpoint, reset-rounds). ServedShard::control calls it and lists its refusals.
#pragma once

#include <mutex>
#include <string>
#include <string_view>

#include "contract/result.h"
#include "ps_backend/control/control_parser.h"
#include "ps_backend/control/job_claim.h"
#include "ps_backend/rounds/worker_ref.h"

namespace blockps {

class ServedShard;

class ShardControl {
 public:
  explicit ShardControl(ServedShard& shard) : shard_(shard) {}

  /// The control lines `text` from `sender` (null: a session the LU did not admit). Lines other than checkpoint
  /// and release come only from the holder's sessions while a job holds the shard. Ok, or the reason it was
  /// refused (invalid_argument), or why an action failed. One write at a time: what it checked holds until it is
  /// applied.
  Status apply(std::string_view text, const WorkerRef* sender);

 private:
  /// The checks, before anything is applied: the claim, then the place, then the job line (which joins).
  Status check_claim(const ControlWrite& write, const WorkerRef& who, const std::string& session);
  Status check_place(const ControlWrite& write);
  Status join(const ControlWrite& write, const WorkerRef* sender);
  void joined_job(const JobClaim::Joined& joined, const std::string& job, const WorkerRef& sender);
  /// What cannot be refused any more.
  void release(const std::string& session);
  void set_place(const Place& place, const std::string& session);
  Status act(const ControlAction& action, const WorkerRef* sender);

  ServedShard& shard_;
  std::mutex mutex_;
};

}  // namespace blockps
