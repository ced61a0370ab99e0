// The extern "C" side of lu_abi.h: exceptions stop here.
#include "ps_backend/lu_abi.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "ps_backend/log.h"
#include "ps_backend/lu_options.h"
#include "ps_backend/served_lu.h"

struct blockps_lu {
  blockps::LuOptions options;
  std::uint32_t lu_block_bytes = 512;
  // Set between attach and detach. Each command holds its own reference: tgt closes an LU on a path change
  // (tgtadm --params path=...) without waiting for commands in flight on the I/O threads.
  std::atomic<std::shared_ptr<blockps::ServedLu>> served;
  // mode=sync grad LUs: the glue's main loop watches it; Rounds writes it when parked commands may go on.
  int wake_fd = -1;
};

namespace {
void set_error(char* error, size_t size, const std::string& text) {
  if (error && size) std::snprintf(error, size, "%s", text.c_str());
}
}  // namespace

extern "C" {

void blockps_set_log(void (*sink)(const char* line)) { blockps::set_log_sink(sink); }

blockps_lu* blockps_lu_configure(const char* bsopts, uint32_t lu_block_bytes, char* error, size_t error_size) {
  try {
    if (lu_block_bytes == 0) {
      set_error(error, error_size, "LU block size is 0");
      return nullptr;
    }
    auto parsed = blockps::parse_lu_options(bsopts ? bsopts : "", lu_block_bytes);
    if (auto* e = std::get_if<blockps::OptionError>(&parsed)) {
      set_error(error, error_size, "bsopts: " + e->message);
      return nullptr;
    }
    auto lu = std::make_unique<blockps_lu>();
    lu->options = std::get<blockps::LuOptions>(std::move(parsed));
    lu->lu_block_bytes = lu_block_bytes;
    return lu.release();
  } catch (const std::exception& e) {
    set_error(error, error_size, std::string("bsopts: ") + e.what());
    return nullptr;
  }
}

int blockps_lu_attach(blockps_lu* lu, const char* path, uint64_t* capacity, char* error, size_t error_size) {
  try {
    if (!lu || !path) {
      set_error(error, error_size, "no LU or no backing-store path");
      return -1;
    }
    auto attached = blockps::ShardRegistry::instance().attach(path, lu->options);
    if (auto* e = std::get_if<std::string>(&attached)) {
      set_error(error, error_size, *e);
      return -1;
    }
    auto shard = std::get<std::shared_ptr<blockps::ServedShard>>(std::move(attached));
    if (lu->options.role != blockps::LuRole::status && shard->model().geometry().bytes % lu->lu_block_bytes != 0) {
      set_error(error, error_size,
                "shard size " + std::to_string(shard->model().geometry().bytes) +
                    " is not a multiple of this LU's block size " + std::to_string(lu->lu_block_bytes));
      return -1;
    }
    auto served =
        std::make_shared<blockps::ServedLu>(lu->options.role, std::move(shard), lu->lu_block_bytes, lu->options.admins);
    // After everything that may throw: a subscribed eventfd must never outlive a failed attach.
    if (lu->options.role == blockps::LuRole::grad && served->shard().rounds()) {
      lu->wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
      if (lu->wake_fd < 0) {
        set_error(error, error_size, std::string("eventfd for parked commands: ") + std::strerror(errno));
        return -1;
      }
      served->shard().rounds()->subscribe(lu, [fd = lu->wake_fd] {
        const std::uint64_t one = 1;
        [[maybe_unused]] const auto n = ::write(fd, &one, sizeof one);  // EAGAIN: a wake is pending already
      });
    }
    *capacity = served->capacity_bytes();
    lu->served.store(std::move(served));
    std::string writers;
    if (lu->options.role == blockps::LuRole::status)
      writers = lu->options.admins.empty() ? "; control lines accepted from every initiator (no admins=)"
                                           : "; control lines accepted from " +
                                                 std::to_string(lu->options.admins.size()) + " administrator(s)";
    blockps::log_line(std::string(path) + ": " + std::string(blockps::to_string(lu->options.role)) +
                      " LU attached, capacity " + std::to_string(*capacity) + " bytes" + writers);
    return 0;
  } catch (const std::exception& e) {
    set_error(error, error_size, e.what());
    return -1;
  }
}

void blockps_lu_detach(blockps_lu* lu) {
  try {
    if (!lu) return;
    if (lu->wake_fd >= 0) {
      if (auto served = lu->served.load(); served && served->shard().rounds())
        served->shard().rounds()->unsubscribe(lu);
      ::close(lu->wake_fd);
      lu->wake_fd = -1;
    }
    lu->served.store(nullptr);  // the last LU of a shard writes its final checkpoint here
  } catch (...) {
    blockps::log_line_noexcept("detach failed", "");
  }
}

void blockps_lu_free(blockps_lu* lu) { delete lu; }

uint32_t blockps_lu_io_threads(const blockps_lu* lu) { return lu ? lu->options.io_threads : 1; }

const char* blockps_lu_product_id(const blockps_lu* lu) {
  if (!lu) return "BLOCKPS";
  switch (lu->options.role) {
    case blockps::LuRole::grad:
      return "BLOCKPS-GRAD";
    case blockps::LuRole::weights:
      return "BLOCKPS-WEIGHTS";
    case blockps::LuRole::status:
      return "BLOCKPS-STATUS";
  }
  return "BLOCKPS";
}

int blockps_lu_wake_fd(const blockps_lu* lu) { return lu ? lu->wake_fd : -1; }

blockps_admission blockps_lu_admit(blockps_lu* lu, const void* handle, const uint8_t* cdb, uint64_t offset,
                                   uint32_t length, const blockps_worker* worker) {
  try {
    if (!lu || !cdb || !worker) return BLOCKPS_ADMIT_RUN;
    const std::shared_ptr<blockps::ServedLu> served = lu->served.load();
    if (served && served->checks_writers() && blockps::scsi::writes_data(cdb[0])) {
      // The write runs either way: execute() refuses it there unless it was admitted here (the glue can set a
      // sense only on a command that completes through the I/O threads or asynchronously).
      served->admit_writer(handle, worker->iqn ? worker->iqn : "");
      return BLOCKPS_ADMIT_RUN;
    }
    if (lu->wake_fd < 0) return BLOCKPS_ADMIT_RUN;
    blockps::Rounds* rounds = served ? served->shard().rounds() : nullptr;
    const bool push = blockps::scsi::is_write(cdb[0]), pull = blockps::scsi::is_read(cdb[0]);
    if (!rounds || (!push && !pull)) return BLOCKPS_ADMIT_RUN;
    const blockps::WorkerRef who{worker->tid, worker->itn_id, worker->iqn ? worker->iqn : ""};
    const blockps::Admission a =
        push ? rounds->admit_push(handle, who, offset, length) : rounds->admit_pull(who.itn, offset, length);
    if (a == blockps::Admission::run) return BLOCKPS_ADMIT_RUN;
    std::string refusal;
    if (a == blockps::Admission::not_ready) refusal = rounds->degraded_reason();
    rounds->park(lu, handle, push, who, offset, length, refusal);
    if (!refusal.empty()) {
      const std::uint64_t one = 1;
      [[maybe_unused]] const auto n = ::write(lu->wake_fd, &one, sizeof one);
    }
    return BLOCKPS_ADMIT_PARKED;
  } catch (...) {
    blockps::log_line_noexcept("admission failed: ", "unexpected exception");
    return BLOCKPS_ADMIT_RUN;
  }
}

void blockps_lu_on_wake(blockps_lu* lu, const blockps_parked_ops* ops) {
  if (!lu || lu->wake_fd < 0 || !ops) return;
  std::uint64_t count = 0;
  [[maybe_unused]] const auto n = ::read(lu->wake_fd, &count, sizeof count);
  try {
    const std::shared_ptr<blockps::ServedLu> served = lu->served.load();
    blockps::Rounds* rounds = served ? served->shard().rounds() : nullptr;
    if (!rounds) return;
    rounds->process_parked(
        lu, [ops](int tid, std::uint64_t itn) { return ops->alive(tid, itn) != 0; },
        [ops](const void* handle) { return ops->aborted(handle) != 0; },
        [ops](const blockps::ParkedCommand& p) { ops->resubmit(p.handle); },
        [ops, &served](const blockps::ParkedCommand& p, bool aborted, const std::string& why) {
          blockps_outcome o{};
          o.status = blockps::scsi::kCheckCondition;
          o.sense_key = aborted ? blockps::scsi::kAbortedCommand : blockps::scsi::kNotReady;
          o.asc = aborted ? blockps::scsi::kAscNone : blockps::scsi::kAscNotReadyManualIntervention;
          blockps::log_line(served->shard().path() + ": sync: " + (p.is_push ? "push" : "pull") + " of " +
                            p.worker.iqn + " at byte " + std::to_string(p.offset) + " failed: " + why);
          ops->fail(p.handle, &o);
        });
  } catch (...) {
    blockps::log_line_noexcept("parked commands: ", "unexpected exception");
  }
}

void blockps_lu_fail_parked(blockps_lu* lu, const blockps_parked_ops* ops) {
  try {
    const std::shared_ptr<blockps::ServedLu> served = lu ? lu->served.load() : nullptr;
    if (!served || !served->shard().rounds()) return;
    served->shard().rounds()->refuse_parked(lu, "its LU is closing");
    blockps_lu_on_wake(lu, ops);
  } catch (...) {
    blockps::log_line_noexcept("parked commands: ", "unexpected exception at close");
  }
}

int blockps_lu_needs_admission(const blockps_lu* lu, const uint8_t* cdb) {
  if (!lu || !cdb) return 0;
  const bool read = blockps::scsi::is_read(cdb[0]), write = blockps::scsi::is_write(cdb[0]);
  if (lu->wake_fd >= 0 && (read || write)) return 1;  // may park on a round
  // A control write: its sender must be an administrator (from the options: no shard lookup on the hot path).
  return blockps::scsi::writes_data(cdb[0]) && lu->options.role == blockps::LuRole::status &&
                 !lu->options.admins.empty()
             ? 1
             : 0;
}

void blockps_lu_execute(blockps_lu* lu, const blockps_command* cmd, blockps_outcome* outcome) {
  blockps::LuOutcome r{blockps::scsi::kCheckCondition, blockps::scsi::kHardwareError,
                       blockps::scsi::kAscInternalTargetFailure};
  try {
    const std::shared_ptr<blockps::ServedLu> served = lu ? lu->served.load() : nullptr;
    if (served && cmd && cmd->cdb) {
      const blockps::TargetCommand c{cmd->cdb,
                                     cmd->offset,
                                     cmd->transfer_length,
                                     {reinterpret_cast<std::byte*>(cmd->in), cmd->in ? cmd->in_length : 0},
                                     {reinterpret_cast<const std::byte*>(cmd->out), cmd->out ? cmd->out_length : 0},
                                     cmd->handle};
      r = served->execute(c);
    }
  } catch (...) {
    blockps::log_line_noexcept("command failed: ", "unexpected exception");
  }
  outcome->status = r.status;
  outcome->sense_key = r.sense_key;
  outcome->asc = r.asc;
  outcome->has_info = r.has_info;
  outcome->info = r.info;
}

}  // extern "C"
