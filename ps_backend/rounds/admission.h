// The one answer of an admission: what becomes of a command before it is queued (Admission), and why a held
// command fails (Refusal). The rounds (rounds.h) give it for a grad-LU command, the shard (ServedShard::admit) for
// every command a job's claim fences, the LU (ServedLu::admit) for every command; the glue's C enum
// blockps_admission is mapped from it in one place (ps_backend/tgt_glue/lu_abi.cpp).
#pragma once

namespace blockps {

/// What becomes of a command now. A refusal (not_ready, failed, conflict) is held like `park` where the LU holds
/// commands (a grad LU of a shard with rounds), and failed at its owner's next hand-back, which is signalled at
/// once; on an LU that holds none (only `conflict` happens there) it is queued and answered when it executes.
enum class Admission {
  run,        // queue it to the I/O threads
  park,       // hold it (tgt's asynchronous completion); it comes back through the hand-back, to run or to fail
  not_ready,  // refused as Refusal::not_ready (see Rounds::refusal_reason())
  failed,     // refused as Refusal::failed: a round's update was not applied (see Rounds::degraded_reason())
  conflict    // refused as Refusal::reservation_conflict: another job holds the shard (job_claim.h)
};

/// Why a held command fails; refused() (ps_backend/shard/lu_outcome.h) gives each its SCSI answer.
enum class Refusal {
  aborted,              // the initiator aborted it (ABORT TASK, LUN RESET, its session ended)
  not_ready,            // live workers are below min_workers, it waited worker_timeout_ms, or its LU is closing
  failed,               // the shard failed to apply a round: the weights a READ would return are not the round's
  reservation_conflict  // another job holds the shard (ps_backend/control/job_claim.h), or took it over while it waited
};

}  // namespace blockps
