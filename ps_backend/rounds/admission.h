// The words of an admission: what becomes of a command before it is queued (Admission), and why a held command
// fails (Refusal). One component decides it for every command, ps_backend/shard/admission_gate.h (the claim,
// admins=, then the rounds), and returns it in its one answer, AdmissionVerdict; the rounds (rounds.h) give the
// part they decide for a grad-LU command of a shard with rounds; the glue's C types (lu_abi.h) are mapped from it in
// one place (ps_backend/tgt_glue/lu_abi.cpp).
#pragma once

namespace blockps {

/// What becomes of a command now. A refusal (not_ready, failed, conflict, denied) is held like `park` where the LU
/// holds commands (a grad LU of a shard with rounds), and failed at its owner's next hand-back, which is signalled
/// at once; on an LU that holds none (only `conflict` and `denied` happen there) it is queued and answered when it
/// executes.
enum class Admission {
  run,        // queue it to the I/O threads
  park,       // hold it (tgt's asynchronous completion); it comes back through the hand-back, to run or to fail
  not_ready,  // refused as Refusal::not_ready (see Rounds::refusal_reason())
  failed,     // refused as Refusal::failed: a round's update was not applied (see Rounds::degraded_reason())
  conflict,   // refused as Refusal::reservation_conflict: another job holds the shard (job_claim.h)
  denied      // a control write of an initiator the status LU's admins= does not name: ACCESS DENIED
};

/// Why a held command fails; refused() (ps_backend/shard/lu_outcome.h) gives each its SCSI answer.
enum class Refusal {
  aborted,              // the initiator aborted it (ABORT TASK, LUN RESET, its session ended)
  not_ready,            // live workers are below min_workers, it waited worker_timeout_ms, or its LU is closing
  failed,               // the shard failed to apply a round: the weights a READ would return are not the round's
  reservation_conflict  // another job holds the shard (ps_backend/control/job_claim.h), or took it over while it waited
};

}  // namespace blockps
