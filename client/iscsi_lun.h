// One iSCSI LU seen through libiscsi (a userspace initiator: no kernel initiator, no /dev/sdX), for tests and
// benchmarks: blocking READ16 / WRITE16 / SYNCHRONIZE CACHE 10 with the SCSI status and sense as values, and
// an asynchronous pipeline (N commands at queue depth Q) that measures throughput.
//
// A transport failure (connection lost, command timed out) drops the session: the object is then
// disconnected and every call returns an error until connect() succeeds again. Not thread-safe: one
// IscsiLun per thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "ps_backend/contract/status.h"

struct iscsi_context;

namespace blockps {

struct LuQueueCounters;  // client/command_order.h

// libiscsi's status codes: a SCSI status byte, or one of its transport codes (values from <iscsi/iscsi.h>).
inline constexpr int kScsiGood = 0;
inline constexpr int kScsiCheckCondition = 2;
inline constexpr int kScsiTransportCancelled = 0x0f000000;
inline constexpr int kScsiTransportError = 0x0f000001;  // also: not connected, bad arguments
inline constexpr int kScsiTransportTimeout = 0x0f000002;
// Sense keys and ASC/ASCQ pairs used by the tests (SPC-4).
inline constexpr int kSenseIllegalRequest = 0x05;
inline constexpr int kAscLbaOutOfRange = 0x2100;

// What one SCSI command did.
struct ScsiResult {
  int status = kScsiGood;  // SCSI status byte, or kScsiTransport* when no SCSI status came back
  int sense_key = 0;       // with CHECK CONDITION
  int asc = 0;             // ASC << 8 | ASCQ, with CHECK CONDITION
  std::string message;     // human-readable; empty when status is GOOD

  bool ok() const { return status == kScsiGood; }
  bool check_condition(int key, int asc_ascq) const {
    return status == kScsiCheckCondition && sense_key == key && asc == asc_ascq;
  }
  // "GOOD", "CHECK CONDITION ILLEGAL_REQUEST(0x05) LBA_OUT_OF_RANGE(0x2100)", "transport error: ..."
  std::string describe() const;
};

struct ConnectOptions {
  std::chrono::seconds timeout{30};  // login and each blocking command
  // Off: a lost connection is an error that drops the session; the caller decides whether to reconnect() and
  // what to send again (LibiscsiTransport does). On: libiscsi reconnects by itself and sends every command in
  // flight again, WRITEs included, which may apply a push twice: only for tools that know their commands are
  // idempotent.
  bool auto_reconnect = false;
  // Header digest NONE (what the benchmark and tgt's defaults use). true: CRC32C.
  bool header_digest = false;
};

enum class IoDirection { read, write };

// A piece of memory that a command reads into or writes from (commands may scatter and gather).
struct IoSegment {
  std::byte* data = nullptr;
  std::size_t bytes = 0;
};

// LuCommand::after when a command waits for no other.
inline constexpr std::size_t kNoPredecessor = static_cast<std::size_t>(-1);

// One READ or WRITE of the segments' bytes, back to back, at LU byte offset `offset`.
struct LuCommand {
  IoDirection direction = IoDirection::read;
  std::uint64_t offset = 0;
  std::vector<IoSegment> segments;
  // The index of an earlier command of the same batch that must complete with success before this one is
  // issued (the exchange: a block's READ after its WRITE); kNoPredecessor: none. See client/command_order.h.
  std::size_t after = kNoPredecessor;
  std::uint64_t bytes() const {
    std::uint64_t n = 0;
    for (const IoSegment& s : segments) n += s.bytes;
    return n;
  }
};

// How many commands a transport keeps in flight on one LU.
struct QueueLimits {
  int depth = 16;  // commands in flight (>= 1)
  // In a batch where some commands wait for others (an exchange), independent commands (its WRITEs) in
  // flight; 0: no limit but `depth`. The cluster file's [client] exchange_writes;
  // client/command_order.h says why.
  int exchange_writes = 0;
};

// What became of one command of a batch (run_commands), for a caller that decides what may be sent again.
enum class CommandOutcome {
  not_issued,  // never handed to libiscsi: sending it later is its first time
  succeeded,   // GOOD
  refused,     // the target answered with another status (CHECK CONDITION ...)
  unanswered,  // handed to libiscsi, and the session was lost before an answer came: the target may or may not
               // have executed it
};

// What run_commands() did: ok, or the first command that failed and why.
struct CommandBatchResult {
  ScsiResult error;                      // ok() when every command completed with GOOD
  std::size_t failed_command = 0;        // index of the first failure in the batch
  std::vector<CommandOutcome> outcomes;  // one per command of the batch
  bool session_lost = false;             // a transport failure dropped the session (connected() is false)
  bool ok() const { return error.ok(); }
};

// One benchmark run: commands of request_bytes each, queue_depth in flight, offsets walking sequentially
// through [range_offset, range_offset + range_bytes) and wrapping. Stops issuing when `requests` commands
// were issued or `seconds` passed, whichever comes first (at least one limit is required); in-flight
// commands are waited for and counted.
struct PipelineSpec {
  IoDirection direction = IoDirection::read;
  std::uint32_t request_bytes = 256 * 1024;  // multiple of the block size
  int queue_depth = 16;
  std::uint64_t range_offset = 0;  // bytes, block aligned
  std::uint64_t range_bytes = 0;   // 0: to the end of the LU; rounded down to whole requests
  std::uint64_t requests = 0;      // 0: no count limit
  double seconds = 0;              // 0: no time limit
  // Writes: the request at range-relative offset r sends write_source[r % size ...] (size must be a
  // non-zero multiple of request_bytes). Must stay valid until run_pipeline() returns.
  std::span<const std::byte> write_source;
};

struct PipelineResult {
  std::uint64_t requests = 0;  // completed with GOOD status
  std::uint64_t bytes = 0;     // payload bytes of those
  double seconds = 0;          // from first issue to last completion
  ScsiResult error;            // first failure; ok() when none
  bool ok() const { return error.ok(); }
  double megabytes_per_second() const { return seconds > 0 ? static_cast<double>(bytes) / seconds / 1e6 : 0; }
};

// libiscsi 1.19's iSER transport (lib/iser.c) gives every command one fixed, pre-registered 256 KiB data
// buffer (DATA_BUFFER_SIZE 0x40000). A READ or WRITE above that fails in iser_send_command ("Libiscsi-iSER
// supports messages smaller than 512k", checked in the installed binary: cmp $0x40000 on the transfer length),
// and the process then dies of SIGSEGV (seen in tests/vm with 1 MiB requests and the 1 MiB status page read;
// gone with commands <= 256 KiB; the exact fault site is not traced, likely the failed PDU left queued on the
// session and freed). So iser:// sessions carry at
// most this many bytes per command; callers split requests (libblockps caps [client] max_request).
inline constexpr std::uint64_t kLibiscsiIserMaxCommandBytes = std::uint64_t{256} * 1024;

// libiscsi 1.19 can break a session when it answers a target's NOP-In while Data-Out PDUs wait in its send
// queue: the answer (an immediate NOP-Out) takes the CmdSN of the first PDU queued, an old Data-Out's, and the
// next send fails with "iscsi_write_to_socket: outqueue[0]->cmdsn < expcmdsn" (lib/socket.c; fixed upstream in
// 1.20 by commit 7e59b9b, "socket: fix rewrite cmdsn of immediate pdus", whose log shows that message against
// tgt; Debian bookworm ships 1.19). A WRITE needs no Data-Out PDU when all its data rides in the command PDU as
// immediate data: at most the FirstBurstLength libiscsi 1.19 offers (262144) and the target's
// MaxRecvDataSegmentLength (configs/*.conf and the tests' targets set 262144 with ImmediateData=Yes).
inline constexpr std::uint64_t kLibiscsiImmediateWriteBytes = std::uint64_t{256} * 1024;

class IscsiLun {
 public:
  IscsiLun() = default;
  ~IscsiLun();  // logs out
  IscsiLun(const IscsiLun&) = delete;
  IscsiLun& operator=(const IscsiLun&) = delete;
  IscsiLun(IscsiLun&& other) noexcept;
  IscsiLun& operator=(IscsiLun&& other) noexcept;

  // Logs in to url ("iscsi://HOST:PORT/IQN/LUN", or "iser://..." when libiscsi was built with iSER) as
  // initiator_iqn, offering ImmediateData=Yes and
  // InitialR2T=No, and reads the LU's capacity (READ CAPACITY 16). Error when the URL is malformed, the
  // target is unreachable, login is refused or the LUN does not exist.
  Status connect(const std::string& url, const std::string& initiator_iqn, const ConnectOptions& options = {});
  // Logs in again after a transport failure (or disconnect()), to the same URL as the same initiator with the
  // same ISID, so the target reinstates the session (it closes what is left of the old one, RFC 7143 6.3.5)
  // instead of seeing a second I_T nexus of this worker. Error as connect(), or when the LU's capacity or
  // block size changed, or when connect() never succeeded.
  Status reconnect();
  // Logs out (best effort) and frees the session. Safe to call when not connected.
  void disconnect();
  bool connected() const { return ctx_ != nullptr; }

  std::uint64_t capacity_bytes() const { return capacity_bytes_; }
  std::uint32_t block_size() const { return block_size_; }
  // The most bytes one READ/WRITE may carry on this session, 0 = no limit of ours. iser:// sessions:
  // kLibiscsiIserMaxCommandBytes (see there); commands above it are refused before they reach libiscsi.
  std::uint64_t max_command_bytes() const { return max_command_bytes_; }
  // Re-reads capacity and block size (READ CAPACITY 16).
  ScsiResult read_capacity();

  // READ16 of out.size() bytes at byte offset `offset` (both multiples of block_size()).
  ScsiResult read(std::uint64_t offset, std::span<std::byte> out);
  // WRITE16 of data at byte offset `offset` (both multiples of block_size()).
  ScsiResult write(std::uint64_t offset, std::span<const std::byte> data);
  // SYNCHRONIZE CACHE 10 of the whole LU (what fsync on a block device sends).
  ScsiResult synchronize_cache();
  // TEST UNIT READY.
  ScsiResult test_unit_ready();
  // LOGICAL UNIT RESET task management function (aborts every task on the LU, of every session).
  ScsiResult lun_reset();

  // Runs spec and measures it (see PipelineSpec).
  PipelineResult run_pipeline(const PipelineSpec& spec);

  // Runs every command (READ16 / WRITE16 with the segments as the data buffer), within `limits`, in the order
  // client/command_order.h gives (the order given, where no command waits for another). After the first
  // failure nothing more is issued; what is in flight is waited for. A transport failure drops the session (as
  // in read()). `counters` (optional) is added to.
  CommandBatchResult run_commands(std::span<const LuCommand> commands, QueueLimits limits,
                                  LuQueueCounters* counters = nullptr);

 private:
  struct Completion;
  struct QueueSlot;
  // What drive_queue's `next` did with a free slot: queued a command, has none ready until one completes, or
  // will queue no more.
  enum class Issue { queued, not_now, stop };
  // Queues slot's command (READ16/WRITE16 of `bytes` at byte `offset`, data in s.iov); false when libiscsi
  // would not queue it (not_queued() then says why).
  bool queue(QueueSlot& s, IoDirection direction, std::uint64_t offset, std::uint32_t bytes);
  ScsiResult not_queued(IoDirection direction) const;
  // The queue of run_pipeline() and run_commands(): keeps up to slots.size() commands in flight. next(slot)
  // queues the next command into a free slot (Issue::stop: none left or it could not queue; issuing stops).
  // completed(slot) takes back one that finished (false: stop issuing, drain what is in flight). Returns
  // why the queue ended early (transport failure, no completion for options_.timeout), ok() otherwise;
  // slots still busy then hold the commands that never completed.
  template <class Next, class Completed>
  ScsiResult drive_queue(std::span<QueueSlot> slots, Next&& next, Completed&& completed);
  static void on_command_done(iscsi_context* ctx, int status, void* command_data, void* private_data);
  ScsiResult wait_for(Completion& done);
  ScsiResult check_range(std::uint64_t offset, std::uint64_t bytes) const;
  ScsiResult transport_failure(const std::string& what);
  ScsiResult service_once(int timeout_ms);

  iscsi_context* ctx_ = nullptr;
  int lun_ = 0;
  std::string url_;
  std::string initiator_;
  // The session's ISID (its random and qualifier fields, RFC 7143 10.12.5): drawn at the first connect(), kept
  // by reconnect().
  std::uint32_t isid_random_ = 0, isid_qualifier_ = 0;
  bool isid_chosen_ = false;
  ConnectOptions options_;
  std::uint64_t capacity_bytes_ = 0;
  std::uint32_t block_size_ = 0;
  std::uint64_t max_command_bytes_ = 0;
};

}  // namespace blockps
