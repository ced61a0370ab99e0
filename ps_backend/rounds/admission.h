// What becomes of a grad-LU command the rounds (rounds.h) see: run now, wait, or fail, and why it failed.
#pragma once

#include "ps_backend/rounds/worker_ref.h"

namespace blockps {

/// What the glue does with a command now.
enum class Admission {
  run,        // queue it to the I/O threads
  park,       // hold it (tgt's asynchronous completion); it comes back through process_parked
  not_ready,  // fail it as Refusal::not_ready (see degraded_reason())
  failed      // fail it as Refusal::failed: a round's update was not applied (see degraded_reason())
};

/// Why a held command fails; refused() (ps_backend/shard/lu_outcome.h) gives each its SCSI answer.
enum class Refusal {
  aborted,              // the initiator aborted it (ABORT TASK, LUN RESET, its session ended)
  not_ready,            // live workers are below min_workers, it waited worker_timeout_ms, or its LU is closing
  failed,               // the shard failed to apply a round: the weights a READ would return are not the round's
  reservation_conflict  // another job holds the shard (ps_backend/control/job_claim.h), or took it over while it waited
};

}  // namespace blockps
