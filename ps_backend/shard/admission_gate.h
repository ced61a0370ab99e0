// Admission: what becomes of a command of one LU before tgt queues it, decided here and nowhere else
// (docs/ARCHITECTURE.md, "A push and a pull" and "Jobs and places"). In this order: the job's claim (job_claim.h: a
// session outside the job that holds the shard is refused, RESERVATION CONFLICT, before the rounds see its command),
// the status LU's admins= (a control write of another initiator is refused, ACCESS DENIED), then the rounds of a shard
// with mode=sync or ssp:K (rounds/rounds.h: the command runs, waits for a round, or is refused). The answer is one
// AdmissionVerdict; the glue keeps it with the command until the command runs (lu_abi.h, struct blockps_admitted), and
// ServedLu::execute answers a refusal that was not held. Runs on tgtd's main thread only; nothing here knows tgt.
// Tested in tests/unit/ps_backend/shard/test_admission_gate.cpp.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "contract/lu_role.h"
#include "ps_backend/control/job_claim.h"
#include "ps_backend/rounds/admission.h"
#include "ps_backend/rounds/worker_ref.h"
#include "ps_backend/shard/lu_outcome.h"

namespace blockps {

class ServedShard;

/// The one answer of an admission.
struct AdmissionVerdict {
  /// What becomes of the command: run, park, or why it is refused (rounds/admission.h).
  Admission what = Admission::run;
  /// The LU holds the command now (tgt's asynchronous completion) and it comes back through the next hand-back
  /// (ServedShard::hand_back_parked) to run or to fail: `park`, and a refusal where the LU holds commands (a grad LU
  /// of a shard with rounds; the hand-back is signalled at once). Otherwise the command runs, and its execution
  /// answers a refusal (answer()).
  bool held = false;
  /// Who sent it: a control write's lines act in its name (job=).
  WorkerRef sender;

  /// What a command that runs with this verdict is answered instead of running: RESERVATION CONFLICT (conflict),
  /// ACCESS DENIED (denied), a held refusal's own answer (refused(), lu_outcome.h); nothing for run and park.
  std::optional<LuOutcome> answer() const;
};

/// The admission of one LU's commands.
class AdmissionGate {
 public:
  /// `shard` must outlive the gate. `admins` (role=status): the initiators whose control lines are accepted; empty:
  /// every initiator's.
  AdmissionGate(LuRole role, ServedShard& shard, std::vector<std::string> admins = {});

  /// Whether a command with opcode `op` to an LU of `role` is admitted (admit()) before it is queued: the commands a
  /// job's claim fences (grad-LU READ and WRITE, a weights-LU command that changes weights), control writes
  /// (status-LU WRITE: their sender must be known, and admins= checks it) and status-page READs (which first let the
  /// claim forget gone sessions). From the role alone: the glue asks it first for every command, before it learns the
  /// sender. Every other command runs without an admission.
  static bool concerns(LuRole role, std::uint8_t op);
  /// Whether this LU refuses control lines of initiators that are not administrators (admins=).
  bool checks_writers() const { return !admins_.empty(); }

  /// The command `handle` (one this gate concerns) with opcode `op` of [offset, offset+len) bytes from `sender`:
  /// - status LU: a READ runs; a control write of an initiator admins= does not name is `denied` (logged and listed
  ///   in the shard's refusals), else it runs (the claim checks its lines when they are applied: ShardControl);
  /// - grad and weights LU: a session outside the job that holds the shard gets `conflict` (logged once per session,
  ///   listed in the shard's refusals); then a grad-LU command of a shard with rounds gets the rounds' answer (run,
  ///   park, not_ready, failed); everything else runs. Every command of the holder's sessions counts as the job's
  ///   activity (claim_idle_s).
  /// A parked command and a refusal on the LU that holds commands are held for `owner` (the LU whose glue hands them
  /// back, ServedShard::hand_back_parked). `alive` (may be empty) says which sessions still exist: a status-LU
  /// command first lets the claim forget the gone ones (so a job= line finds a claim whose sessions all left lapsed,
  /// and the page counts the live ones), and a push that finds the rounds' membership full drops gone members.
  AdmissionVerdict admit(const void* owner, const void* handle, std::uint8_t op, std::uint64_t offset,
                         std::uint64_t len, WorkerRef sender, const SessionProbe& alive = {});

 private:
  // admit() without the sender, which it moves into the verdict last.
  AdmissionVerdict decide(const void* owner, const void* handle, std::uint8_t op, std::uint64_t offset,
                          std::uint64_t len, const WorkerRef& sender, const SessionProbe& alive);
  AdmissionVerdict control_write(const WorkerRef& sender);
  /// The claim's check of a fenced command: nullopt when it may go on, else its refusal (held where the LU holds).
  std::optional<AdmissionVerdict> fence(const void* owner, const void* handle, bool is_write, const WorkerRef& sender,
                                        std::uint64_t offset, std::uint64_t len);
  AdmissionVerdict rounds(const void* owner, const void* handle, bool is_write, const WorkerRef& sender,
                          std::uint64_t offset, std::uint64_t len, const SessionProbe& alive);

  const LuRole role_;
  ServedShard& shard_;
  const std::vector<std::string> admins_;
};

}  // namespace blockps
