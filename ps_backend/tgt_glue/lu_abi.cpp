// The extern "C" side of lu_abi.h: exceptions stop here and become a result code plus a message.
#include "ps_backend/tgt_glue/lu_abi.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <optional>
#include <string>

#include "contract/log.h"
#include "contract/scsi_codes.h"
#include "ps_backend/config/lu_options.h"
#include "ps_backend/shard/admission_gate.h"
#include "ps_backend/shard/served_lu.h"
#include "ps_backend/shard/shard_registry.h"

struct blockps_lu {
  blockps::LuOptions options;
  std::uint32_t lu_block_bytes = 512;
  // Set between attach and detach. Each command holds its own reference: tgt closes an LU on a path change
  // (tgtadm --params path=...) without waiting for commands in flight on the I/O threads.
  std::atomic<std::shared_ptr<blockps::ServedLu>> served;
  // grad LUs of shards with rounds (mode=sync, ssp:K): the glue's main loop watches it; Rounds writes it when
  // parked commands may go on. The one owner of this fd: made at attach, closed at detach; the glue asks for it.
  int wake_fd = -1;
};

namespace {

// Writes "context: detail" without allocating, so that it can report running out of memory too.
blockps_result report(blockps_result code, char* message, size_t size, const char* context,
                      const char* detail) noexcept {
  if (message && size) std::snprintf(message, size, "%s: %s", context, detail);
  return code;
}

blockps_result report(blockps_result code, char* message, size_t size, const char* context,
                      const std::string& detail) noexcept {
  return report(code, message, size, context, detail.c_str());
}

// Runs `body` (which returns a blockps_result): an exception from the core becomes INTERNAL_ERROR and its text.
template <class Body>
blockps_result guarded(const char* context, char* message, size_t size, Body&& body) noexcept {
  try {
    return body();
  } catch (const std::exception& e) {
    return report(BLOCKPS_INTERNAL_ERROR, message, size, context, e.what());
  } catch (...) {
    return report(BLOCKPS_INTERNAL_ERROR, message, size, context, "unknown exception");
  }
}

// Undoes attach: no subscription, no wake fd, no shard (the last LU of a shard writes its final checkpoint here).
void release_shard(blockps_lu& lu) {
  if (lu.wake_fd >= 0) {
    if (auto served = lu.served.load()) served->shard().unwatch_parked(&lu);
    ::close(lu.wake_fd);  // after unsubscribe: nothing writes it any more
    lu.wake_fd = -1;
  }
  lu.served.store(nullptr);
}

void signal_wake(int fd) {
  const std::uint64_t one = 1;
  [[maybe_unused]] const auto n = ::write(fd, &one, sizeof one);  // EAGAIN: a wake is pending already
}

blockps_result attach_shard(blockps_lu& lu, const char* path, uint64_t& capacity, char* message, size_t size) {
  blockps::Result<std::shared_ptr<blockps::ServedShard>> attached =
      blockps::ShardRegistry::instance().attach(path, lu.options);
  if (!attached.ok()) return report(BLOCKPS_SHARD_REFUSED, message, size, "attach", attached.message());
  std::shared_ptr<blockps::ServedShard> shard = std::move(attached).value();
  if (lu.options.role != blockps::LuRole::status && shard->model().geometry().bytes % lu.lu_block_bytes != 0)
    return report(BLOCKPS_SHARD_REFUSED, message, size, "attach",
                  "shard size " + std::to_string(shard->model().geometry().bytes) +
                      " is not a multiple of this LU's block size " + std::to_string(lu.lu_block_bytes));
  auto served =
      std::make_shared<blockps::ServedLu>(lu.options.role, std::move(shard), lu.lu_block_bytes, lu.options.admins);
  capacity = served->capacity_bytes();
  lu.served.store(served);
  if (served->shard().holds_commands(lu.options.role)) {
    lu.wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (lu.wake_fd < 0)
      return report(BLOCKPS_SYSTEM_ERROR, message, size, "eventfd for parked commands", std::strerror(errno));
    served->shard().watch_parked(&lu, [fd = lu.wake_fd] { signal_wake(fd); });
  }
  std::string writers;
  if (lu.options.role == blockps::LuRole::status)
    writers = lu.options.admins.empty()
                  ? "; control lines accepted from every initiator (no admins=)"
                  : "; control lines accepted from " + std::to_string(lu.options.admins.size()) + " administrator(s)";
  blockps::log_line(std::string(path) + ": " + std::string(blockps::to_string(lu.options.role)) +
                    " LU attached, capacity " + std::to_string(capacity) + " bytes" + writers);
  return BLOCKPS_OK;
}

// THE mapping between the core's answer (ps_backend/shard/admission_gate.h, AdmissionVerdict) and the record the glue
// keeps with the command (struct blockps_admitted): what execution must know of it, the verdict and the sender. A
// held command is PARKED; where it runs is the glue's (where_to_run).
void keep_verdict(blockps_admitted& to, const blockps::AdmissionVerdict& verdict) {
  to.admitted = 1;
  to.verdict = static_cast<std::uint8_t>(verdict.what);
}

void keep_sender(blockps_admitted& to, const blockps_worker& worker) {
  to.sender_tid = worker.tid;
  to.sender_itn = worker.itn_id;
  std::snprintf(to.sender_iqn, sizeof to.sender_iqn, "%s", worker.iqn ? worker.iqn : "");
}

// The verdict a record holds, or nullopt when it holds none the core gives (a record no admission wrote).
std::optional<blockps::AdmissionVerdict> kept_verdict(const blockps_admitted& from) {
  using blockps::Admission;
  const auto what = static_cast<Admission>(from.verdict);
  const std::size_t name_length = ::strnlen(from.sender_iqn, sizeof from.sender_iqn);
  switch (what) {
    case Admission::run:
    case Admission::park:
    case Admission::not_ready:
    case Admission::failed:
    case Admission::conflict:
    case Admission::denied:
      return blockps::AdmissionVerdict{what, false, {from.sender_tid, from.sender_itn, {from.sender_iqn, name_length}}};
  }
  return std::nullopt;
}

// Where a READ, or a WRITE without FUA, that may run now runs: here (the glue's main thread) when that is cheaper
// than the hand-off to the I/O pool, else in the pool.
blockps_admission where_to_run(const blockps_lu& lu, const blockps::ServedLu& served, bool write, std::uint64_t len) {
  return served.runs_on_caller(write, len, lu.options.main_thread_bytes) ? BLOCKPS_ADMIT_RUN_HERE : BLOCKPS_ADMIT_RUN;
}

// The same for a command as tgt hands it: every other command runs in the pool.
blockps_admission where_to_run(const blockps_lu& lu, const blockps::ServedLu& served, const blockps_command& cmd) {
  namespace scsi = blockps::scsi;
  const bool read = scsi::is_read(cmd.cdb[0]);
  const bool plain_write = scsi::is_write(cmd.cdb[0]) && !scsi::forces_unit_access(cmd.cdb);
  return read || plain_write ? where_to_run(lu, served, plain_write, cmd.transfer_length) : BLOCKPS_ADMIT_RUN;
}

blockps_result admit(blockps_lu& lu, const blockps_command& cmd, const blockps_glue_ops& ops,
                     blockps_admitted& admitted, char* message, size_t size) {
  const std::shared_ptr<blockps::ServedLu> served = lu.served.load();
  if (!served) return BLOCKPS_OK;  // execute() answers NOT_ATTACHED
  // From the options alone: no sender's name for the commands no admission concerns.
  if (!blockps::AdmissionGate::concerns(lu.options.role, cmd.cdb[0])) {
    admitted.how = where_to_run(lu, *served, cmd);
    return BLOCKPS_OK;
  }
  char name[512];
  blockps_worker worker{0, 0, nullptr};
  ops.sender(cmd.handle, &worker, name, sizeof name);
  // The name as the record keeps it (cut at iSCSI's longest), for the admission too: one name for all of a
  // session's commands.
  keep_sender(admitted, worker);
  const blockps::SessionProbe alive = [probe = ops.alive](int tid, std::uint64_t itn) { return probe(tid, itn) != 0; };
  const blockps::AdmissionVerdict verdict =
      served->admission().admit(&lu, cmd.handle, cmd.cdb[0], cmd.offset, cmd.transfer_length,
                                {worker.tid, worker.itn_id, admitted.sender_iqn}, ops.alive ? alive : nullptr);
  keep_verdict(admitted, verdict);
  if (!verdict.held) {
    admitted.how = where_to_run(lu, *served, cmd);
    return BLOCKPS_OK;
  }
  // Only an LU with a wake fd holds commands (a grad LU of a shard with rounds): it hands them back when woken.
  if (lu.wake_fd < 0)
    return report(BLOCKPS_INTERNAL_ERROR, message, size, "admission", "a command was held by an LU that never parks");
  admitted.how = BLOCKPS_ADMIT_PARKED;
  return BLOCKPS_OK;
}

void set_outcome(blockps_outcome& to, const blockps::LuOutcome& from) {
  to.status = from.status;
  to.sense_key = from.sense_key;
  to.asc = from.asc;
  to.has_info = from.has_info;
  to.info = from.info;
}

void hand_back_parked(blockps_lu& lu, const blockps_glue_ops& ops) {
  std::uint64_t count = 0;
  [[maybe_unused]] const auto n = ::read(lu.wake_fd, &count, sizeof count);
  const std::shared_ptr<blockps::ServedLu> served = lu.served.load();
  if (!served) return;
  served->shard().hand_back_parked(
      &lu, [&ops](int tid, std::uint64_t itn) { return ops.alive(tid, itn) != 0; },
      [&ops](const void* handle) { return ops.aborted(handle) != 0; },
      // A parked pull as any READ; a push held by push_lead to the pool (its FUA bit is not kept with it).
      [&](const void* handle, bool is_push, std::uint64_t len) {
        ops.resubmit(handle, is_push ? BLOCKPS_ADMIT_RUN : where_to_run(lu, *served, false, len));
      },
      [&ops](const void* handle, const blockps::LuOutcome& outcome) {
        blockps_outcome o{};
        set_outcome(o, outcome);
        ops.fail(handle, &o);
      });
}

}  // namespace

extern "C" {

void blockps_set_log(void (*sink)(const char* line)) { blockps::set_log_sink(sink); }

blockps_result blockps_lu_configure(const char* bsopts, uint32_t lu_block_bytes, blockps_lu** lu, char* message,
                                    size_t message_size) {
  if (lu) *lu = nullptr;
  if (!lu || lu_block_bytes == 0)
    return report(BLOCKPS_INVALID_ARGUMENT, message, message_size, "configure", "no LU to set, or LU block size 0");
  return guarded("bsopts", message, message_size, [&] {
    blockps::Result<blockps::LuOptions> parsed = blockps::parse_lu_options(bsopts ? bsopts : "", lu_block_bytes);
    if (!parsed.ok()) {
      const bool unknown_key = parsed.status().code() == blockps::StatusCode::unknown_option;
      return report(unknown_key ? BLOCKPS_UNKNOWN_OPTION : BLOCKPS_BAD_OPTION, message, message_size, "bsopts",
                    parsed.message());
    }
    auto created = std::make_unique<blockps_lu>();
    created->options = std::move(parsed).value();
    created->lu_block_bytes = lu_block_bytes;
    *lu = created.release();
    return BLOCKPS_OK;
  });
}

blockps_result blockps_lu_attach(blockps_lu* lu, const char* path, uint64_t* capacity, char* message,
                                 size_t message_size) {
  if (!lu || !path || !capacity)
    return report(BLOCKPS_INVALID_ARGUMENT, message, message_size, "attach", "no LU, path or capacity to set");
  const blockps_result r = guarded("attach", message, message_size,
                                   [&] { return attach_shard(*lu, path, *capacity, message, message_size); });
  // A failed attach leaves nothing behind: above all no subscribed eventfd (tgt will not call bs_close).
  if (r != BLOCKPS_OK)
    guarded("attach", nullptr, 0, [&] {
      release_shard(*lu);
      return BLOCKPS_OK;
    });
  return r;
}

blockps_result blockps_lu_detach(blockps_lu* lu, char* message, size_t message_size) {
  if (!lu) return report(BLOCKPS_INVALID_ARGUMENT, message, message_size, "detach", "no LU");
  return guarded("detach", message, message_size, [&] {
    release_shard(*lu);
    return BLOCKPS_OK;
  });
}

void blockps_lu_free(blockps_lu* lu) { delete lu; }

uint32_t blockps_lu_io_threads(const blockps_lu* lu) { return lu ? lu->options.io_threads : 1; }

const char* blockps_lu_product_id(const blockps_lu* lu) {
  // The table's ids are string literals: data() is NUL-terminated.
  return lu ? blockps::facts(lu->options.role).product_id.data() : "BLOCKPS";
}

int blockps_lu_wake_fd(const blockps_lu* lu) { return lu ? lu->wake_fd : -1; }

blockps_result blockps_lu_admit(blockps_lu* lu, const blockps_command* cmd, const blockps_glue_ops* ops,
                                blockps_admitted* admitted, char* message, size_t message_size) {
  if (admitted) *admitted = blockps_admitted{};  // RUN, not admitted: also what any code but OK leaves
  if (!lu || !cmd || !cmd->cdb || !ops || !ops->sender || !admitted)
    return report(BLOCKPS_INVALID_ARGUMENT, message, message_size, "admission", "no LU, command, CDB, ops or record");
  const blockps_result r = guarded("admission", message, message_size,
                                   [&] { return admit(*lu, *cmd, *ops, *admitted, message, message_size); });
  if (r != BLOCKPS_OK) *admitted = blockps_admitted{};
  return r;
}

blockps_result blockps_lu_on_wake(blockps_lu* lu, const blockps_glue_ops* ops, char* message, size_t message_size) {
  if (!lu || !ops) return report(BLOCKPS_INVALID_ARGUMENT, message, message_size, "parked commands", "no LU or ops");
  if (lu->wake_fd < 0) return BLOCKPS_OK;
  return guarded("parked commands", message, message_size, [&] {
    hand_back_parked(*lu, *ops);
    return BLOCKPS_OK;
  });
}

blockps_result blockps_lu_fail_parked(blockps_lu* lu, const blockps_glue_ops* ops, char* message, size_t message_size) {
  if (!lu || !ops) return report(BLOCKPS_INVALID_ARGUMENT, message, message_size, "parked commands", "no LU or ops");
  if (lu->wake_fd < 0) return BLOCKPS_OK;
  return guarded("parked commands at close", message, message_size, [&] {
    const std::shared_ptr<blockps::ServedLu> served = lu->served.load();
    if (!served) return BLOCKPS_OK;
    served->shard().refuse_parked(lu, "its LU is closing");
    hand_back_parked(*lu, *ops);
    return BLOCKPS_OK;
  });
}

blockps_result blockps_lu_execute(blockps_lu* lu, const blockps_command* cmd, const blockps_admitted* admitted,
                                  blockps_outcome* outcome, char* message, size_t message_size) {
  if (!outcome) return report(BLOCKPS_INVALID_ARGUMENT, message, message_size, "command", "no outcome to set");
  set_outcome(*outcome, blockps::target_failure());
  if (!lu || !cmd || !cmd->cdb)
    return report(BLOCKPS_INVALID_ARGUMENT, message, message_size, "command", "no LU, command or CDB");
  return guarded("command", message, message_size, [&] {
    const std::shared_ptr<blockps::ServedLu> served = lu->served.load();
    if (!served) return report(BLOCKPS_NOT_ATTACHED, message, message_size, "command", "the LU has no shard");
    std::optional<blockps::AdmissionVerdict> verdict;
    if (admitted && admitted->admitted) {
      verdict = kept_verdict(*admitted);
      if (!verdict)
        return report(BLOCKPS_INVALID_ARGUMENT, message, message_size, "command",
                      "its admission record holds no verdict of the core's");
    }
    const blockps::TargetCommand c{cmd->cdb,
                                   cmd->offset,
                                   cmd->transfer_length,
                                   {reinterpret_cast<std::byte*>(cmd->in), cmd->in ? cmd->in_length : 0},
                                   {reinterpret_cast<const std::byte*>(cmd->out), cmd->out ? cmd->out_length : 0},
                                   cmd->handle,
                                   verdict ? &*verdict : nullptr};
    set_outcome(*outcome, served->execute(c));
    return BLOCKPS_OK;
  });
}

}  // extern "C"
