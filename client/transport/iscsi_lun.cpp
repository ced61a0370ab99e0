#include "client/transport/iscsi_lun.h"

#include "client/transport/command_order.h"
#include "client/transport/sigpipe_suppression.h"

// libiscsi's headers are C; they declare everything extern "C" themselves.
#include <iscsi/iscsi.h>
#include <iscsi/scsi-lowlevel.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <vector>

namespace blockps {
namespace {

using Clock = std::chrono::steady_clock;

static_assert(int{scsi::kGood} == int{SCSI_STATUS_GOOD} &&
              int{scsi::kCheckCondition} == int{SCSI_STATUS_CHECK_CONDITION} &&
              kScsiTransportCancelled == SCSI_STATUS_CANCELLED && kScsiTransportError == SCSI_STATUS_ERROR &&
              kScsiTransportTimeout == SCSI_STATUS_TIMEOUT);

std::string hex(int value, int digits) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%0*x", digits, value);
  return buf;
}

const char* status_name(int status) {
  switch (status) {
    case SCSI_STATUS_GOOD:
      return "GOOD";
    case SCSI_STATUS_CHECK_CONDITION:
      return "CHECK CONDITION";
    case SCSI_STATUS_CONDITION_MET:
      return "CONDITION MET";
    case SCSI_STATUS_BUSY:
      return "BUSY";
    case SCSI_STATUS_RESERVATION_CONFLICT:
      return "RESERVATION CONFLICT";
    case SCSI_STATUS_TASK_SET_FULL:
      return "TASK SET FULL";
    case SCSI_STATUS_ACA_ACTIVE:
      return "ACA ACTIVE";
    case SCSI_STATUS_TASK_ABORTED:
      return "TASK ABORTED";
    case SCSI_STATUS_CANCELLED:
      return "transport: cancelled";
    case SCSI_STATUS_ERROR:
      return "transport error";
    case SCSI_STATUS_TIMEOUT:
      return "transport: timeout";
    default:
      return "unknown status";
  }
}

// libiscsi's error texts sometimes end in a newline.
std::string without_trailing_space(std::string text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  return text;
}

ScsiResult usage_error(std::string message) { return ScsiResult{kScsiTransportError, 0, 0, std::move(message)}; }

// libiscsi's error text, with the cause where we know it better than its message says.
std::string libiscsi_error(const char* err) {
  std::string text = err != nullptr ? err : "";
  if (text.find("cmdsn < expcmdsn") != std::string::npos) {
    text +=
        " [libiscsi 1.19 answered the target's NOP-In with a stale CmdSN while WRITE data (Data-Out PDUs) was "
        "queued; WRITEs of at most " +
        std::to_string(kLibiscsiImmediateWriteBytes) +
        " bytes need none on targets with ImmediateData=Yes and MaxRecvDataSegmentLength >= 262144 "
        "(configs/*.conf; docs/OPTIONS.md, \"WRITEs over libiscsi and the target's NOP-In\")]";
  }
  return text;
}

}  // namespace

// One command in flight. The callback fills it; the task is ours to free (libiscsi passes NULL instead of
// the task when it cancels commands, so we keep our own pointer).
struct IscsiLun::Completion {
  scsi_task* task = nullptr;
  bool keep_task = false;  // the caller still needs the task (its data-in) after completion
  bool done = false;
  ScsiResult result;
};

// A place in the queue of run_commands() and run_stream(): one command at a time.
struct IscsiLun::QueueSlot {
  Completion c;
  bool busy = false;  // a command of this slot is queued and not taken back yet
  IoDirection direction = IoDirection::read;
  std::uint64_t offset = 0;  // bytes into the LU
  std::uint32_t bytes = 0;
  std::vector<scsi_iovec> iov;  // its data; must live until the command completes
  std::uint64_t tag = 0;        // the caller's name for the command (run_commands: its index)
  int resends = 0;              // times it was sent again after a UNIT ATTENTION

  // Holds `cmd` (not yet queued) under `tag`.
  void hold(const LuCommand& cmd, std::uint64_t command_tag) {
    direction = cmd.direction;
    offset = cmd.offset;
    bytes = static_cast<std::uint32_t>(cmd.bytes());
    iov.clear();
    for (const IoSegment& seg : cmd.segments) iov.push_back(scsi_iovec{seg.data, seg.bytes});
    tag = command_tag;
    resends = 0;
  }
};

std::string ScsiResult::describe() const {
  if (status == scsi::kCheckCondition) {
    const char* key = scsi_sense_key_str(sense_key);
    const char* a = scsi_sense_ascq_str(asc);
    if (a == nullptr && asc == scsi::kAscReportedLunsDataHasChanged)
      a = "REPORTED_LUNS_DATA_HAS_CHANGED";  // 1.19 lacks it
    return std::string("CHECK CONDITION ") + (key != nullptr ? key : "?") + "(" + hex(sense_key, 2) + ") " +
           (a != nullptr ? a : "?") + "(" + hex(asc, 4) + ")";
  }
  std::string s = std::string(status_name(status));
  if (status != scsi::kGood && status < kScsiTransportCancelled) s += " (" + hex(status, 2) + ")";
  if (!message.empty() && status != scsi::kGood) s += ": " + message;
  return s;
}

IscsiLun::~IscsiLun() { disconnect(); }

IscsiLun::IscsiLun(IscsiLun&& other) noexcept
    : ctx_(other.ctx_),
      lun_(other.lun_),
      url_(std::move(other.url_)),
      initiator_(std::move(other.initiator_)),
      isid_random_(other.isid_random_),
      isid_qualifier_(other.isid_qualifier_),
      isid_chosen_(other.isid_chosen_),
      options_(other.options_),
      capacity_bytes_(other.capacity_bytes_),
      block_size_(other.block_size_),
      max_command_bytes_(other.max_command_bytes_) {
  other.ctx_ = nullptr;
}

IscsiLun& IscsiLun::operator=(IscsiLun&& other) noexcept {
  if (this != &other) {
    disconnect();
    ctx_ = other.ctx_;
    lun_ = other.lun_;
    url_ = std::move(other.url_);
    initiator_ = std::move(other.initiator_);
    isid_random_ = other.isid_random_;
    isid_qualifier_ = other.isid_qualifier_;
    isid_chosen_ = other.isid_chosen_;
    options_ = other.options_;
    capacity_bytes_ = other.capacity_bytes_;
    block_size_ = other.block_size_;
    max_command_bytes_ = other.max_command_bytes_;
    other.ctx_ = nullptr;
  }
  return *this;
}

Status IscsiLun::connect(const std::string& url, const std::string& initiator_iqn, const ConnectOptions& options) {
  const SigpipeSuppression no_sigpipe;  // login, READ CAPACITY, and a logout on failure write to the socket
  disconnect();
  options_ = options;
  if (initiator_iqn.empty()) return Status::Error("empty initiator IQN");
  iscsi_context* ctx = iscsi_create_context(initiator_iqn.c_str());
  if (ctx == nullptr) return Status::Error("iscsi_create_context failed for initiator " + initiator_iqn);
  iscsi_url* parsed = iscsi_parse_full_url(ctx, url.c_str());
  if (parsed == nullptr) {
    std::string msg = "bad iSCSI URL '" + url + "': " + iscsi_get_error(ctx);
    iscsi_destroy_context(ctx);
    return Status::Error(msg);
  }
  const std::string portal = parsed->portal;
  const std::string target = parsed->target;
  const int lun = parsed->lun;
  const bool iser = parsed->transport == ISER_TRANSPORT;
  iscsi_set_targetname(ctx, parsed->target);
  iscsi_set_session_type(ctx, ISCSI_SESSION_NORMAL);
  if (!isid_chosen_ || initiator_iqn != initiator_ || url != url_) {
    std::random_device random;
    isid_random_ = random() & 0xffffffu;  // 24 bits (the field's B and C)
    isid_qualifier_ = random() & 0xffffu;
    isid_chosen_ = true;
  }
  iscsi_set_isid_random(ctx, isid_random_, isid_qualifier_);
  url_ = url;
  initiator_ = initiator_iqn;
  if (parsed->user[0] != '\0') iscsi_set_initiator_username_pwd(ctx, parsed->user, parsed->passwd);
  iscsi_destroy_url(parsed);
  if (iser && iscsi_init_transport(ctx, ISER_TRANSPORT) != 0) {
    std::string msg = "iSER URL '" + url + "' refused: this libiscsi cannot use iSER here (" + iscsi_get_error(ctx) +
                      "); use an iscsi:// URL (TCP) or a kernel initiator's device";
    iscsi_destroy_context(ctx);
    return Status::Error(msg);
  }
  iscsi_set_header_digest(ctx, ISCSI_HEADER_DIGEST_NONE);
  // The parameters that make writes fast (docs/ARCHITECTURE.md, "Facts about the machines"). libiscsi 1.19 has setters
  // only for these two; it always offers MaxRecvDataSegmentLength, FirstBurstLength and MaxBurstLength of 262144
  // (lib/init.c), so those negotiate to min(262144, target's value) whatever the target allows.
  iscsi_set_immediate_data(ctx, ISCSI_IMMEDIATE_DATA_YES);
  iscsi_set_initial_r2t(ctx, ISCSI_INITIAL_R2T_NO);
  iscsi_set_timeout(ctx, static_cast<int>(options.timeout.count()));
  iscsi_set_noautoreconnect(ctx, 1);
  if (iscsi_full_connect_sync(ctx, portal.c_str(), lun) != 0) {
    std::string msg = std::string(iser ? "iSER" : "iSCSI") + " login to " + portal + " target " + target + " LUN " +
                      std::to_string(lun) + " as " + initiator_iqn +
                      " failed: " + without_trailing_space(iscsi_get_error(ctx));
    if (iser) msg += " (iSER needs a working RDMA device on this host; iscsi:// URLs use TCP)";
    // libiscsi's words for a connection refused or closed during login.
    if (msg.find("Can not reconnect right now") != std::string::npos)
      msg += " (the portal refused or closed the connection: is the shard's tgtd running and the target there?)";
    iscsi_destroy_context(ctx);
    return Status::Error(msg);
  }
  ctx_ = ctx;
  lun_ = lun;
  max_command_bytes_ = iser ? kLibiscsiIserMaxCommandBytes : 0;
  if (ScsiResult r = read_capacity(); !r.ok()) {
    disconnect();
    return Status::Error("READ CAPACITY 16 on " + url + " failed: " + r.describe());
  }
  return Status::Ok();
}

Status IscsiLun::reconnect() {
  if (!isid_chosen_) return Status::Error("reconnect() before a first connect()");
  const std::uint64_t capacity = capacity_bytes_;
  const std::uint32_t block = block_size_;
  const std::string url = url_, initiator = initiator_;
  // A session dropped by a transport failure keeps the last size it read; one the caller disconnect()ed has none.
  const bool known_size = capacity != 0;
  if (Status s = connect(url, initiator, options_); !s.ok()) return s;
  if (known_size && (capacity_bytes_ != capacity || block_size_ != block)) {
    const std::string now = std::to_string(capacity_bytes_) + " bytes in blocks of " + std::to_string(block_size_);
    disconnect();
    return Status::Error("after reconnecting, " + url + " has " + now + "; before, it had " + std::to_string(capacity) +
                         " bytes in blocks of " + std::to_string(block) + ": not the LU this session was using");
  }
  return Status::Ok();
}

void IscsiLun::disconnect() {
  if (ctx_ == nullptr) return;
  const SigpipeSuppression no_sigpipe;  // the logout writes to a socket the target may have closed
  iscsi_context* ctx = ctx_;
  ctx_ = nullptr;
  if (iscsi_is_logged_in(ctx) != 0) iscsi_logout_sync(ctx);  // best effort; tgt drops the nexus either way
  iscsi_destroy_context(ctx);
  capacity_bytes_ = 0;
  block_size_ = 0;
  max_command_bytes_ = 0;
}

void IscsiLun::on_command_done(iscsi_context* ctx, int status, void* command_data, void* private_data) {
  auto* c = static_cast<Completion*>(private_data);
  auto* task = static_cast<scsi_task*>(command_data);
  if (task == nullptr) task = c->task;
  ScsiResult r;
  r.status = status;
  if (status == SCSI_STATUS_CHECK_CONDITION && task != nullptr) {
    r.sense_key = task->sense.key;
    r.asc = task->sense.ascq;  // libiscsi keeps ASC << 8 | ASCQ here
  }
  // libiscsi's error text says why for a transport error or timeout; a command it cancels (the context is being
  // destroyed) gets none, and its error text then is whatever an earlier call left there.
  if (status == SCSI_STATUS_ERROR || status == SCSI_STATUS_TIMEOUT) r.message = libiscsi_error(iscsi_get_error(ctx));
  c->result = std::move(r);
  c->done = true;
  if (!c->keep_task && c->task != nullptr) {
    scsi_free_scsi_task(c->task);
    c->task = nullptr;
  }
}

ScsiResult IscsiLun::transport_failure(const std::string& what) {
  std::string msg = what;
  if (ctx_ != nullptr) {
    const char* err = iscsi_get_error(ctx_);
    if (err != nullptr && *err != '\0') msg += ": " + libiscsi_error(err);
    // Destroying the context cancels whatever is in flight (callbacks may run now) and frees the session.
    iscsi_context* ctx = ctx_;
    ctx_ = nullptr;
    iscsi_destroy_context(ctx);
  }
  return ScsiResult{kScsiTransportError, 0, 0, msg + " (session dropped; connect() again)"};
}

ScsiResult IscsiLun::service_once(int timeout_ms) {
  const int events = iscsi_which_events(ctx_);
  if (events == 0) {
    // libiscsi asks for a pause (e.g. between reconnect attempts); see iscsi.h.
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(timeout_ms, 100)));
    return {};
  }
  pollfd p{iscsi_get_fd(ctx_), static_cast<short>(events), 0};
  const int n = ::poll(&p, 1, timeout_ms);
  if (n < 0) {
    if (errno == EINTR) return {};
    return transport_failure(std::string("poll: ") + errno_message(errno));
  }
  if (n > 0 && iscsi_service(ctx_, p.revents) < 0) return transport_failure("connection to " + url_ + " failed");
  return {};
}

ScsiResult IscsiLun::find_closed_connection() {
  if (ctx_ == nullptr) return usage_error("not connected");
  // libiscsi 1.19 with its own reconnect off reports the end of the stream only on its second look: the first
  // iscsi_service() that reads it marks the session for a deferred reconnect and returns 0 (lib/connect.c,
  // iscsi_reconnect), the next fails on the same end, which stays readable. So the connection is serviced while
  // it is readable; a live session has nothing more to read after one pass (a NOP-In at most).
  for (int pass = 0; pass < 4; ++pass) {
    pollfd p{iscsi_get_fd(ctx_), POLLIN, 0};  // POLLIN also reports the end; POLLHUP and POLLERR always come
    const int n = ::poll(&p, 1, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return transport_failure(std::string("poll: ") + errno_message(errno));
    if (n == 0) break;
    if (iscsi_service(ctx_, p.revents) < 0)
      return transport_failure("connection to " + url_ + " closed by the target while no command was in flight");
  }
  return {};
}

ScsiResult IscsiLun::keep_alive() {
  const SigpipeSuppression no_sigpipe;  // the answer to a NOP-In is a write
  if (ScsiResult r = find_closed_connection(); !r.ok()) return r;
  // find_closed_connection() only reads: libiscsi queues its answer to a NOP-In (iscsi_send_target_nop_out) and
  // writes it only when iscsi_service() is told the socket is writable. Without this the answer would wait for the
  // next command, and an idle session would still be dropped. A socket that is not writable now (its buffer full)
  // sends it at the next call.
  for (int pass = 0; pass < 4 && ctx_ != nullptr && (iscsi_which_events(ctx_) & POLLOUT) != 0; ++pass) {
    if (ScsiResult r = service_once(0); !r.ok()) return r;
  }
  return {};
}

ScsiResult IscsiLun::wait_for(Completion& c) {
  const auto deadline = Clock::now() + options_.timeout;
  ScsiResult failure;
  while (!c.done) {
    if (ctx_ == nullptr) {
      failure = usage_error("not connected");
      break;
    }
    if (Clock::now() >= deadline) {
      failure = transport_failure("command timed out after " + std::to_string(options_.timeout.count()) + " s");
      break;
    }
    if (ScsiResult r = service_once(100); !r.ok()) {
      failure = std::move(r);
      break;
    }
  }
  if (!c.done) {
    // The session is gone and libiscsi will never call back for this command: the task is ours to free.
    if (c.task != nullptr) {
      scsi_free_scsi_task(c.task);
      c.task = nullptr;
    }
    return failure;
  }
  if (c.result.status >= kScsiTransportCancelled && ctx_ != nullptr) {
    // libiscsi completed the command without a SCSI status: the connection is gone (we asked it not to
    // reconnect). Drop the session so that connected() tells the truth.
    ScsiResult dropped = transport_failure(c.result.describe());
    dropped.status = c.result.status;
    return dropped;
  }
  return c.result;
}

ScsiResult IscsiLun::check_range(std::uint64_t offset, std::uint64_t bytes) const {
  if (ctx_ == nullptr) return usage_error("not connected");
  if (block_size_ == 0) return usage_error("block size unknown (READ CAPACITY failed)");
  if (offset % block_size_ != 0 || bytes % block_size_ != 0) {
    return usage_error("offset " + std::to_string(offset) + " and length " + std::to_string(bytes) +
                       " must be multiples of the block size " + std::to_string(block_size_));
  }
  if (bytes == 0 || bytes > 0xffffffffull) {
    return usage_error("length " + std::to_string(bytes) + " out of range 1..4294967295");
  }
  if (max_command_bytes_ != 0 && bytes > max_command_bytes_) {
    return usage_error("length " + std::to_string(bytes) + " is more than the " + std::to_string(max_command_bytes_) +
                       " bytes libiscsi 1.19's iSER transport carries per command (fixed 256 KiB RDMA buffers; "
                       "a larger command crashes libiscsi): split it, or use iscsi:// or the kernel initiator");
  }
  // No check against the capacity: tests send out-of-range commands on purpose, the target answers them.
  return {};
}

template <class QueueTask>
ScsiResult IscsiLun::run_one(Completion& c, const char* name, QueueTask&& queue_task) {
  const SigpipeSuppression no_sigpipe;  // iscsi_service() writes the command
  if (ScsiResult r = find_closed_connection(); !r.ok()) return r;
  for (int resends = 0;; ++resends) {
    if (ctx_ == nullptr) return usage_error("not connected");
    c.done = false;
    c.result = {};
    c.task = queue_task(c);
    if (c.task == nullptr) return usage_error(std::string(name) + " not queued: " + iscsi_get_error(ctx_));
    ScsiResult r = wait_for(c);
    if (!r.unit_attention() || resends == kUnitAttentionResends) return r;
    if (c.task != nullptr) {  // kept for the caller, who wants the next try's
      scsi_free_scsi_task(c.task);
      c.task = nullptr;
    }
  }
}

ScsiResult IscsiLun::read_capacity() {
  Completion c;
  c.keep_task = true;
  ScsiResult r = run_one(c, "READ CAPACITY 16", [&](Completion& done) {
    return iscsi_readcapacity16_task(ctx_, lun_, &IscsiLun::on_command_done, &done);
  });
  if (r.ok() && c.task != nullptr) {
    auto* rc16 = static_cast<scsi_readcapacity16*>(scsi_datain_unmarshall(c.task));
    if (rc16 == nullptr) {
      r = usage_error("READ CAPACITY 16 returned data libiscsi could not parse");
    } else {
      block_size_ = rc16->block_length;
      capacity_bytes_ = (rc16->returned_lba + 1) * static_cast<std::uint64_t>(rc16->block_length);
    }
  }
  if (c.task != nullptr) scsi_free_scsi_task(c.task);
  return r;
}

ScsiResult IscsiLun::read(std::uint64_t offset, std::span<std::byte> out) {
  if (ScsiResult r = check_range(offset, out.size()); !r.ok()) return r;
  Completion c;
  scsi_iovec iov{out.data(), out.size()};
  return run_one(c, "READ 16", [&](Completion& done) {
    return iscsi_read16_iov_task(ctx_, lun_, offset / block_size_, static_cast<std::uint32_t>(out.size()),
                                 static_cast<int>(block_size_), 0, 0, 0, 0, 0, &IscsiLun::on_command_done, &done, &iov,
                                 1);
  });
}

ScsiResult IscsiLun::write(std::uint64_t offset, std::span<const std::byte> data) {
  if (ScsiResult r = check_range(offset, data.size()); !r.ok()) return r;
  Completion c;
  // libiscsi takes a non-const pointer but only reads from it for a WRITE.
  auto* bytes = reinterpret_cast<unsigned char*>(const_cast<std::byte*>(data.data()));
  return run_one(c, "WRITE 16", [&](Completion& done) {
    return iscsi_write16_task(ctx_, lun_, offset / block_size_, bytes, static_cast<std::uint32_t>(data.size()),
                              static_cast<int>(block_size_), 0, 0, 0, 0, 0, &IscsiLun::on_command_done, &done);
  });
}

ScsiResult IscsiLun::write_to_lun(int lun, std::uint32_t block_bytes, std::uint64_t offset,
                                  std::span<const std::byte> data) {
  if (ctx_ == nullptr) return usage_error("not connected");
  if (block_bytes == 0 || offset % block_bytes != 0 || data.empty() || data.size() % block_bytes != 0 ||
      data.size() > 0xffffffffull)
    return usage_error("a write of " + std::to_string(data.size()) + " bytes at byte offset " + std::to_string(offset) +
                       " to LUN " + std::to_string(lun) + " is not whole blocks of " + std::to_string(block_bytes) +
                       " bytes");
  Completion c;
  auto* bytes = reinterpret_cast<unsigned char*>(const_cast<std::byte*>(data.data()));  // only read (a WRITE)
  return run_one(c, "WRITE 16", [&](Completion& done) {
    return iscsi_write16_task(ctx_, lun, offset / block_bytes, bytes, static_cast<std::uint32_t>(data.size()),
                              static_cast<int>(block_bytes), 0, 0, 0, 0, 0, &IscsiLun::on_command_done, &done);
  });
}

ScsiResult IscsiLun::synchronize_cache() {
  Completion c;
  return run_one(c, "SYNCHRONIZE CACHE 10", [&](Completion& done) {
    return iscsi_synchronizecache10_task(ctx_, lun_, 0, 0, 0, 0, &IscsiLun::on_command_done, &done);
  });
}

bool IscsiLun::queue(QueueSlot& s) {
  s.c.done = false;
  s.c.result = {};
  const std::uint64_t lba = s.offset / block_size_;
  const int niov = static_cast<int>(s.iov.size());
  if (s.direction == IoDirection::write) {
    s.c.task = iscsi_write16_iov_task(ctx_, lun_, lba, nullptr, s.bytes, static_cast<int>(block_size_), 0, 0, 0, 0, 0,
                                      &IscsiLun::on_command_done, &s.c, s.iov.data(), niov);
  } else {
    s.c.task = iscsi_read16_iov_task(ctx_, lun_, lba, s.bytes, static_cast<int>(block_size_), 0, 0, 0, 0, 0,
                                     &IscsiLun::on_command_done, &s.c, s.iov.data(), niov);
  }
  s.busy = s.c.task != nullptr;
  return s.busy;
}

ScsiResult IscsiLun::not_queued(IoDirection direction) const {
  return usage_error(std::string(direction == IoDirection::write ? "WRITE 16" : "READ 16") +
                     " not queued: " + iscsi_get_error(ctx_));
}

template <class Next, class Completed>
ScsiResult IscsiLun::drive_queue(std::span<QueueSlot> slots, Next&& next, Completed&& completed,
                                 LuQueueCounters* counters, int wait_ms) {
  const SigpipeSuppression no_sigpipe;  // iscsi_service() writes the commands
  // Found here, a closed connection fails the queue before anything is issued: every command stays not issued.
  if (ScsiResult r = find_closed_connection(); !r.ok()) return r;
  ScsiResult failure;
  bool issuing = true;
  int in_flight = 0;
  auto last_progress = Clock::now();
  for (;;) {
    for (QueueSlot& s : slots) {
      if (!issuing || ctx_ == nullptr) break;
      if (s.busy) continue;
      const Issue issued = next(s);
      if (issued == Issue::not_now) break;
      if (issued == Issue::stop) {
        issuing = false;
        break;
      }
      ++in_flight;
    }
    if (in_flight == 0) break;
    if (ctx_ == nullptr) {
      failure = usage_error("not connected");
      break;
    }
    if (ScsiResult r = service_once(wait_ms); !r.ok()) {
      failure = std::move(r);
      break;
    }
    bool progressed = false, connection_lost = false;
    for (QueueSlot& s : slots) {
      if (!s.busy || !s.c.done) continue;
      progressed = true;
      if (s.c.result.unit_attention() && s.resends < kUnitAttentionResends && ctx_ != nullptr) {
        ++s.resends;
        if (counters != nullptr) ++counters->unit_attentions_resent;
        ScsiResult answer = s.c.result;
        if (queue(s)) continue;          // in flight again, in the same place of the order
        s.c.result = std::move(answer);  // not queued: the UNIT ATTENTION is its answer
        s.c.done = true;
      }
      s.busy = false;
      --in_flight;
      connection_lost = connection_lost || s.c.result.status >= kScsiTransportCancelled;
      if (!completed(s)) issuing = false;  // drain what is in flight, then report
    }
    if (connection_lost && ctx_ != nullptr) {
      (void)transport_failure("connection lost");  // see wait_for(): the session is unusable
      break;
    }
    const auto now = Clock::now();
    if (progressed) {
      last_progress = now;
    } else if (now - last_progress > options_.timeout) {
      failure = transport_failure("no command completed for " + std::to_string(options_.timeout.count()) + " s");
      break;
    }
  }
  // After a transport failure the context is gone: whatever libiscsi did not call back for is ours to free.
  // Those slots stay busy, so that the caller can tell which commands never completed.
  for (QueueSlot& s : slots) {
    if (s.busy && !s.c.done && s.c.task != nullptr) {
      scsi_free_scsi_task(s.c.task);
      s.c.task = nullptr;
    }
  }
  return failure;
}

ScsiResult IscsiLun::check_commands(std::span<const LuCommand> commands, std::size_t first,
                                    std::size_t& failed) const {
  if (std::string why = CommandOrder::check(commands, first); !why.empty()) {
    failed = first;
    return usage_error(why);
  }
  for (std::size_t i = first; i < commands.size(); ++i) {
    if (ScsiResult r = check_range(commands[i].offset, commands[i].bytes()); !r.ok()) {
      failed = i;
      return r;
    }
  }
  return {};
}

CommandBatchResult IscsiLun::run_commands(std::span<const LuCommand> commands, QueueLimits limits,
                                          LuQueueCounters* counters, const CommandObserver& observer) {
  return run_batch(commands, nullptr, {}, limits, counters, observer);
}

CommandBatchResult IscsiLun::run_growing_commands(std::vector<LuCommand>& commands, const GrowBatch& grow,
                                                  QueueLimits limits, LuQueueCounters* counters,
                                                  const CommandObserver& observer) {
  return run_batch(commands, &commands, grow, limits, counters, observer);
}

CommandBatchResult IscsiLun::run_batch(std::span<const LuCommand> commands, std::vector<LuCommand>* growing,
                                       const GrowBatch& grow, QueueLimits limits, LuQueueCounters* counters,
                                       const CommandObserver& observer) {
  CommandBatchResult result;
  if (limits.depth < 1) {
    result.error = usage_error("queue depth " + std::to_string(limits.depth) + " must be >= 1");
    return result;
  }
  if (ScsiResult r = check_commands(commands, 0, result.failed_command); !r.ok()) {
    result.error = std::move(r);
    return result;
  }
  const bool grows = growing != nullptr && grow;
  // A batch that grows may become as deep as the queue allows; a fixed one needs no more slots than commands.
  const std::size_t most = grows ? static_cast<std::size_t>(limits.depth) : std::max<std::size_t>(commands.size(), 1);
  std::vector<QueueSlot> slots(static_cast<std::size_t>(std::min<std::size_t>(limits.depth, most)));
  limits.depth = static_cast<int>(slots.size());
  CommandOrder order(commands, limits, counters, observer);
  if (grows) order.will_grow();
  result.outcomes.assign(commands.size(), CommandOutcome::not_issued);
  const auto fail = [&](ScsiResult r, std::size_t command) {
    if (result.error.ok()) {
      result.error = std::move(r);
      result.failed_command = command;
    }
  };
  // Asks the feed for more once every WRITE is issued (CommandOrder::wants_more); false when it has none (or what it
  // gave is refused: the batch's failure).
  bool refused = false;
  const auto grow_batch = [&] {
    if (!grows || refused) return false;
    const std::size_t known = growing->size();
    grow(*growing);
    if (growing->size() == known) return false;
    commands = *growing;  // the vector may have moved: the order and the failures look at it from now on
    order.grew(commands);
    result.outcomes.resize(commands.size(), CommandOutcome::not_issued);
    std::size_t bad = 0;
    if (ScsiResult r = check_commands(commands, known, bad); !r.ok()) {
      fail(std::move(r), bad);  // nothing more is issued; what is in flight is waited for
      refused = true;
      return false;
    }
    return true;
  };
  const auto issue = [&](QueueSlot& s) {
    if (refused || (!grows && order.all_issued())) return Issue::stop;
    std::optional<std::size_t> index = order.next();
    if (!index && grows && order.wants_more() && grow_batch()) index = order.next();
    if (!index) return refused ? Issue::stop : Issue::not_now;
    const LuCommand& cmd = commands[*index];
    s.hold(cmd, *index);
    if (!queue(s)) {
      fail(not_queued(cmd.direction), *index);
      return Issue::stop;
    }
    result.outcomes[*index] = CommandOutcome::unanswered;  // until an answer comes
    return Issue::queued;
  };
  const auto completed = [&](QueueSlot& s) {
    const int status = s.c.result.status;
    order.completed(s.tag, status == scsi::kGood);
    if (status == scsi::kGood) {
      result.outcomes[s.tag] = CommandOutcome::succeeded;
      return true;
    }
    // A transport status (cancelled, error, timeout) is libiscsi's, not the target's: no answer came.
    if (status < kScsiTransportCancelled) result.outcomes[s.tag] = CommandOutcome::refused;
    fail(s.c.result, s.tag);
    return false;
  };
  const int wait_ms = grows ? static_cast<int>(kFeedPollInterval.count()) : 100;
  if (ScsiResult r = drive_queue(slots, issue, completed, counters, wait_ms); !r.ok()) {
    // The queue ended early: the first command that never completed is the one that failed.
    const auto first_unfinished = std::find_if(result.outcomes.begin(), result.outcomes.end(), [](CommandOutcome o) {
      return o == CommandOutcome::unanswered || o == CommandOutcome::not_issued;
    });
    fail(std::move(r), static_cast<std::size_t>(first_unfinished - result.outcomes.begin()));
  }
  result.session_lost = ctx_ == nullptr;
  return result;
}

ScsiResult IscsiLun::run_stream(CommandStream& stream, int depth) {
  if (depth < 1) return usage_error("queue depth " + std::to_string(depth) + " must be >= 1");
  std::vector<QueueSlot> slots(static_cast<std::size_t>(depth));
  ScsiResult failure;
  LuCommand cmd;
  const auto issue = [&](QueueSlot& s) {
    std::uint64_t tag = 0;
    if (!stream.next(cmd, tag)) return Issue::stop;
    ScsiResult refused = cmd.after == kNoPredecessor
                             ? check_range(cmd.offset, cmd.bytes())
                             : usage_error("a stream's command waits for command " + std::to_string(cmd.after) +
                                           "; only a batch (run_commands) orders its commands");
    if (refused.ok()) {
      s.hold(cmd, tag);
      if (queue(s)) return Issue::queued;
      refused = not_queued(cmd.direction);
    }
    failure = std::move(refused);
    return Issue::stop;
  };
  const auto completed = [&](QueueSlot& s) {
    stream.completed(s.tag, s.c.result);
    if (s.c.result.ok()) return true;
    if (failure.ok()) failure = s.c.result;
    return false;
  };
  if (ScsiResult r = drive_queue(slots, issue, completed); !r.ok() && failure.ok()) failure = std::move(r);
  return failure;
}

}  // namespace blockps
