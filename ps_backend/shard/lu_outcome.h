// What a SCSI command gets back from the PS core: its status and sense, which the glue copies into tgt's command
// (lu_abi.h). The senses of the commands the rounds hold back and then refuse are chosen here, once.
#pragma once

#include <cstdint>

#include "contract/scsi_codes.h"
#include "ps_backend/rounds/admission.h"

namespace blockps {

struct LuOutcome {
  std::uint8_t status = scsi::kGood;
  std::uint8_t sense_key = scsi::kNoSense;
  std::uint16_t asc = scsi::kAscNone;
  bool has_info = false;  // sense INFORMATION field (e.g. miscompare offset)
  std::uint64_t info = 0;
};

inline LuOutcome good() { return {}; }
inline LuOutcome check_condition(std::uint8_t sense_key, std::uint16_t asc) {
  return {scsi::kCheckCondition, sense_key, asc, false, 0};
}

/// The answer of a command the PS could not carry out (an update it failed to apply, an internal error):
/// HARDWARE ERROR, INTERNAL TARGET FAILURE. The target's own work failed, not the medium's data: not MEDIUM ERROR.
inline LuOutcome target_failure() { return check_condition(scsi::kHardwareError, scsi::kAscInternalTargetFailure); }

/// The answer of a command to a shard another job holds (docs/OPTIONS.md, "Jobs and places"): RESERVATION
/// CONFLICT, without sense data, as a SCSI device fenced to other initiators answers.
inline LuOutcome reservation_conflict() {
  return {scsi::kReservationConflict, scsi::kNoSense, scsi::kAscNone, false, 0};
}

/// The answer of a control write of an initiator that the status LU's admins= does not name: ILLEGAL REQUEST,
/// ACCESS DENIED - NO ACCESS RIGHTS.
inline LuOutcome access_denied() {
  return check_condition(scsi::kIllegalRequest, scsi::kAscAccessDeniedNoAccessRights);
}

/// The answer of a grad-LU command the rounds held back and then refused: aborted: ABORTED COMMAND; not_ready:
/// NOT READY, 0x04/0x03 (MANUAL INTERVENTION REQUIRED: workers must come back, or an operator act); failed: the
/// round's update was not applied, target_failure(); reservation_conflict: reservation_conflict().
inline LuOutcome refused(Refusal why) {
  switch (why) {
    case Refusal::reservation_conflict:
      return reservation_conflict();
    case Refusal::aborted:
      return check_condition(scsi::kAbortedCommand, scsi::kAscNone);
    case Refusal::not_ready:
      return check_condition(scsi::kNotReady, scsi::kAscNotReadyManualIntervention);
    case Refusal::failed:
      break;
  }
  return target_failure();
}

}  // namespace blockps
