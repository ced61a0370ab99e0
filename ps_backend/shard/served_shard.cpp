#include "ps_backend/shard/served_shard.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <utility>
#include <vector>

#include "aggregator/faulty_store.h"
#include "contract/status_page.h"
#include "ps_backend/checkpoint/checkpoint.h"
#include "ps_backend/control/control_parser.h"
#include "ps_backend/shard/log.h"
#include "ps_backend/shard/shard_registry.h"

namespace blockps {
namespace {

// One engine per process: its threads serve every shard of this tgtd.
std::shared_ptr<CpuEngine> shared_engine() {
  static std::shared_ptr<CpuEngine> engine = std::make_shared<CpuEngine>(0);
  return engine;
}

// The engine for `c.device` (cpu, auto, gpu:N), or why it cannot be had. `from_checkpoint`: the value came from
// the checkpoint's options, not from this LU's (a checkpoint written on a GPU host may be opened on another).
Result<Device> choose_device(const ShardConfig& c, const std::string& path, bool from_checkpoint) {
  if (c.device == "auto") {
    std::string why;
    if (cuda_device_count(&why) > 0) {
      log_line(path + ": device=auto: aggregating on gpu:0");
      return Device::cuda(0);
    }
    log_line(path + ": device=auto: no usable GPU (" + why + "): aggregating on the CPU");
    return Device::cpu();
  }
  const std::optional<Device> device = parse_device(c.device);
  if (!device) return Status::Error(StatusCode::config, "device=" + c.device + ": must be cpu, auto or gpu:N");
  if (Status usable = check_device(*device); !usable.ok()) {
    if (!from_checkpoint) return usable;
    return Status::Error(usable.code(), usable.message() + " (device=" + c.device +
                                            " is the checkpoint's; give device=cpu or device=auto to open it here)");
  }
  return *device;
}

Status initialise(ModelShard& model, const ShardConfig& c) {
  switch (c.init.kind) {
    case InitSpec::Kind::zeros:
      return Status::Ok();
    case InitSpec::Kind::uniform: {
      std::mt19937_64 rng(c.seed);
      std::uniform_real_distribution<float> dist(static_cast<float>(-c.init.scale), static_cast<float>(c.init.scale));
      return model.fill_weights([&](std::uint64_t) { return dist(rng); });
    }
    case InitSpec::Kind::normal: {
      std::mt19937_64 rng(c.seed);
      std::normal_distribution<float> dist(0.0f, static_cast<float>(c.init.scale));
      return model.fill_weights([&](std::uint64_t) { return dist(rng); });
    }
    case InitSpec::Kind::file: {
      const int fd = ::open(c.init.path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) {
        const int err = errno;
        return Status::Error(StatusCode::io, "init=file:" + c.init.path + ": " + errno_message(err));
      }
      struct stat st {};
      Status loaded = Status::Ok();
      if (::fstat(fd, &st) != 0 || static_cast<std::uint64_t>(st.st_size) != c.geometry.bytes) {
        loaded =
            Status::Error(StatusCode::mismatch, "init=file:" + c.init.path + ": holds " + std::to_string(st.st_size) +
                                                    " bytes, the shard needs " + std::to_string(c.geometry.bytes) +
                                                    " (size) in dtype " + std::string(to_string(c.geometry.dtype)));
      } else {
        std::vector<std::byte> chunk(c.geometry.block_bytes);
        for (std::uint64_t off = 0; off < c.geometry.bytes && loaded.ok(); off += chunk.size()) {
          const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(chunk.size(), c.geometry.bytes - off));
          const ssize_t r = ::pread(fd, chunk.data(), n, static_cast<off_t>(off));
          if (r != static_cast<ssize_t>(n))
            loaded = Status::Error(StatusCode::io, "init=file:" + c.init.path + ": short read");
          else
            loaded = model.assign_weights(off, {chunk.data(), n});
        }
      }
      ::close(fd);
      return loaded;
    }
  }
  return Status::Error("unknown init");
}

std::uint64_t now_unix() { return static_cast<std::uint64_t>(std::time(nullptr)); }

// checkpoint_copy= must name another file than the checkpoint at `path` (canonical), however it is spelled: a copy
// onto itself is no copy. `from_checkpoint`: the value came from the checkpoint's options, not from this LU's (a
// shard opened on its copy finds its own path there).
Status check_copy_is_another_file(const ShardConfig& c, const std::string& path, bool from_checkpoint) {
  if (c.checkpoint_copy.empty()) return Status::Ok();
  const Result<std::string> copy = canonical_shard_path(c.checkpoint_copy);
  if ((copy.ok() ? *copy : c.checkpoint_copy) != path) return Status::Ok();
  const Status refused = bad_checkpoint_copy(c.checkpoint_copy);
  if (!from_checkpoint) return refused;
  return Status::Error(refused.code(), refused.message() +
                                           " (the checkpoint records it; give checkpoint_copy=none or another path to "
                                           "open it here)");
}

// The fault-injection hook of the failure tests (docs/OPTIONS.md, BLOCKPS_FAULT_INJECTION_FILE): with the
// variable set in tgtd's environment, the shard's store fails every optimizer update while that file exists.
ModelShard::StoreWrapper fault_injection(const std::string& path) {
  const char* trigger = std::getenv("BLOCKPS_FAULT_INJECTION_FILE");
  if (trigger == nullptr || *trigger == '\0') return {};
  log_line(path + ": BLOCKPS_FAULT_INJECTION_FILE=" + trigger +
           ": TEST HOOK: every optimizer update of this shard fails while that file exists");
  return [file = std::string(trigger)](std::unique_ptr<ShardStore> store) {
    return make_faulty_store(std::move(store), file);
  };
}

}  // namespace

ServedShard::ServedShard(std::string path, const ShardConfig& config, std::shared_ptr<CpuEngine> engine, Device device)
    : path_(std::move(path)),
      config_(config),
      model_(config.geometry, config.optimizer, std::move(engine), device, fault_injection(path_)),
      started_unix_(now_unix()),
      claim_(config.claim_idle_s),
      refusals_(status_page::kRecentRefusals) {}

Result<std::shared_ptr<ServedShard>> ServedShard::create(const std::string& path, const LuOptions& opts) {
  try {
    ShardConfig config = opts.config;
    const bool from_checkpoint = checkpoint_exists(path);
    ShardTenancy saved_tenancy;
    if (from_checkpoint) {
      const Result<CheckpointHeader> header = read_checkpoint_header(path);
      if (!header.ok()) return header.status();
      saved_tenancy = header->tenancy;
      const ShardConfig& saved = header->config;
      Result<ShardConfig> merged = merge_onto(opts, saved, /*structural_only=*/true);
      if (!merged.ok()) {
        return Status::Error(merged.status().code(),
                             "checkpoint " + path + " does not match the options: " + merged.message() +
                                 " (start with a new path, or remove the checkpoint to discard it)");
      }
      config = std::move(merged).value();
      const std::string before = format_shard_options(saved), after = format_shard_options(config);
      if (before != after) log_line(path + ": options differ from the checkpoint's; now: " + after);
    } else if (!opts.given.count("size")) {
      return Status::Error(StatusCode::config,
                           "size= is required: no shard is open at " + path + " and it holds no checkpoint");
    }
    if (Status geometry = check_geometry(config.geometry); !geometry.ok()) return geometry;
    if (Status copy = check_copy_is_another_file(config, path, from_checkpoint && !opts.given.count("checkpoint_copy"));
        !copy.ok())
      return copy;

    // Two tgtd processes must never serve (and overwrite) one checkpoint file. Locked before the model (host or
    // GPU memory) is allocated, so a refused LU costs nothing.
    const std::string lock_path = path + ".lock";
    struct ClosedUnlessKept {
      int fd;
      ~ClosedUnlessKept() {
        if (fd >= 0) ::close(fd);
      }
    } lock{::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644)};
    if (lock.fd < 0) {
      const int err = errno;
      return Status::Error(StatusCode::io, "cannot open " + lock_path + ": " + errno_message(err));
    }
    if (::flock(lock.fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      return err == EWOULDBLOCK
                 ? Status::Error(StatusCode::io,
                                 "checkpoint " + path + " is in use by another process (" + lock_path + " is locked)")
                 : Status::Error(StatusCode::io, "cannot lock " + lock_path + ": " + errno_message(err));
    }

    const Result<Device> device = choose_device(config, path, from_checkpoint && !opts.given.count("device"));
    if (!device.ok()) return device.status();
    std::shared_ptr<ServedShard> shard(new ServedShard(path, config, shared_engine(), *device));
    shard->lock_fd_ = std::exchange(lock.fd, -1);
    if (from_checkpoint) {
      if (Status loaded = load_checkpoint(path, shard->model_); !loaded.ok()) return loaded;
      shard->file_is_current_ = true;
      shard->last_checkpoint_.block_steps = shard->model_.total_block_steps();  // nothing has pushed yet
      // A shard restarted from its checkpoint is still its job's (the job's new sessions join it) and still
      // knows its place.
      if (!saved_tenancy.job.empty()) shard->claim_.restore(saved_tenancy.job, saved_tenancy.claimed_unix);
      shard->place_ = saved_tenancy.place;
      log_line(path + ": loaded checkpoint (" + format_shard_options(config) + ")" +
               (saved_tenancy.job.empty() ? "" : "; held by job " + saved_tenancy.job) +
               (saved_tenancy.place ? "; place " + format_place(*saved_tenancy.place) : ""));
    } else {
      if (Status initialised = initialise(shard->model_, config); !initialised.ok()) return initialised;
      log_line(path + ": new shard (" + format_shard_options(config) + ")");
    }
    if (config.rounds.mode != RoundPolicy::Mode::async) {
      ServedShard* s = shard.get();
      shard->rounds_ = std::make_unique<Rounds>(shard->model_, config.rounds, [s](std::uint64_t ns) {
        s->note_aggregation(ns);
        s->note_mutation();
      });
    }
    shard->serving_ = true;
    if (config.checkpoint_s > 0)
      shard->periodic_ = std::jthread([s = shard.get()](std::stop_token stop) { s->periodic_checkpoints(stop); });
    return shard;
  } catch (const std::bad_alloc&) {
    return Status::Error("cannot allocate memory for a shard of size=" + format_byte_size(opts.config.geometry.bytes));
  } catch (const std::exception& e) {
    return Status::Error(std::string("cannot create shard: ") + e.what());
  }
}

ServedShard::~ServedShard() {
  try {
    rounds_.reset();  // no round is applied after the final checkpoint
    if (periodic_.joinable()) {
      periodic_.request_stop();
      periodic_cv_.notify_all();
      periodic_.join();
    }
    if (serving_ && dirty()) {
      if (checkpoint().ok()) log_line(path_ + ": final checkpoint written");
    }
  } catch (...) {
    log_line_noexcept("final checkpoint failed: ", path_.c_str());
  }
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the flock
}

bool ServedShard::dirty() {
  std::lock_guard lk(checkpoint_mutex_);
  return checkpointed_mutations_ != mutations_.load(std::memory_order_acquire) || !copy_is_current_;
}

ShardConfig ServedShard::config() const {
  std::lock_guard lk(config_mutex_);
  return config_;
}

LuOutcome ServedShard::push(std::uint64_t offset, std::span<const std::byte> data, const void* handle) {
  if (rounds_) {
    // mode=sync or ssp:K: the gradient joins its blocks' rounds, which apply it (and note the aggregation).
    if (Status landed = rounds_->land_push(handle, data); !landed.ok()) {
      counters_.io_errors.fetch_add(1, std::memory_order_relaxed);  // logged where it happened (rounds/)
      return target_failure();
    }
  } else {
    const auto t0 = std::chrono::steady_clock::now();
    // Only a GPU engine fails (a device fault; it stays failed): the push is not applied.
    if (Status pushed = model_.push_gradient(offset, data); !pushed.ok()) {
      log_line(path_ + ": " + pushed.message());
      counters_.io_errors.fetch_add(1, std::memory_order_relaxed);
      return target_failure();
    }
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0);
    note_aggregation(static_cast<std::uint64_t>(ns.count()));
    note_mutation();
  }
  counters_.pushes.fetch_add(1, std::memory_order_relaxed);
  counters_.push_bytes.fetch_add(data.size(), std::memory_order_relaxed);
  return good();
}

LuOutcome ServedShard::pull(std::uint64_t offset, std::span<std::byte> out) {
  model_.read_weights(offset, out);
  counters_.pulls.fetch_add(1, std::memory_order_relaxed);
  counters_.pull_bytes.fetch_add(out.size(), std::memory_order_relaxed);
  return good();
}

LuOutcome ServedShard::assign(std::uint64_t offset, std::span<const std::byte> data) {
  if (Status assigned = model_.assign_weights(offset, data); !assigned.ok()) {
    log_line(path_ + ": " + assigned.message());
    counters_.io_errors.fetch_add(1, std::memory_order_relaxed);
    return target_failure();
  }
  counters_.weight_writes.fetch_add(1, std::memory_order_relaxed);
  counters_.weight_write_bytes.fetch_add(data.size(), std::memory_order_relaxed);
  note_mutation();
  return good();
}

ServedShard::Admitted ServedShard::admit(const void* owner, const void* handle, LuRole lu, bool is_write,
                                         const WorkerRef& worker, std::uint64_t offset, std::uint64_t len,
                                         const SessionProbe& alive) {
  const bool parks = lu == LuRole::grad && rounds_;
  // The claim first: a command of another job's session never reaches the rounds (it would join their membership).
  const JobClaim::Admission claim = claim_.admit(worker);
  if (claim.verdict == JobClaim::Verdict::refused) {
    const std::string why =
        "shard " + path_ + " is held by job " + claim.holder + " (" + sessions_joined(claim.sessions) + "); session " +
        std::to_string(worker.itn) + " of " + worker.iqn + " has not joined it, so its " + std::string(to_string(lu)) +
        "-LU " + (is_write ? "write" : "read") + " is refused (RESERVATION CONFLICT): join job " + claim.holder +
        " (job=" + claim.holder +
        "), take the shard over (job=NAME with takeover: blockps --takeover), or release it (blockps release)";
    if (claim.first_refusal) log_line(why + " (logged once per session)");
    if (!parks) {
      refusals_.add(worker, lu, why);
      return Admitted::conflict;
    }
    rounds_->park(owner, handle, is_write, worker, offset, len, why, Refusal::reservation_conflict);
    return Admitted::refused;
  }
  if (!parks) return Admitted::run;
  const Admission a =
      is_write ? rounds_->admit_push(handle, worker, offset, len, alive) : rounds_->admit_pull(worker.itn, offset, len);
  switch (a) {
    case Admission::run:
      return Admitted::run;
    case Admission::park:
      rounds_->park(owner, handle, is_write, worker, offset, len);
      return Admitted::parked;
    case Admission::not_ready:
    case Admission::failed:
      break;
  }
  rounds_->park(owner, handle, is_write, worker, offset, len, rounds_->refusal_reason(worker),
                a == Admission::failed ? Refusal::failed : Refusal::not_ready);
  return Admitted::refused;
}

void ServedShard::hand_back_parked(const void* owner, const std::function<bool(int, std::uint64_t)>& alive,
                                   const std::function<bool(const void*)>& aborted,
                                   const std::function<void(const void*)>& resubmit,
                                   const std::function<void(const void*, const LuOutcome&)>& fail) {
  if (!rounds_) return;
  rounds_->process_parked(
      owner, alive, aborted, [&resubmit](const ParkedCommand& p) { resubmit(p.handle); },
      [this, &fail](const ParkedCommand& p, Refusal as, const std::string& why) {
        if (as == Refusal::reservation_conflict) {
          // Logged once per session at admission, or with the takeover that refused it.
          refusals_.add(p.worker, LuRole::grad, why);
        } else {
          const std::string sentence = rounds_refusal(p, as, why);
          log_line(sentence);
          if (as != Refusal::aborted) refusals_.add(p.worker, LuRole::grad, sentence);
        }
        fail(p.handle, refused(as));
      });
}

std::string ServedShard::rounds_refusal(const ParkedCommand& p, Refusal as, const std::string& why) const {
  std::string s = path_ + ": rounds: " + (p.is_push ? "push" : "pull") + " of " + p.worker.iqn + " at byte " +
                  std::to_string(p.offset) + " failed: " + why;
  // A full membership's reason says what it counts and what to change already.
  if (as == Refusal::aborted || why.starts_with("membership full")) return s;
  const RoundPolicy& policy = rounds_->policy();
  const std::size_t live = rounds_->live_workers();
  s += "; " + std::to_string(live) + (live == 1 ? " worker is" : " workers are") +
       " live (workers=" + std::to_string(policy.workers) + ", min_workers=" + std::to_string(policy.min_workers) +
       "): ";
  if (as == Refusal::failed)
    s += "the shard failed to apply an update (its log says why); once the cause is fixed, send the control line "
         "reset-rounds, and commands are served again from the last weights applied";
  else if (live < policy.min_workers)
    s += "start the missing workers again (a worker rejoins with its next push), or give the shard a lower "
         "min_workers";
  else if (live > policy.workers)
    s += "more workers push to this shard than workers=" + std::to_string(policy.workers) +
         " (a second job, or workers= too small): give each job its own shards, or raise workers";
  else
    s += "a worker of the round is missing or stalled: check that all " + std::to_string(policy.workers) +
         " workers run and push every block, or raise worker_timeout_ms";
  return s;
}

void ServedShard::refuse_parked(const void* owner, const std::string& why) {
  if (rounds_) rounds_->refuse_parked(owner, why);
}

void ServedShard::watch_parked(const void* owner, std::function<void()> wake) {
  if (rounds_) rounds_->subscribe(owner, std::move(wake));
}

void ServedShard::unwatch_parked(const void* owner) {
  if (rounds_) rounds_->unsubscribe(owner);
}

void ServedShard::note_aggregation(std::uint64_t ns) {
  aggregation_latency_.add(ns);
  counters_.aggregation_ns.fetch_add(ns, std::memory_order_relaxed);
  std::uint64_t seen = counters_.aggregation_max_ns.load(std::memory_order_relaxed);
  while (ns > seen && !counters_.aggregation_max_ns.compare_exchange_weak(seen, ns, std::memory_order_relaxed)) {
  }
}

Status ServedShard::checkpoint() {
  // Mutations are counted when they complete, so a write that started after the counter reached `wanted`
  // holds every change completed before this call.
  const std::uint64_t wanted = mutations_.load(std::memory_order_acquire);
  std::lock_guard lk(checkpoint_mutex_);
  const ShardConfig c = config();
  if (!file_is_current_ || checkpointed_mutations_ < wanted) {
    const std::uint64_t at_start = mutations_.load(std::memory_order_acquire);
    const Result<CheckpointWritten> written = [&]() -> Result<CheckpointWritten> {
      try {
        return write_checkpoint(path_, model_, c, tenancy());
      } catch (const std::exception& e) {
        return Status::Error(std::string("checkpoint failed: ") + e.what());
      }
    }();
    if (!written.ok()) {
      note_checkpoint_failure(written.message());
      return written.status();
    }
    file_is_current_ = true;
    checkpointed_mutations_ = at_start;
    copy_is_current_ = c.checkpoint_copy.empty();
    counters_.checkpoints.fetch_add(1, std::memory_order_relaxed);
    std::lock_guard e(last_checkpoint_mutex_);
    last_checkpoint_ = {.unix_time = now_unix(), .error = "", .block_steps = written->block_steps};
  }
  if (copy_is_current_) return Status::Ok();
  // The checkpoint at path_ is good whatever becomes of its copy: a failed copy is tried again at the next
  // checkpoint (dirty() says so to the periodic and the final one).
  const Status copied = [&] {
    try {
      return copy_checkpoint(path_, c.checkpoint_copy);
    } catch (const std::exception& e) {
      return Status::Error(e.what());
    }
  }();
  if (!copied.ok()) {
    note_checkpoint_failure("checkpoint copy to " + c.checkpoint_copy + " failed: " + copied.message());
    return Status::Ok();
  }
  copy_is_current_ = true;
  std::lock_guard e(last_checkpoint_mutex_);
  last_checkpoint_.error.clear();
  return Status::Ok();
}

void ServedShard::note_checkpoint_failure(const std::string& why) {
  counters_.checkpoint_errors.fetch_add(1, std::memory_order_relaxed);
  log_line(path_ + ": " + why);
  std::lock_guard e(last_checkpoint_mutex_);
  last_checkpoint_.error = why;
}

ServedShard::LastCheckpoint ServedShard::last_checkpoint() const {
  std::lock_guard e(last_checkpoint_mutex_);
  return last_checkpoint_;
}

void ServedShard::periodic_checkpoints(std::stop_token stop) {
  const auto period = std::chrono::seconds(config().checkpoint_s);
  std::unique_lock lk(periodic_mutex_);
  while (!stop.stop_requested()) {
    if (periodic_cv_.wait_for(lk, stop, period, [] { return false; })) break;
    if (stop.stop_requested()) break;
    lk.unlock();
    try {
      // A failure is counted, logged and shown on the status page by checkpoint() itself.
      if (dirty()) (void)checkpoint();
    } catch (...) {
      log_line_noexcept("periodic checkpoint failed: ", path_.c_str());
    }
    lk.lock();
  }
}

std::optional<Place> ServedShard::place() const {
  std::lock_guard lk(place_mutex_);
  return place_;
}

ShardTenancy ServedShard::tenancy() const {
  const ClaimStatus claim = claim_.status();
  return {claim.holder, claim.claimed_unix, place()};
}

Status ServedShard::control(std::string_view text, const WorkerRef* sender) {
  Status obeyed = apply_control(text, sender);
  if (!obeyed.ok() && obeyed.code() == StatusCode::invalid_argument)
    refusals_.add(sender ? *sender : WorkerRef{}, LuRole::status,
                  "shard " + path_ + " refused a control write: " + obeyed.message());
  return obeyed;
}

Status ServedShard::apply_control(std::string_view text, const WorkerRef* sender) {
  const auto refuse = [](std::string why) { return Status::Error(StatusCode::invalid_argument, std::move(why)); };
  const Result<ControlWrite> parsed = parse_control_lines(text);
  if (!parsed.ok()) return parsed.status();
  const ControlWrite& write = *parsed;
  bool acts_on_training = write.place.has_value();
  for (const ControlAction& action : write.actions) {
    if (action.kind == ControlAction::Kind::reset_rounds && !rounds_)
      return refuse("control reset-rounds: this shard is mode=async and has no rounds");
    acts_on_training = acts_on_training || action.kind != ControlAction::Kind::checkpoint;
  }
  const WorkerRef unknown;
  const WorkerRef& who = sender ? *sender : unknown;
  const std::string session = "session " + std::to_string(who.itn) + " of " + (sender ? who.iqn : "(unknown)");

  std::lock_guard serial(control_mutex_);
  // Every check before anything is applied: the claim (a job= line joins, or the sender must have joined the
  // holder), then the place.
  if (!write.job && acts_on_training) {
    const JobClaim::Admission claim = claim_.admit(who);
    if (claim.verdict == JobClaim::Verdict::refused)
      return refuse("control: shard " + path_ + " is held by job " + claim.holder + " (" +
                    sessions_joined(claim.sessions) + ") and " + session +
                    " has not joined it: send job=" + claim.holder +
                    " first (in the same write or before), take the shard over (job=NAME with takeover), or "
                    "release it (release)");
  }
  if (write.place) {
    const std::optional<Place> held = place();
    if (held && *held != *write.place && !write.replace_place)
      return refuse("control place=" + format_place(*write.place) + ": shard " + path_ + " holds place " +
                    format_place(*held) +
                    ": a cluster file that lists the shards in another order, another layout or another model "
                    "opens it in the wrong place; fix the cluster file, or re-lay the model deliberately "
                    "(replace-place in the same write: blockps init)");
  }
  if (write.job) {
    if (!sender) return refuse("control job=" + *write.job + ": the session that sent it is not known to the shard");
    const Result<JobClaim::Joined> joined = claim_.join(who, *write.job, write.takeover);
    if (!joined.ok())
      return refuse("control job=" + *write.job + ": shard " + path_ + " is held by another job: " + joined.message() +
                    "; take it over with job=" + *write.job +
                    " and takeover in one write (blockps --takeover), or release it (blockps release)");
    joined_job(*joined, *write.job, who);
  }

  // Applied: nothing below is refused.
  if (write.release) {
    const std::string previous = claim_.release();
    log_line(path_ + ": control: release by " + session +
             (previous.empty() ? ": the shard was not held" : ": job " + previous + " no longer holds the shard"));
    if (!previous.empty()) note_mutation();  // the next checkpoint records it
  }
  if (write.place) {
    std::lock_guard lk(place_mutex_);
    if (place_ != write.place) {
      log_line(path_ + ": control: place " + format_place(*write.place) +
               (place_ ? " replaces " + format_place(*place_) : std::string(" set")) + " by " + session);
      place_ = write.place;
      note_mutation();
    }
  }
  for (const ControlAction& action : write.actions) {
    switch (action.kind) {
      case ControlAction::Kind::set_lr: {
        std::lock_guard lk(config_mutex_);
        config_.optimizer.lr = action.lr;
        model_.set_params(config_.optimizer);
        note_mutation();  // the next checkpoint records the new lr
        log_line(path_ + ": control: " + action.line);
        break;
      }
      case ControlAction::Kind::checkpoint:
        if (Status written = checkpoint(); !written.ok())
          return Status::Error(written.code(), "control checkpoint: " + written.message());
        break;
      case ControlAction::Kind::reset_rounds:
        rounds_->reset();
        break;
    }
  }
  return Status::Ok();
}

void ServedShard::joined_job(const JobClaim::Joined& joined, const std::string& job, const WorkerRef& sender) {
  const std::string session = "session " + std::to_string(sender.itn) + " of " + sender.iqn;
  switch (joined.kind) {
    case JobClaim::Joined::Kind::joined:
      log_line(path_ + ": job " + job + ": " + session + " joined");
      return;
    case JobClaim::Joined::Kind::claimed:
      log_line(path_ + ": job " + job + " claims the shard (" + session + ")");
      note_mutation();  // the next checkpoint records the holder
      return;
    case JobClaim::Joined::Kind::took_over:
      break;
  }
  const std::string why = "job " + job + " took shard " + path_ + " over from job " + joined.previous +
                          (joined.lapsed ? " (whose claim lapsed: no session left and no command for claim_idle_s=" +
                                               std::to_string(config().claim_idle_s) + " s)"
                                         : " (takeover by " + session + ")");
  log_line(path_ + ": " + why);
  note_mutation();
  // The old job's rounds must not mix into the new job's: its members, open rounds and parked commands go.
  if (rounds_) rounds_->restart(why);
}

}  // namespace blockps
