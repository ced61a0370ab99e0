// DoubleBuffer (double_buffer.h): the communication thread and the adaptive-pull plan.
#include "blockps/double_buffer.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <future>
#include <new>
#include <string>

#include "client/trace.h"
#include "client/transport/aligned_buffer.h"

namespace blockps {
namespace {

double seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

void blend(double& average, double sample, double smoothing, std::uint64_t samples_before) {
  average = samples_before == 0 ? sample : average + smoothing * (sample - average);
}

// The mean deviation of a sample from its moving average, updated before the average (RFC 6298's RTTVAR; the
// first sample starts it at half the sample).
void blend_deviation(double& deviation, double average, double sample, double smoothing, std::uint64_t samples_before) {
  deviation = samples_before == 0 ? sample / 2 : deviation + smoothing * (std::abs(sample - average) - deviation);
}

}  // namespace

std::string check_pipeline_options(const PipelineOptions& o) {
  if (!(o.smoothing > 0 && o.smoothing <= 1))
    return "smoothing = " + std::to_string(o.smoothing) + ": must be in (0, 1]";
  if (!(o.safety >= 0 && o.safety < 1)) return "safety = " + std::to_string(o.safety) + ": must be in [0, 1)";
  if (o.warmup_steps < 1) return "warmup_steps = " + std::to_string(o.warmup_steps) + ": must be >= 1";
  return "";
}

struct DoubleBuffer::ModelBuffer {
  AlignedBuffer weights, grads;  // O_DIRECT-ready for the posix transport
  // The last exchange of this buffer.
  Clock::time_point pulled_at{};
  double push_s = 0, pull_s = 0, bubble_s = 0;
  bool pipelined = false;
};

DoubleBuffer::DoubleBuffer(Cluster& cluster, const PipelineOptions& options)
    : cluster_(cluster),
      options_(options),
      bytes_(cluster.model_bytes()),
      buffers_(std::make_unique<ModelBuffer[]>(2)),
      compute_(&buffers_[0]) {}

std::span<std::byte> DoubleBuffer::weights() { return {compute_->weights.get(), bytes_}; }
std::span<std::byte> DoubleBuffer::grads() { return {compute_->grads.get(), bytes_}; }

Result<std::unique_ptr<DoubleBuffer>> DoubleBuffer::create(Cluster& cluster, const PipelineOptions& options) {
  if (std::string why = check_pipeline_options(options); !why.empty())
    return Status::Error(StatusCode::invalid_argument, "double buffer options: " + why);
  std::unique_ptr<DoubleBuffer> db(new DoubleBuffer(cluster, options));
  const int buffers = options.mode == PipelineMode::double_buffer ? 2 : 1;
  for (int i = 0; i < buffers; ++i) {
    ModelBuffer& b = db->buffers_[i];
    for (auto* slot : {&b.weights, &b.grads}) {
      *slot = make_aligned_buffer(db->bytes_);
      if (!*slot)
        return Status::Error(StatusCode::unknown, "double buffer: cannot allocate " + std::to_string(db->bytes_) +
                                                      " bytes for a model buffer");
    }
    if (i > 0) {  // the same weights: one pull serves both buffers
      std::memcpy(b.weights.get(), db->buffers_[0].weights.get(), db->bytes_);
      b.pulled_at = db->buffers_[0].pulled_at;
      continue;
    }
    if (Status s = cluster.pull(std::span(b.weights.get(), db->bytes_)); !s.ok())
      return Status::Error(s.code(), "double buffer: initial pull: " + s.message());
    b.pulled_at = Clock::now();
  }
  if (buffers == 2) db->thread_ = std::thread([p = db.get()] { p->communicate(); });
  db->compute_started_ = Clock::now();
  return db;
}

DoubleBuffer::~DoubleBuffer() {
  {
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return in_flight_ == nullptr; });
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

PipelineAverages DoubleBuffer::averages() const {
  std::lock_guard lock(mutex_);
  return averages_;
}

Status DoubleBuffer::exchange(ModelBuffer& buffer, Clock::time_point submitted) {
  PipelineAverages plan;
  bool planned = false;
  {
    std::lock_guard lock(mutex_);
    plan = averages_;
    planned = options_.mode == PipelineMode::double_buffer &&
              std::min(measured_exchanges_, measured_computes_) >= static_cast<std::uint64_t>(options_.warmup_steps);
  }
  const std::span<const std::byte> grads(buffer.grads.get(), bytes_);
  const std::span<std::byte> weights(buffer.weights.get(), bytes_);
  // The pull should end (1 - safety) x compute after compute started on the other buffer, also when it is
  // slower than average: plan it at mean + 2 x mean deviation. The push goes first, at once (other workers
  // see it sooner); a bubble only where compute leaves room for push + planned pull, else one pipelined
  // exchange, which ends soonest.
  const double planned_pull_s = plan.pull_s + 2 * plan.pull_deviation_s;
  const double room_s = (1 - options_.safety) * plan.compute_s;
  const bool split = planned && options_.adaptive_pull && room_s > plan.push_s + planned_pull_s;
  const auto pull_start_target =
      submitted + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(room_s - planned_pull_s));

  const auto t0 = Clock::now();
  double push_s = 0, pull_s = 0, bubble_s = 0;
  if (split) {
    if (Status s = cluster_.push(grads); !s.ok()) return Status::Error(s.code(), "double buffer: push: " + s.message());
    push_s = seconds(Clock::now() - t0);
    if (const auto now = Clock::now(); pull_start_target > now) {
      std::this_thread::sleep_until(pull_start_target);
      bubble_s = seconds(Clock::now() - now);
    }
    const auto pull_t0 = Clock::now();
    if (Status s = cluster_.pull(weights); !s.ok())
      return Status::Error(s.code(), "double buffer: pull: " + s.message());
    pull_s = seconds(Clock::now() - pull_t0);
  } else {
    if (Status s = cluster_.exchange(grads, weights); !s.ok())
      return Status::Error(s.code(), "double buffer: exchange (push and pull): " + s.message());
    push_s = pull_s = seconds(Clock::now() - t0);
  }
  buffer.pulled_at = Clock::now();
  buffer.push_s = push_s;
  buffer.pull_s = pull_s;
  buffer.bubble_s = bubble_s;
  buffer.pipelined = !split;
  std::lock_guard lock(mutex_);
  blend(averages_.push_s, push_s, options_.smoothing, measured_exchanges_);
  blend_deviation(averages_.pull_deviation_s, averages_.pull_s, pull_s, options_.smoothing, measured_exchanges_);
  blend(averages_.pull_s, pull_s, options_.smoothing, measured_exchanges_);
  ++measured_exchanges_;
  return Status::Ok();
}

void DoubleBuffer::communicate() {
  for (;;) {
    ModelBuffer* buffer = nullptr;
    Clock::time_point submitted;
    {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [&] { return stopping_ || submitted_ != nullptr; });
      if (submitted_ == nullptr) return;
      buffer = std::exchange(submitted_, nullptr);
      submitted = submitted_at_;
    }
    Status s = Status::Ok();
    try {
      s = exchange(*buffer, submitted);
    } catch (const std::exception& e) {  // e.g. bad_alloc: an error value, never an escape
      s = Status::Error(std::string("double buffer: exchange: ") + e.what());
    }
    {
      std::lock_guard lock(mutex_);
      if (!s.ok() && !exchange_error_) exchange_error_ = std::move(s);
      in_flight_ = nullptr;
    }
    cv_.notify_all();
  }
}

Result<StepMetrics> DoubleBuffer::step() {
  if (failure_) return *failure_;
  const auto called = Clock::now();
  StepMetrics m;
  m.compute_s = seconds(called - compute_started_);
  {
    std::lock_guard lock(mutex_);
    blend(averages_.compute_s, m.compute_s, options_.smoothing, measured_computes_);
    m.step = ++measured_computes_;  // every step measures one compute
  }
  ModelBuffer* next = compute_;
  if (options_.mode == PipelineMode::sequential) {
    if (Status s = exchange(*compute_, called); !s.ok()) {
      failure_ = s;
      return s;
    }
  } else {
    // The other buffer's exchange (started by the previous step) must be over before anything else is
    // submitted: the communication thread holds one buffer at a time.
    ModelBuffer* other = compute_ == &buffers_[0] ? &buffers_[1] : &buffers_[0];
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return in_flight_ == nullptr; });
    if (exchange_error_) {
      failure_ = *exchange_error_;
      return *failure_;
    }
    submitted_ = in_flight_ = compute_;
    submitted_at_ = called;
    lock.unlock();
    cv_.notify_all();
    next = other;
  }
  const auto now = Clock::now();
  if (Trace* trace = cluster_.trace(); trace != nullptr) {
    trace->span("compute", Trace::kLoopLane, compute_started_, called);
    trace->span("wait", Trace::kLoopLane, called, now);
  }
  m.stall_s = seconds(now - called);
  m.bubble_s = next->bubble_s;
  m.push_s = next->push_s;
  m.pull_s = next->pull_s;
  m.weight_age_s = seconds(now - next->pulled_at);
  m.pipelined = next->pipelined;
  compute_ = next;
  compute_started_ = Clock::now();
  return m;
}

}  // namespace blockps
