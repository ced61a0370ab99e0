// One iSCSI LU seen through libiscsi (a userspace initiator: no kernel initiator, no /dev/sdX): the session under
// the libiscsi transport (client/transport/libiscsi_transport.cpp), and what tests and benchmarks drive an LU with.
// Blocking READ16 / WRITE16 / SYNCHRONIZE CACHE 10 with the SCSI status and sense as values, a batch of commands
// at a queue depth (run_commands), and commands made while the queue runs (run_stream).
//
// A transport failure (connection lost, command timed out) drops the session: the object is then
// disconnected and every call returns an error until connect() succeeds again. Not thread-safe: one
// IscsiLun per thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "client/transport/command_order.h"
#include "client/transport/lu_command.h"
#include "contract/result.h"
#include "contract/scsi_codes.h"

struct iscsi_context;

namespace blockps {

// libiscsi's codes for a command that got no SCSI status (values from <iscsi/iscsi.h>).
inline constexpr int kScsiTransportCancelled = 0x0f000000;
inline constexpr int kScsiTransportError = 0x0f000001;  // also: not connected, bad arguments
inline constexpr int kScsiTransportTimeout = 0x0f000002;

// What one SCSI command did.
struct ScsiResult {
  int status = scsi::kGood;  // SCSI status byte, or kScsiTransport* when no SCSI status came back
  int sense_key = 0;         // with CHECK CONDITION
  int asc = 0;               // ASC << 8 | ASCQ, with CHECK CONDITION
  std::string message;       // human-readable; empty when status is GOOD

  bool ok() const { return status == scsi::kGood; }
  bool check_condition(int key, int asc_ascq) const {
    return status == scsi::kCheckCondition && sense_key == key && asc == asc_ascq;
  }
  // A UNIT ATTENTION of any cause: the target did not run the command (scsi::kUnitAttention).
  bool unit_attention() const { return status == scsi::kCheckCondition && sense_key == scsi::kUnitAttention; }
  // "GOOD", "CHECK CONDITION ILLEGAL_REQUEST(0x05) LBA_OUT_OF_RANGE(0x2100)", "transport error: ..."
  std::string describe() const;
};

struct ConnectOptions {
  // Login and each blocking command. A lost connection is an error that drops the session: libiscsi's own
  // reconnect, which sends every command in flight again (WRITEs too, so a push could be applied twice), is
  // off; the caller decides whether to reconnect() and what to send again (LibiscsiTransport does).
  std::chrono::seconds timeout = kDefaultIscsiTimeout;
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

// Commands made while the queue runs (run_stream()), for a workload not known up front, as a benchmark's
// time-limited pipeline; a batch known up front goes to run_commands().
class CommandStream {
 public:
  virtual ~CommandStream() = default;
  // Sets `command` to the next command to issue and `tag` to the stream's name for it; false: no more. The
  // command waits for none (`after` is kNoPredecessor); its segments' memory must stay valid until completed()
  // is called with its tag.
  virtual bool next(LuCommand& command, std::uint64_t& tag) = 0;
  // The answer to the command named `tag`.
  virtual void completed(std::uint64_t tag, const ScsiResult& result) = 0;
};

// libiscsi 1.19's iSER transport (lib/iser.c) gives every command one fixed, pre-registered 256 KiB data
// buffer (DATA_BUFFER_SIZE 0x40000). A READ or WRITE above that fails in iser_send_command ("Libiscsi-iSER
// supports messages smaller than 512k", checked in the installed binary: cmp $0x40000 on the transfer length),
// and the process then dies of SIGSEGV (seen in tests/vm with 1 MiB requests and the 1 MiB status page read;
// gone with commands <= 256 KiB). So iser:// sessions carry at most this many bytes per command; callers split
// requests (libblockps caps [client] max_request).
inline constexpr std::uint64_t kLibiscsiIserMaxCommandBytes = std::uint64_t{256} * 1024;

// libiscsi 1.19 can break a session when it answers a target's NOP-In while Data-Out PDUs wait in its send
// queue: the answer (an immediate NOP-Out) takes the CmdSN of the first PDU queued, an old Data-Out's, and the
// next send fails with "iscsi_write_to_socket: outqueue[0]->cmdsn < expcmdsn" (lib/socket.c; fixed upstream in
// 1.20 by commit 7e59b9b, "socket: fix rewrite cmdsn of immediate pdus", whose log shows that message against
// tgt; Debian bookworm ships 1.19). A WRITE needs no Data-Out PDU when all its data rides in the command PDU as
// immediate data: at most the FirstBurstLength libiscsi 1.19 offers (262144) and the target's
// MaxRecvDataSegmentLength (configs/*.conf and the tests' targets set 262144 with ImmediateData=Yes).
inline constexpr std::uint64_t kLibiscsiImmediateWriteBytes = std::uint64_t{256} * 1024;

// A command the target answers with a UNIT ATTENTION was not run (scsi::kUnitAttention): the target reports an
// event instead, once per event, so the command sent again runs. IscsiLun sends it again, as Linux's SCSI midlayer
// does, up to this many times: tgt queues one per LU added to or removed from the target while the session is
// logged in (the restarted shard's LUs 2 and 3, added after a worker's session to LU 1 came back), plus one per
// reset. A target that answers every try so has a fault, and its answer is the command's failure.
inline constexpr int kUnitAttentionResends = 8;

class IscsiLun {
 public:
  IscsiLun() = default;
  ~IscsiLun();  // logs out
  IscsiLun(const IscsiLun&) = delete;
  IscsiLun& operator=(const IscsiLun&) = delete;
  IscsiLun(IscsiLun&& other) noexcept;
  IscsiLun& operator=(IscsiLun&& other) noexcept;

  // Logs in to url ("iscsi://HOST:PORT/IQN/LUN", or "iser://..." when libiscsi was built with iSER) as
  // initiator_iqn, offering ImmediateData=Yes and InitialR2T=No (header digest NONE), and reads the LU's capacity (READ
  // CAPACITY 16). Error when the URL is malformed, the target is unreachable, login is refused or the LUN does not
  // exist.
  Status connect(const std::string& url, const std::string& initiator_iqn, const ConnectOptions& options = {});
  // Logs in again after a transport failure (or disconnect()), to the same URL as the same initiator with the
  // same ISID, so the target reinstates the session (it closes what is left of the old one, RFC 7143 6.3.5)
  // instead of seeing a second I_T nexus of this worker. Error as connect(), or when the LU's capacity or
  // block size changed, or when connect() never succeeded.
  Status reconnect();
  // Logs out (best effort) and frees the session. Safe to call when not connected.
  void disconnect();
  bool connected() const { return ctx_ != nullptr; }
  // The libiscsi session (nullptr when not connected), as std::thread::native_handle gives the thread: for SCSI
  // commands this class does not send (tests/support/scsi_commands.h: TEST UNIT READY, LUN RESET). Use it only
  // between calls of this object, and do not log it out or destroy it: the session stays this object's.
  iscsi_context* native_handle() const { return ctx_; }

  std::uint64_t capacity_bytes() const { return capacity_bytes_; }
  std::uint32_t block_size() const { return block_size_; }
  // The most bytes one READ/WRITE may carry on this session, 0 = no limit of ours. iser:// sessions:
  // kLibiscsiIserMaxCommandBytes (see there); commands above it are refused before they reach libiscsi.
  std::uint64_t max_command_bytes() const { return max_command_bytes_; }
  int lun() const { return lun_; }

  // Every command below is sent again while the target answers UNIT ATTENTION (kUnitAttentionResends).
  // READ16 of out.size() bytes at byte offset `offset` (both multiples of block_size()).
  ScsiResult read(std::uint64_t offset, std::span<std::byte> out);
  // WRITE16 of data at byte offset `offset` (both multiples of block_size()).
  ScsiResult write(std::uint64_t offset, std::span<const std::byte> data);
  // WRITE16 of data at byte offset `offset` of another LU of this session's target, LUN `lun` with blocks of
  // `block_bytes` (offset and data.size() multiples of it): a job's control write to its shard's status LU through
  // this LU's session (client/transport/libiscsi_transport.cpp).
  ScsiResult write_to_lun(int lun, std::uint32_t block_bytes, std::uint64_t offset, std::span<const std::byte> data);
  // SYNCHRONIZE CACHE 10 of the whole LU (what fsync on a block device sends).
  ScsiResult synchronize_cache();
  // Runs every command (READ16 / WRITE16 with the segments as the data buffer), within `limits`, in the order
  // client/transport/command_order.h gives (the order given, where no command waits for another). After the first
  // failure nothing more is issued; what is in flight is waited for. A transport failure drops the session (as
  // in read()). `counters` (optional) is added to; `observer` (optional) is told of every completion.
  CommandBatchResult run_commands(std::span<const LuCommand> commands, QueueLimits limits,
                                  LuQueueCounters* counters = nullptr, const CommandObserver& observer = {});
  // run_commands(), where `grow` appends commands to `commands` while they run (client/transport/lu_transport.h,
  // CommandFeed::more says when it is called); each new command is checked as it joins, and the batch ends when
  // nothing is in flight and `grow` added nothing. CommandBatchResult's indices are into `commands` as it grew.
  using GrowBatch = std::function<void(std::vector<LuCommand>& commands)>;
  CommandBatchResult run_growing_commands(std::vector<LuCommand>& commands, const GrowBatch& grow, QueueLimits limits,
                                          LuQueueCounters* counters = nullptr, const CommandObserver& observer = {});
  // Keeps up to `depth` commands of `stream` in flight (READ16 / WRITE16 as in run_commands), issued in the order
  // next() gives them, until next() gives none. After the first failure nothing more is issued; what is in flight
  // is waited for. Returns that failure: a command refused here (as run_commands() refuses it) or by libiscsi, a
  // command's answer other than GOOD, or the queue ending early (a transport failure, which drops the session);
  // ok() otherwise.
  ScsiResult run_stream(CommandStream& stream, int depth);
  // Between commands, without blocking: processes what the target sent while none was in flight and writes
  // libiscsi's answers to it (a NOP-In's NOP-Out), so that a target's NOP-Ins keep an idle session logged in. An
  // error, and the session dropped (as by any transport failure), when the target closed the connection.
  ScsiResult keep_alive();

 private:
  struct Completion;
  struct QueueSlot;
  // What drive_queue's `next` did with a free slot: queued a command, has none ready until one completes, or
  // will queue no more.
  enum class Issue { queued, not_now, stop };
  // Queues slot's command (READ16/WRITE16 of s.bytes at byte s.offset, data in s.iov); false when libiscsi
  // would not queue it (not_queued() then says why).
  bool queue(QueueSlot& s);
  ScsiResult not_queued(IoDirection direction) const;
  // The queue of run_commands() and run_stream(): keeps up to slots.size() commands in flight. next(slot)
  // queues the next command into a free slot (Issue::stop: none left or it could not queue; issuing stops).
  // completed(slot) takes back one that finished (false: stop issuing, drain what is in flight); a command
  // answered UNIT ATTENTION is queued again instead, counted in `counters` (optional). Returns why the queue ended
  // early (transport failure, no completion for options_.timeout), ok() otherwise; slots still busy then hold
  // the commands that never completed.
  // With `wait_ms`, how long one look at the connection waits for a completion before the slots are offered to
  // `next` again (a growing batch looks at its feed that often).
  template <class Next, class Completed>
  ScsiResult drive_queue(std::span<QueueSlot> slots, Next&& next, Completed&& completed,
                         LuQueueCounters* counters = nullptr, int wait_ms = 100);
  // run_commands() and run_growing_commands(): `growing` (nullptr: a batch of fixed size) is `commands`'s vector.
  CommandBatchResult run_batch(std::span<const LuCommand> commands, std::vector<LuCommand>* growing,
                               const GrowBatch& grow, QueueLimits limits, LuQueueCounters* counters,
                               const CommandObserver& observer);
  // "" when commands[first..] may be sent (an earlier predecessor, a range this session can carry), else the
  // refusal of the first that may not, with its index.
  ScsiResult check_commands(std::span<const LuCommand> commands, std::size_t first, std::size_t& failed) const;
  // One command outside a queue: queue_task(c) queues it with `c` as its completion (nullptr: it could not;
  // `name` says which command in that error), and it is waited for, and sent again while the answer is a UNIT
  // ATTENTION. With c.keep_task, c.task is the last try's, for the caller to free.
  template <class QueueTask>
  ScsiResult run_one(Completion& c, const char* name, QueueTask&& queue_task);
  static void on_command_done(iscsi_context* ctx, int status, void* command_data, void* private_data);
  ScsiResult wait_for(Completion& done);
  // READ CAPACITY 16: sets capacity_bytes_ and block_size_.
  ScsiResult read_capacity();
  ScsiResult check_range(std::uint64_t offset, std::uint64_t bytes) const;
  ScsiResult transport_failure(const std::string& what);
  ScsiResult service_once(int timeout_ms);
  // Before a command is handed to the session: processes what the target sent while none was in flight, so that
  // a connection it closed meanwhile (its tgtd killed and restarted between two batches) drops the session now,
  // with every command still unsent, instead of taking commands that can only be lost (and WRITEs among them
  // given up as unanswered, although no target ever saw them). An error when the session is gone.
  ScsiResult find_closed_connection();

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
