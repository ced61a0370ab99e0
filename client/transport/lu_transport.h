// How the client reaches one LU: one interface, two transports.
//   libiscsi: a userspace iSCSI (or iSER) initiator session, commands pipelined on libiscsi's event loop.
//   posix:    a block device (or a file standing in for one) opened with O_DIRECT, so that a read after a push
//             returns the PS's weights and not our own gradient from the page cache; engines psync, libaio,
//             io_uring.
// A transport is used by one thread at a time (the shard's I/O thread).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "blockps/lu_address.h"
#include "blockps/queue_counters.h"
#include "client/transport/command_order.h"
#include "client/transport/lu_command.h"
#include "contract/result.h"

namespace blockps {

// LuFailure::scsi_status when the target gave no SCSI status (an errno, a lost session, a refusal of ours).
inline constexpr int kNoScsiStatus = -1;

// Why a batch failed: the Status the library's callers get (its code the kind of failure, its message the reason:
// SCSI status and sense, errno's text, "disconnected"), which command, and the target's answer where it gave one.
// The transport decides the code, where it knows the answer: unreachable (the session was lost and could not be
// logged in again within TransportOptions::reconnect_for), conflict (RESERVATION CONFLICT: another job holds the
// shard; or the shard refused this session's job= line), io (any other failure).
struct LuFailure {
  std::size_t command = 0;
  Status status = Status::Ok();  // never ok in a failure made by the functions below
  // The target's answer (contract/scsi_codes.h): the status byte, and with CHECK CONDITION the sense key. Cluster
  // reads the shard's status page for the answers a shard gives for reasons of its own.
  int scsi_status = kNoScsiStatus;
  int sense_key = 0;
  // The shard refused this session's job= line (SessionJoin), at the join or after a re-login (then nothing of the
  // batch was sent again).
  bool job_refused = false;

  // A failure of ours or of the operating system (io).
  static LuFailure io(std::size_t command, std::string reason) {
    return {command, Status::Error(StatusCode::io, std::move(reason))};
  }
  // The session stayed lost (unreachable).
  static LuFailure unreachable(std::size_t command, std::string reason) {
    return {command, Status::Error(StatusCode::unreachable, std::move(reason))};
  }
  // The target's answer to command `command` (conflict for RESERVATION CONFLICT, io for any other).
  static LuFailure answered(std::size_t command, int scsi_status, int sense_key, std::string reason);
  // Whether the target answered (a SCSI status came back): only then did the shard refuse anything.
  bool answered() const { return scsi_status != kNoScsiStatus; }
  // This failure, one the target answered (answered()), as the shard's refusal of the session's job= line (conflict),
  // its reason put in `words`: words(reason) is the new message.
  template <class Words>
  LuFailure refusing_job(const Words& words) && {
    status = Status::Error(StatusCode::conflict, words(status.message()));
    job_refused = true;
    return std::move(*this);
  }
  const std::string& reason() const { return status.message(); }
};

// A job's claim through one LU's own session (client/job_and_place.h): the control lines this session writes to its
// target's status LU, at once and again after every later login, before anything else.
struct SessionJoin {
  int status_lun = 0;  // the status LU's LUN on this LU's target
  std::uint32_t status_block_bytes = 512;
  std::string lines;  // "job=NAME\n"
};

// Commands that join a batch while it runs (LuTransport::run_growing): a shard's stream (client/shard_io_thread.h),
// where an exchange queued while an earlier one's READs are parked at a sync shard goes out at once, instead of waiting
// for the end of a batch that ends only when its slowest round closes.
class CommandFeed {
 public:
  virtual ~CommandFeed() = default;
  // Appends to `commands` (the batch so far; its commands stay where they are) what joins it now, each new
  // command's `after` naming an earlier command of the batch or none; nothing when nothing does. Called on the
  // transport's thread when every WRITE of the batch has been issued and a slot is free (CommandOrder::wants_more),
  // at least every kFeedPollInterval while commands are in flight, and once more before the batch ends (nothing in
  // flight, nothing appended).
  virtual void more(std::vector<LuCommand>& commands) = 0;
};

class LuTransport {
 public:
  virtual ~LuTransport() = default;
  // "libiscsi iscsi://...", "posix/libaio /dev/sdb": what the messages call this LU.
  virtual const std::string& describe() const = 0;
  virtual std::uint64_t capacity_bytes() const = 0;
  // Offsets and lengths of commands must be multiples of this.
  virtual std::uint32_t block_size() const = 0;
  // Runs every command, within `limits`, in the order of client/transport/command_order.h (a command with a predecessor
  // only after that one succeeded). Nothing more is issued after the first failure.
  std::optional<LuFailure> run(std::span<const LuCommand> commands, QueueLimits limits) {
    std::vector<LuCommand> batch(commands.begin(), commands.end());
    return run_growing(batch, limits, nullptr);
  }
  // run(), with `feed` (none: nullptr) appending commands to `commands` while they run; the batch ends when nothing is
  // in flight and the feed has nothing more. LuFailure::command is an index into `commands` as it has grown.
  virtual std::optional<LuFailure> run_growing(std::vector<LuCommand>& commands, QueueLimits limits,
                                               CommandFeed* feed) = 0;
  // What the batches so far did (commands issued, and issued beside the other direction).
  virtual LuQueueCounters queue_counters() const = 0;
  // Why the session was last lost, when the transport logged in again ("" when it never was, or cannot be).
  virtual std::string last_session_loss() const { return {}; }
  // The most bytes one command may carry (0: no limit): libiscsi over iser:// (kLibiscsiIserMaxCommandBytes).
  virtual std::uint64_t max_command_bytes() const { return 0; }
  // The largest WRITE this transport sends safely in one command where larger ones are possible but fragile
  // (0: no such size): libiscsi, kLibiscsiImmediateWriteBytes. Write requests are kept within it, or within
  // one model block where a block is larger (a block is never split).
  virtual std::uint64_t max_safe_write_bytes() const { return 0; }
  // Joins this LU's session to a job: `join.lines` go at once as one control write (NUL-padded to whole blocks) to
  // LUN join.status_lun through this LU's own session, and again after every later login, before any command is
  // sent again (a refusal then fails that batch, LuFailure::job_refused). An empty join.lines: no more joins. The
  // target's refusal comes back as the failure of command 0. libiscsi: as said; posix: nothing, ok (the kernel has
  // one session per target, joined by the status device's own control write).
  virtual std::optional<LuFailure> join_job(const SessionJoin& join) = 0;
  // Called by the shard's I/O thread between batches, about every kKeepAliveInterval (client/shard_io_thread.h), also
  // while it has nothing to run: answers, without blocking, what the target sent meanwhile (a NOP-In). A target
  // drops a session that leaves its NOP-Ins unanswered (tgtd's nop_interval and nop_count), and an idle worker (an
  // evaluation pass, a checkpoint save, a wait in a collective) would otherwise lose every session and give up the
  // pushes of its next exchange when the drop races with them. A connection found closed is left for the next
  // run() to log in again: no failure is reported, and nothing is lost, since nothing is in flight. libiscsi: as
  // said; posix: nothing (the kernel's initiator answers NOP-Ins itself).
  virtual void keep_alive() {}
  // From now on, `observer` (empty: none) is told of every command of a queued batch as it completes (the
  // libiscsi transport and the libaio / io_uring engines; psync runs one command at a time and tells nobody).
  void observe_commands(CommandObserver observer) { observer_ = std::move(observer); }

 protected:
  CommandObserver observer_;
};

struct TransportOptions {
  std::string initiator;  // libiscsi: our IQN
  PosixEngine engine = PosixEngine::libaio;
  int queue_depth = 16;  // posix: sizes the libaio / io_uring rings
  // libiscsi: how long a lost session is logged in again (with backoff) before a batch fails; 0: never. A
  // Cluster passes the cluster file's [client] reconnect_s (ClientSpec). client/transport/libiscsi_transport.cpp says
  // what is sent again.
  std::chrono::milliseconds reconnect_for{0};
  // libiscsi: a login, or a batch in which no command completed for this long, fails.
  std::chrono::seconds timeout = kDefaultIscsiTimeout;
};

// Opens the LU at `address` with the transport its kind needs (URLs: libiscsi; paths: posix).
Result<std::unique_ptr<LuTransport>> open_lu_transport(const LuAddress& address, const TransportOptions& options);

// The two transports, for tests that pick one.
Result<std::unique_ptr<LuTransport>> open_libiscsi_transport(const std::string& url, const TransportOptions& options);
Result<std::unique_ptr<LuTransport>> open_posix_transport(const std::string& path, const TransportOptions& options);

}  // namespace blockps
