// Double buffering and adaptive pull (iRDMA Fig. 4a, 3c/3d): a worker's training step overlapped with its
// push and pull.
//
//   auto db = blockps::DoubleBuffer::create(*cluster, {});     // pulls the weights into both buffers
//   for (;;) {
//     compute(db.value()->weights(), db.value()->grads());    // forward/backward on the compute buffer
//     auto m = db.value()->step();                             // hand it over, get the other one back
//     if (!m.ok()) ...;                                        // m->stall_s, m->weight_age_s, ...
//   }
//
// Two model buffers, each a weights + gradients pair. step() hands the compute buffer (its gradients filled)
// to the communication thread, which pushes the gradients and pulls fresh weights into the same buffer, and
// returns the other buffer, whose exchange was started by the previous step(): the swap exchanges two
// pointers, no bytes are copied. A buffer is handed back to compute only after its pull has completed on
// every shard, so compute never sees a half-pulled buffer. The weights compute uses are one step older than
// with push-then-pull (the usual staleness of double buffering).
//
// Adaptive pull: moving averages of compute time, push and pull latency. Pulling right after the push
// delivers weights that then wait for compute to finish (their age grows with the slack); the exchange
// instead sleeps a "bubble" before the pull so that the pull ends just before compute does:
//     bubble = submit time + (1 - safety) x compute - planned pull - (time the push ended)
// where planned pull = mean pull + 2 x its mean deviation (as TCP plans a retransmit timeout from RTT and RTTVAR,
// RFC 6298): planning from the mean alone stalls compute on every pull slower than average.
// Where that leaves no room for a bubble (compute shorter than push + planned pull), during warm-up, without
// adaptive pull, and always in sequential mode, the push and the pull are one pipelined exchange
// (Cluster::exchange: each block's READ follows its WRITE while later WRITEs are in flight, both directions of
// every link busy, one session per shard), which is then also what push_s and pull_s measure.
//
// Errors: an exchange that fails (I/O on a shard) is returned by the step() that would have handed its buffer
// back; the DoubleBuffer is then failed and every later step() returns the same error.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <thread>

#include "blockps/cluster.h"

namespace blockps {

enum class PipelineMode {
  sequential,     // one buffer: step() pushes and then pulls it, blocking (the no-overlap baseline)
  double_buffer,  // two buffers: the exchange of one overlaps compute on the other
};

struct PipelineOptions {
  PipelineMode mode = PipelineMode::double_buffer;
  // Sleep a bubble before the pull so the weights land as compute ends (double_buffer only), where compute
  // leaves room for one; otherwise (and with this off) push and pull are one pipelined exchange.
  bool adaptive_pull = true;
  // Weight of the newest sample in the moving averages, in (0, 1].
  double smoothing = 0.2;
  // The pull aims to end this fraction of compute time before compute does, in [0, 1).
  double safety = 0.05;
  // Steps measured (with pipelined exchanges) before the first bubble, >= 1.
  int warmup_steps = 3;
};

// One step, as seen by compute. All times in seconds.
struct StepMetrics {
  std::uint64_t step = 0;   // 1 for the first step() call
  double compute_s = 0;     // from the previous step() return (or create) to this step() call
  double stall_s = 0;       // this step() waiting for communication (sequential: the push and pull themselves)
  double bubble_s = 0;      // the sleep before the pull of the buffer handed back
  double push_s = 0;        // the push latency of the buffer handed back (pipelined: the whole exchange)
  double pull_s = 0;        // its pull latency (pipelined: the whole exchange)
  double weight_age_s = 0;  // from its pull's completion to this step()'s return (the compute that uses it)
  bool pipelined = false;   // its push and pull were one pipelined exchange (no bubble)
};

// The moving averages adaptive pull plans with (0 until measured).
struct PipelineAverages {
  double compute_s = 0;
  double push_s = 0;
  double pull_s = 0;
  double pull_deviation_s = 0;  // moving mean of |pull - pull_s|
};

// Checks the options: an empty string when they are valid, else what is wrong (key, value seen, allowed).
std::string check_pipeline_options(const PipelineOptions& options);

class DoubleBuffer {
 public:
  // Allocates the buffers (model_bytes() each, 4 KiB aligned for O_DIRECT transports), pulls the current
  // weights into them (blocking) and starts the communication thread. `cluster` must outlive the DoubleBuffer.
  // Errors: invalid options (invalid_argument), the pulls' I/O errors.
  static Result<std::unique_ptr<DoubleBuffer>> create(Cluster& cluster, const PipelineOptions& options);
  // Waits for the exchange in flight, then stops the communication thread.
  ~DoubleBuffer();
  DoubleBuffer(const DoubleBuffer&) = delete;
  DoubleBuffer& operator=(const DoubleBuffer&) = delete;

  // The compute buffer: weights to compute with, and where the gradients go (model_bytes() each, wire
  // format). Valid until the next step(); the gradients are pushed as they are (zero them yourself).
  std::span<std::byte> weights();
  std::span<std::byte> grads();

  // Ends compute on the current buffer: pushes its gradients and pulls fresh weights (in the background for
  // double_buffer), and makes the other buffer the compute buffer.
  Result<StepMetrics> step();

  const PipelineOptions& options() const { return options_; }
  const Cluster& cluster() const { return cluster_; }
  PipelineAverages averages() const;

 private:
  using Clock = std::chrono::steady_clock;
  struct ModelBuffer;  // a weights + gradients pair and its last exchange

  DoubleBuffer(Cluster& cluster, const PipelineOptions& options);
  // Push the buffer's gradients and pull weights into it: the plan of adaptive pull, with `submitted` the
  // time compute handed it over. Runs on the communication thread (or in step() when sequential).
  Status exchange(ModelBuffer& buffer, Clock::time_point submitted);
  void communicate();

  Cluster& cluster_;
  PipelineOptions options_;
  std::size_t bytes_ = 0;
  std::unique_ptr<ModelBuffer[]> buffers_;  // two
  ModelBuffer* compute_ = nullptr;
  Clock::time_point compute_started_{};
  std::optional<Status> failure_;

  mutable std::mutex mutex_;
  std::condition_variable cv_;
  PipelineAverages averages_;  // guarded by mutex_
  std::uint64_t measured_exchanges_ = 0;
  std::uint64_t measured_computes_ = 0;
  ModelBuffer* submitted_ = nullptr;  // handed to the communication thread, not yet taken
  Clock::time_point submitted_at_{};
  ModelBuffer* in_flight_ = nullptr;  // being exchanged (or submitted); null when none
  std::optional<Status> exchange_error_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace blockps
