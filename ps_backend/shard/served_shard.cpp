#include "ps_backend/shard/served_shard.h"

#include <chrono>
#include <ctime>
#include <utility>

#include "contract/log.h"
#include "contract/status_page.h"
#include "ps_backend/checkpoint/checkpoint.h"

namespace blockps {

ServedShard::ServedShard(std::string path, const ShardConfig& config, std::unique_ptr<ModelShard> model)
    : path_(std::move(path)),
      config_(config),
      model_(std::move(model)),
      started_unix_(static_cast<std::uint64_t>(std::time(nullptr))),
      claim_(config.claim_idle_s),
      refusals_(status_page::kRecentRefusals),
      checkpoints_({.path = path_,
                    .write =
                        [this] {
                          return write_checkpoint(path_, *model_, this->config(), tenancy(),
                                                  compressed_averages_.get());
                        },
                    .copy_to = [this] { return this->config().checkpoint_copy; },
                    .written = &counters_.checkpoints,
                    .failed = &counters_.checkpoint_errors}) {}

Result<std::shared_ptr<ServedShard>> ServedShard::create(const std::string& path, const LuOptions& opts,
                                                         const ModelShard::StoreWrapper& wrap_store) {
  try {
    const Result<ShardOpening> opening = plan_opening(path, opts);
    if (!opening.ok()) return opening.status();
    // Locked before the model (host or GPU memory) is allocated, so a refused LU costs nothing.
    Result<ShardLock> lock = ShardLock::take(path);
    if (!lock.ok()) return lock.status();
    const Result<Device> device =
        choose_device(opening->config, path, opening->from_checkpoint && !opts.given.count("device"));
    if (!device.ok()) return device.status();
    Result<std::unique_ptr<ModelShard>> model =
        ModelShard::create(opening->config.geometry, opening->config.optimizer, shared_engine(), *device, wrap_store);
    if (!model.ok()) return model.status();
    std::shared_ptr<ServedShard> shard(new ServedShard(path, opening->config, std::move(model).value()));
    shard->lock_.emplace(std::move(lock).value());
    if (Status loaded = opening->from_checkpoint ? shard->load(*opening) : shard->initialise(); !loaded.ok())
      return loaded;
    shard->start_rounds();
    if (Status residuals = shard->restore_residuals(opening->from_checkpoint); !residuals.ok()) return residuals;
    shard->serving_ = true;
    if (opening->config.checkpoint_s > 0) shard->checkpoints_.start_periodic(opening->config.checkpoint_s);
    return shard;
  } catch (const std::bad_alloc&) {
    return Status::Error("cannot allocate memory for a shard of size=" + format_byte_size(opts.config.geometry.bytes));
  } catch (const std::exception& e) {
    return Status::Error(std::string("cannot create shard: ") + e.what());
  }
}

Status ServedShard::load(const ShardOpening& opening) {
  if (Status loaded = load_checkpoint(path_, *model_); !loaded.ok()) return loaded;
  checkpoints_.loaded(model_->total_block_steps());  // nothing has pushed yet
  // A shard restarted from its checkpoint is still its job's (the job's new sessions join it) and still knows
  // its place.
  const ShardTenancy& saved = opening.tenancy;
  if (!saved.job.empty()) claim_.restore(saved.job, saved.claimed_unix);
  place_ = saved.place;
  log_line(path_ + ": loaded checkpoint (" + format_shard_options(opening.config) + ")" +
           (saved.job.empty() ? "" : "; held by job " + saved.job) +
           (saved.place ? "; place " + format_place(*saved.place) : ""));
  return Status::Ok();
}

Status ServedShard::initialise() {
  if (Status initialised = initialise_weights(*model_, config_); !initialised.ok()) return initialised;
  log_line(path_ + ": new shard (" + format_shard_options(config_) + ")");
  return Status::Ok();
}

void ServedShard::start_rounds() {
  if (config_.rounds.mode == RoundPolicy::Mode::async) return;
  rounds_ = std::make_unique<Rounds>(*model_, config_.rounds, [this](std::uint64_t ns) {
    counters_.note_aggregation(ns);
    note_mutation();
  });
  compressed_averages_ = rounds_->shared_compressed_averages();
}

Status ServedShard::restore_residuals(bool from_checkpoint) {
  if (!compressed_averages_) return Status::Ok();
  if (from_checkpoint) {
    if (Status loaded = load_checkpoint_residuals(path_, *compressed_averages_); !loaded.ok()) return loaded;
    log_line(path_ + ": compress=" + std::string(to_string(compressed_averages_->format())) +
             ": the averages' residuals (error feedback) restored from the checkpoint (zero where it kept none)");
  } else {
    log_line(path_ + ": compress=" + std::string(to_string(compressed_averages_->format())) +
             ": the averages' residuals (error feedback) start at zero");
  }
  return Status::Ok();
}

ServedShard::~ServedShard() {
  try {
    rounds_.reset();  // no round is applied after the final checkpoint
    checkpoints_.stop_periodic();
    if (serving_ && dirty()) {
      if (checkpoint().ok()) log_line(path_ + ": final checkpoint written");
    }
  } catch (...) {
    log_line_noexcept("final checkpoint failed: ", path_.c_str());
  }
}

ShardConfig ServedShard::config() const {
  std::lock_guard lk(config_mutex_);
  return config_;
}

void ServedShard::set_lr(float lr) {
  std::lock_guard lk(config_mutex_);
  config_.optimizer.lr = lr;
  model_->set_params(config_.optimizer);
  note_mutation();
}

LuOutcome ServedShard::push(std::uint64_t offset, std::span<const std::byte> data, const void* handle, bool durable) {
  if (rounds_) {
    // mode=sync or ssp:K: the gradient joins its blocks' rounds, which apply it (and note the aggregation).
    if (Status landed = rounds_->land_push(handle, data); !landed.ok()) {
      // Logged where it happened (rounds/). A push the rounds refused is the writer's error, not the target's.
      if (landed.code() == StatusCode::invalid_argument)
        return check_condition(scsi::kIllegalRequest, scsi::kAscInvalidFieldInParameterList);
      counters_.io_errors.fetch_add(1, std::memory_order_relaxed);
      return target_failure();
    }
  } else {
    const auto t0 = std::chrono::steady_clock::now();
    // Only a GPU engine fails (a device fault; it stays failed): the push is not applied.
    if (Status pushed = model_->push_gradient(offset, data); !pushed.ok()) {
      log_line(path_ + ": " + pushed.message());
      counters_.io_errors.fetch_add(1, std::memory_order_relaxed);
      return target_failure();
    }
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0);
    counters_.note_aggregation(static_cast<std::uint64_t>(ns.count()));
    note_mutation();
  }
  counters_.pushes.fetch_add(1, std::memory_order_relaxed);
  counters_.push_bytes.fetch_add(data.size(), std::memory_order_relaxed);
  return durable ? made_durable() : good();
}

LuOutcome ServedShard::pull(std::uint64_t offset, std::span<std::byte> out, LuRole lu) {
  const CompressedAverages* compressed = lu == LuRole::grad && rounds_ ? rounds_->compressed_averages() : nullptr;
  if (!compressed) {
    model_->read_weights(offset, out);
  } else {
    // Block by block: each block's compressed image, or its weights where its last round was full precision.
    const ShardGeometry& g = model_->geometry();
    for (std::size_t done = 0; done < out.size();) {
      const std::uint64_t at = offset + done, block = at / g.block_bytes, in_block = at % g.block_bytes;
      const std::uint64_t block_len = g.elements_in_block(block) * wire_size(g.dtype);
      const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(out.size() - done, block_len - in_block));
      const std::span<std::byte> piece = out.subspan(done, n);
      if (!compressed->read(block, in_block, piece)) model_->read_weights(at, piece);
      done += n;
    }
  }
  counters_.pulls.fetch_add(1, std::memory_order_relaxed);
  counters_.pull_bytes.fetch_add(out.size(), std::memory_order_relaxed);
  return good();
}

LuOutcome ServedShard::assign(std::uint64_t offset, std::span<const std::byte> data, bool durable) {
  if (Status assigned = model_->assign_weights(offset, data); !assigned.ok()) {
    log_line(path_ + ": " + assigned.message());
    counters_.io_errors.fetch_add(1, std::memory_order_relaxed);
    return target_failure();
  }
  counters_.weight_writes.fetch_add(1, std::memory_order_relaxed);
  counters_.weight_write_bytes.fetch_add(data.size(), std::memory_order_relaxed);
  note_mutation();
  return durable ? made_durable() : good();
}

LuOutcome ServedShard::made_durable() {
  if (!checkpoint().ok()) return check_condition(scsi::kMediumError, scsi::kAscWriteError);
  return good();
}

void ServedShard::hand_back_parked(const void* owner, const std::function<bool(int, std::uint64_t)>& alive,
                                   const std::function<bool(const void*)>& aborted,
                                   const std::function<void(const void*, bool, std::uint64_t)>& resubmit,
                                   const std::function<void(const void*, const LuOutcome&)>& fail) {
  if (!rounds_) return;
  rounds_->process_parked(
      owner, alive, aborted, [&resubmit](const ParkedCommand& p) { resubmit(p.handle, p.is_push, p.len); },
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

std::optional<Place> ServedShard::place() const {
  std::lock_guard lk(place_mutex_);
  return place_;
}

std::optional<Place> ServedShard::set_place(const Place& place) {
  std::lock_guard lk(place_mutex_);
  return std::exchange(place_, place);
}

ShardTenancy ServedShard::tenancy() const {
  const ClaimStatus claim = claim_.status();
  return {claim.holder, claim.claimed_unix, place()};
}

Status ServedShard::control(std::string_view text, const WorkerRef* sender) {
  Status obeyed = control_.apply(text, sender);
  if (!obeyed.ok() && obeyed.code() == StatusCode::invalid_argument)
    refusals_.add(sender ? *sender : WorkerRef{}, LuRole::status,
                  "shard " + path_ + " refused a control write: " + obeyed.message());
  return obeyed;
}

}  // namespace blockps
