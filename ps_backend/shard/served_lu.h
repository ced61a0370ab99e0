// One LU of a shard: what each SCSI command that reaches the backing store means for its role (which commands it
// serves, the checks of ranges and alignment, which writes ask for durability: FUA); what a push, a pull and a
// weights write do to the shard (and a durable one to its checkpoint) is ServedShard's. Whether a command runs at all
// is its admission gate's (admission_gate.h), asked before the command is queued; execute() answers what the gate
// decided. The tgt glue hands commands here as plain buffers (ps_backend/tgt_glue/lu_abi.h); nothing here knows tgt.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "contract/scsi_codes.h"
#include "ps_backend/config/lu_options.h"
#include "ps_backend/shard/admission_gate.h"
#include "ps_backend/shard/lu_outcome.h"
#include "ps_backend/shard/served_shard.h"

namespace blockps {

/// A SCSI command as the target received it (the glue hands it to the core; the client's request is
/// client/transport/lu_command.h LuCommand). offset/transfer_length are in bytes (tgt has range-checked the LBA range
/// against the capacity for READ/WRITE/VERIFY/WRITE SAME/PRE-FETCH). tgt sets transfer_length for READ and WRITE
/// only, in 32 bits: VERIFY uses the data length and WRITE SAME the CDB's block count.
struct TargetCommand {
  const std::uint8_t* cdb;
  std::uint64_t offset;
  std::uint32_t transfer_length;
  std::span<std::byte> in;         // data for the initiator (READ)
  std::span<const std::byte> out;  // data from the initiator (WRITE); may be empty
  const void* handle = nullptr;    // the glue's command, as given to AdmissionGate::admit
  // What the LU's admission gate decided for it, kept with the command since (null: it was never admitted).
  const AdmissionVerdict* admitted = nullptr;
};

class ServedLu {
 public:
  /// `admins` (role=status): the initiators whose control lines are accepted; empty: every initiator's.
  ServedLu(LuRole role, std::shared_ptr<ServedShard> shard, std::uint32_t lu_block_bytes,
           std::vector<std::string> admins = {});

  std::uint64_t capacity_bytes() const;
  ServedShard& shard() { return *shard_; }

  /// The LU's admission (on the glue's main thread, before a command is queued).
  AdmissionGate& admission() { return admission_; }
  const AdmissionGate& admission() const { return admission_; }

  /// Whether a READ, or a WRITE (`write`) without FUA (FUA writes a checkpoint), of `len` bytes that may run now is
  /// cheap enough for the caller's thread (tgtd's main loop) rather than tgt's I/O pool: at most `limit` bytes
  /// (bsopts main_thread_bytes; 0: never) to a grad or weights LU of a CPU shard, and a grad-LU WRITE of a shard with
  /// rounds only where its blocks are no larger either (the WRITE that closes a round does the whole block's math).
  /// The pool's hand-off costs more than such a command's work.
  bool runs_on_caller(bool write, std::uint64_t len, std::uint32_t limit) const;

  /// Execute one command; never throws. A command the admission concerns answers what it decided (`cmd.admitted`):
  /// a refusal that was not held is answered without running (RESERVATION CONFLICT, ACCESS DENIED), and a control
  /// write's lines act in the sender's name. Such a command never admitted has no known sender: a control write is
  /// refused on an LU with admins= (nothing fails open), and taken as an unknown session's otherwise.
  LuOutcome execute(const TargetCommand& cmd);

 private:
  LuOutcome read(std::uint64_t offset, std::span<std::byte> out);
  /// fua: the initiator asked for the write to be durable before it completes (the shard checkpoints).
  LuOutcome write(std::uint64_t offset, std::span<const std::byte> data, bool fua, const void* handle = nullptr,
                  const WorkerRef* sender = nullptr);
  LuOutcome control(std::span<const std::byte> data, const WorkerRef* sender);
  LuOutcome verify(std::uint64_t offset, std::span<const std::byte> expected);
  LuOutcome write_same(const TargetCommand& cmd);
  LuOutcome or_write(const TargetCommand& cmd);
  LuOutcome synchronize_cache(const TargetCommand& cmd);

  const LuRole role_;
  const std::shared_ptr<ServedShard> shard_;
  const std::uint32_t lu_block_bytes_;
  AdmissionGate admission_;  // after shard_: it refers to the shard
};

}  // namespace blockps
