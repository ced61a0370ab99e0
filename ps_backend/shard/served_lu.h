// One LU of a shard: what each SCSI command that reaches the backing store means for its role (which commands it
// serves, the checks of ranges and alignment, which writes ask for durability: FUA); what a push, a pull and a
// weights write do to the shard (and a durable one to its checkpoint) is ServedShard's. The tgt glue hands commands
// here as plain buffers (ps_backend/tgt_glue/lu_abi.h); nothing here knows tgt.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "contract/scsi_codes.h"
#include "ps_backend/config/lu_options.h"
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
  const void* handle = nullptr;    // the glue's command, as given to ServedLu::admit
};

class ServedLu {
 public:
  /// `admins` (role=status): the initiators whose control lines are accepted; empty: every initiator's.
  ServedLu(LuRole role, std::shared_ptr<ServedShard> shard, std::uint32_t lu_block_bytes,
           std::vector<std::string> admins = {});

  std::uint64_t capacity_bytes() const;
  ServedShard& shard() { return *shard_; }

  /// Whether a command with opcode `op` to an LU of `role` is admitted (admit()) before it is queued: the
  /// commands a job's claim fences (grad-LU READ and WRITE, a weights-LU command that changes weights) and
  /// control writes (status-LU WRITE), whose sender the shard must know. From the role alone: the glue's admission
  /// (lu_abi.cpp) asks it first for every command, before it learns the sender or loads the shard.
  static bool needs_admission(LuRole role, std::uint8_t op);
  /// Whether this LU refuses control lines of initiators that are not administrators (admins=).
  bool checks_writers() const { return !admins_.empty(); }
  /// On the glue's main thread, before the command `handle` (one that needs_admission) from `sender` is queued:
  /// what becomes of it (ServedShard::admit; `owner` is the LU that holds parked commands): run, park, or, on the
  /// LU that holds commands, a refusal held to be failed at the next hand-back; a refusal on any other LU is
  /// answered when it executes, and admit() says run. What execute() must
  /// know of it is kept for `handle` until then: the sender of a control write (which the shard's job lines need,
  /// and which admins= checks: a non-administrator's write is answered ACCESS DENIED), or the refusal of a command
  /// another job's claim fences (RESERVATION CONFLICT: a store answers with its own status only through its I/O
  /// threads or asynchronously). A control write admit() never saw gets no sender: refused on an admins= LU
  /// (nothing fails open), and taken as an unknown session's otherwise.
  /// `alive` (may be empty) says which sessions still exist: a control write or a status-page READ first lets the
  /// claim forget the gone ones (so a job= line finds a claim whose sessions all left lapsed, and the page counts the
  /// live ones).
  Admission admit(const void* owner, const void* handle, std::uint8_t op, std::uint64_t offset, std::uint64_t len,
                  const WorkerRef& sender, const SessionProbe& alive = {});

  /// Whether a READ, or a WRITE (`write`) without FUA (FUA writes a checkpoint), of `len` bytes that may run now is
  /// cheap enough for the caller's thread (tgtd's main loop) rather than tgt's I/O pool: at most `limit` bytes
  /// (bsopts main_thread_bytes; 0: never) to a grad or weights LU of a CPU shard, and a grad-LU WRITE of a shard with
  /// rounds only where its blocks are no larger either (the WRITE that closes a round does the whole block's math).
  /// The pool's hand-off costs more than such a command's work.
  bool runs_on_caller(bool write, std::uint64_t len, std::uint32_t limit) const;

  /// Execute one command; never throws.
  LuOutcome execute(const TargetCommand& cmd);

 private:
  LuOutcome read(std::uint64_t offset, std::span<std::byte> out);
  /// fua: the initiator asked for the write to be durable before it completes (the shard checkpoints).
  LuOutcome write(std::uint64_t offset, std::span<const std::byte> data, bool fua, const void* handle = nullptr,
                  const WorkerRef* sender = nullptr);
  LuOutcome control(std::span<const std::byte> data, const WorkerRef* sender);
  // What admit() kept for a command; execute() takes it.
  struct AdmittedCommand {
    WorkerRef sender;
    LuOutcome answer;  // not GOOD: the command is answered this without running
  };
  void keep(const void* handle, AdmittedCommand admitted);
  std::optional<AdmittedCommand> take(const void* handle);
  LuOutcome verify(std::uint64_t offset, std::span<const std::byte> expected);
  LuOutcome write_same(const TargetCommand& cmd);
  LuOutcome or_write(const TargetCommand& cmd);
  LuOutcome synchronize_cache(const TargetCommand& cmd);

  const LuRole role_;
  const std::shared_ptr<ServedShard> shard_;
  const std::uint32_t lu_block_bytes_;
  const std::vector<std::string> admins_;
  std::mutex admitted_mutex_;
  std::unordered_map<const void*, AdmittedCommand> admitted_;  // kept by admit(), not yet executed
};

}  // namespace blockps
