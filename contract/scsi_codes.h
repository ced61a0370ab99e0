// The SCSI facts both sides of the wire use (SPC/SBC): opcodes that reach a backing store, status bytes, sense
// keys and ASC/ASCQ codes, as plain constants: the PS core answers with them without tgt's headers, the
// initiator (client/transport/iscsi_lun.h, the tests) checks answers against them without libiscsi's.
#pragma once

#include <cstdint>

namespace blockps::scsi {

enum Opcode : std::uint8_t {
  kRead6 = 0x08,
  kRead10 = 0x28,
  kRead12 = 0xa8,
  kRead16 = 0x88,
  kWrite6 = 0x0a,
  kWrite10 = 0x2a,
  kWrite12 = 0xaa,
  kWrite16 = 0x8a,
  kWriteVerify10 = 0x2e,
  kWriteVerify12 = 0xae,
  kWriteVerify16 = 0x8e,
  kVerify10 = 0x2f,
  kVerify12 = 0xaf,
  kVerify16 = 0x8f,
  kWriteSame10 = 0x41,
  kWriteSame16 = 0x93,
  kOrWrite16 = 0x8b,
  kPreFetch10 = 0x34,
  kPreFetch16 = 0x90,
  kSynchronizeCache10 = 0x35,
  kSynchronizeCache16 = 0x91,
};

// kReservationConflict: the LU is fenced to other initiators (SPC's persistent reservations; blockps: a shard another
// job holds, docs/OPTIONS.md "Jobs and places"). It carries no sense data, and Linux's sd fails it at once.
enum Status : std::uint8_t { kGood = 0x00, kCheckCondition = 0x02, kReservationConflict = 0x18 };

enum SenseKey : std::uint8_t {
  kNoSense = 0x00,
  kNotReady = 0x02,
  kMediumError = 0x03,
  kHardwareError = 0x04,
  kIllegalRequest = 0x05,
  // The target reports an event (a reset, LUs added or removed, ...) instead of running the command; it does so
  // once per event and I_T nexus, so the command sent again runs (SAM-5 5.14).
  kUnitAttention = 0x06,
  kDataProtect = 0x07,
  kAbortedCommand = 0x0b,
  kMiscompare = 0x0e,
};

// ASC << 8 | ASCQ
enum Asc : std::uint16_t {
  kAscNone = 0x0000,
  kAscWriteError = 0x0c00,
  kAscMiscompareDuringVerify = 0x1d00,
  kAscInvalidOpcode = 0x2000,
  kAscLbaOutOfRange = 0x2100,
  kAscInvalidFieldInCdb = 0x2400,
  kAscInvalidFieldInParameterList = 0x2600,
  // mode=sync: live workers are below min_workers, or a parked command's round did not close in time
  // ("LOGICAL UNIT NOT READY, MANUAL INTERVENTION REQUIRED": initiators fail it instead of retrying).
  kAscNotReadyManualIntervention = 0x0403,
  kAscWriteProtect = 0x2700,
  kAscAccessDeniedNoAccessRights = 0x2002,
  kAscInternalTargetFailure = 0x4400,
  // With kUnitAttention: LUs were added to or removed from the target (tgt raises it on every session's LUs).
  kAscReportedLunsDataHasChanged = 0x3f0e,
};

inline bool is_read(std::uint8_t op) { return op == kRead6 || op == kRead10 || op == kRead12 || op == kRead16; }
inline bool is_write(std::uint8_t op) { return op == kWrite6 || op == kWrite10 || op == kWrite12 || op == kWrite16; }
inline bool is_write_verify(std::uint8_t op) {
  return op == kWriteVerify10 || op == kWriteVerify12 || op == kWriteVerify16;
}
/// The commands whose data a status LU takes as control lines (ServedLu::execute and the admission agree).
inline bool writes_data(std::uint8_t op) { return is_write(op) || is_write_verify(op); }
/// A WRITE whose initiator asked for it to be durable before it completes: FUA, byte 1 bit 3 (WRITE(6) has none).
inline bool forces_unit_access(const std::uint8_t* cdb) { return cdb[0] != kWrite6 && (cdb[1] & 0x08) != 0; }

}  // namespace blockps::scsi
