// One LU of a shard: what each SCSI command that reaches the backing store means for its role (which commands it
// serves, the checks of ranges and alignment, durability on FUA); what a push, a pull and a weights write do to
// the shard is ServedShard's. The tgt glue hands commands here as plain buffers (ps_backend/lu_abi.h); nothing
// here knows tgt.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "contract/scsi_codes.h"
#include "ps_backend/lu_options.h"
#include "ps_backend/lu_outcome.h"
#include "ps_backend/served_shard.h"

namespace blockps {

/// A SCSI command as the target received it (the glue hands it to the core; the client's request is
/// client/lu_command.h LuCommand). offset/transfer_length are in bytes (tgt has range-checked the LBA range
/// against the capacity for READ/WRITE/VERIFY/WRITE SAME/PRE-FETCH). tgt sets transfer_length for READ and WRITE
/// only, in 32 bits: VERIFY uses the data length and WRITE SAME the CDB's block count.
struct TargetCommand {
  const std::uint8_t* cdb;
  std::uint64_t offset;
  std::uint32_t transfer_length;
  std::span<std::byte> in;         // data for the initiator (READ)
  std::span<const std::byte> out;  // data from the initiator (WRITE); may be empty
  const void* handle = nullptr;    // the glue's command, as admitted to Rounds (mode=sync grad LUs)
};

class ServedLu {
 public:
  /// `admins` (role=status): the initiators whose control lines are accepted; empty: every initiator's.
  ServedLu(LuRole role, std::shared_ptr<ServedShard> shard, std::uint32_t lu_block_bytes,
           std::vector<std::string> admins = {});

  std::uint64_t capacity_bytes() const;
  ServedShard& shard() { return *shard_; }

  /// Whether a WRITE of this LU must be admitted by its sender first (a status LU with an admin list).
  bool checks_writers() const { return !admins_.empty(); }
  /// On the glue's main thread, before the WRITE `handle` is queued: whether `initiator` (its sender's iSCSI name)
  /// is an administrator. execute() runs a control write of a checks_writers() LU only when this said yes for its
  /// handle; a write it never saw is refused (nothing fails open).
  bool admit_writer(const void* handle, std::string_view initiator);

  /// Execute one command; never throws.
  LuOutcome execute(const TargetCommand& cmd);

 private:
  LuOutcome read(std::uint64_t offset, std::span<std::byte> out);
  /// fua: the initiator asked for the write to be durable before it completes (a checkpoint follows).
  LuOutcome write(std::uint64_t offset, std::span<const std::byte> data, bool fua, const void* handle = nullptr);
  LuOutcome control(std::span<const std::byte> data, const void* handle);
  LuOutcome verify(std::uint64_t offset, std::span<const std::byte> expected);
  LuOutcome write_same(const TargetCommand& cmd);
  LuOutcome or_write(const TargetCommand& cmd);
  LuOutcome synchronize_cache(const TargetCommand& cmd);

  const LuRole role_;
  const std::shared_ptr<ServedShard> shard_;
  const std::uint32_t lu_block_bytes_;
  const std::vector<std::string> admins_;
  std::mutex admitted_mutex_;
  std::unordered_set<const void*> admitted_writes_;  // admitted by admit_writer(), not yet executed
};

}  // namespace blockps
