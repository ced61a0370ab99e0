#include "ps_backend/checkpoint/checkpoint_schedule.h"

#include <chrono>
#include <ctime>
#include <exception>
#include <utility>

#include "contract/log.h"

namespace blockps {

CheckpointSchedule::CheckpointSchedule(CheckpointTarget target) : target_(std::move(target)) {}

CheckpointSchedule::~CheckpointSchedule() { stop_periodic(); }

void CheckpointSchedule::loaded(std::uint64_t block_steps) {
  std::lock_guard lk(mutex_);
  file_is_current_ = true;
  std::lock_guard e(last_mutex_);
  last_.block_steps = block_steps;
}

Status CheckpointSchedule::checkpoint() {
  // Mutations are counted when they complete, so a write that started after the counter reached `wanted`
  // holds every change completed before this call.
  const std::uint64_t wanted = mutations_.load(std::memory_order_acquire);
  std::lock_guard lk(mutex_);
  if (!file_is_current_ || checkpointed_mutations_ < wanted) {
    if (Status written = write_file(); !written.ok()) return written;
  }
  // The checkpoint is good whatever becomes of its copy: a failed copy is tried again at the next checkpoint
  // (dirty() says so to the periodic and the final one).
  if (!copy_is_current_) copy_file();
  return Status::Ok();
}

Status CheckpointSchedule::write_file() {
  const std::uint64_t at_start = mutations_.load(std::memory_order_acquire);
  const std::string copy_to = target_.copy_to();
  const Result<CheckpointWritten> written = [&]() -> Result<CheckpointWritten> {
    try {
      return target_.write();
    } catch (const std::exception& e) {
      return Status::Error(std::string("checkpoint failed: ") + e.what());
    }
  }();
  if (!written.ok()) {
    note_failure(written.message());
    return written.status();
  }
  file_is_current_ = true;
  checkpointed_mutations_ = at_start;
  copy_is_current_ = copy_to.empty();
  target_.written->fetch_add(1, std::memory_order_relaxed);
  std::lock_guard e(last_mutex_);
  last_ = {
      .unix_time = static_cast<std::uint64_t>(std::time(nullptr)), .error = "", .block_steps = written->block_steps};
  return Status::Ok();
}

void CheckpointSchedule::copy_file() {
  const std::string copy_to = target_.copy_to();
  const Status copied = [&] {
    try {
      return copy_checkpoint(target_.path, copy_to);
    } catch (const std::exception& e) {
      return Status::Error(e.what());
    }
  }();
  if (!copied.ok()) {
    note_failure("checkpoint copy to " + copy_to + " failed: " + copied.message());
    return;
  }
  copy_is_current_ = true;
  std::lock_guard e(last_mutex_);
  last_.error.clear();
}

void CheckpointSchedule::note_failure(const std::string& why) {
  target_.failed->fetch_add(1, std::memory_order_relaxed);
  log_line(target_.path + ": " + why);
  std::lock_guard e(last_mutex_);
  last_.error = why;
}

bool CheckpointSchedule::dirty() {
  std::lock_guard lk(mutex_);
  return checkpointed_mutations_ != mutations_.load(std::memory_order_acquire) || !copy_is_current_;
}

LastCheckpoint CheckpointSchedule::last() const {
  std::lock_guard e(last_mutex_);
  return last_;
}

void CheckpointSchedule::start_periodic(std::uint32_t seconds) {
  periodic_ =
      std::jthread([this, period = std::chrono::seconds(seconds)](std::stop_token stop) { periodic(stop, period); });
}

void CheckpointSchedule::stop_periodic() {
  if (!periodic_.joinable()) return;
  periodic_.request_stop();
  periodic_cv_.notify_all();
  periodic_.join();
}

void CheckpointSchedule::periodic(std::stop_token stop, std::chrono::seconds period) {
  std::unique_lock lk(periodic_mutex_);
  while (!stop.stop_requested()) {
    if (periodic_cv_.wait_for(lk, stop, period, [] { return false; })) break;
    if (stop.stop_requested()) break;
    lk.unlock();
    try {
      // A failure is counted, logged and shown on the status page by checkpoint() itself.
      if (dirty()) (void)checkpoint();
    } catch (...) {
      log_line_noexcept("periodic checkpoint failed: ", target_.path.c_str());
    }
    lk.lock();
  }
}

}  // namespace blockps
