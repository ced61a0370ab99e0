// `blockps bench`: whole-model pushes and/or pulls back to back for a while each, with a progress line on
// stderr, then a summary table (throughput, and latency per whole-model operation).
//
// Pushes send a zero gradient: all-zero bytes are 0.0 in every wire dtype (f32, bf16, f16), so no conversion is
// needed, and sgd/momentum/adam/sum leave the weights as they are (adamw's decoupled weight decay still
// shrinks them, and adam's step counters advance: bench a scratch cluster, or `save` first).
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "blockps/cluster.h"
#include "client/cli/commands.h"
#include "client/cli/table.h"

namespace blockps::cli {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// MB = 10^6 bytes, as storage benchmarks count.
double mb_per_s(std::uint64_t bytes, double seconds) {
  return seconds > 0 ? static_cast<double>(bytes) / 1e6 / seconds : 0.0;
}

struct PhaseResult {
  const char* op = "";
  std::uint64_t iterations = 0;
  std::uint64_t bytes = 0;
  double seconds = 0;
  std::vector<double> latencies_s;  // one per whole-model operation
};

// The progress line, rewritten in place ("\r") about every 0.5 s by its own thread, so that the measured loop
// never stops to print.
class ProgressLine {
 public:
  ProgressLine(const char* op, Clock::time_point start, const std::atomic<std::uint64_t>& bytes, bool enabled)
      : op_(op), start_(start), bytes_(bytes), enabled_(enabled) {
    if (enabled_) thread_ = std::thread([this] { run(); });
  }
  // Stops the thread and leaves the final figures on their own line.
  void finish() {
    if (!enabled_) return;
    {
      std::lock_guard lock(mutex_);
      done_ = true;
    }
    wake_.notify_all();
    thread_.join();
    print();
    std::cerr << "\n";
    enabled_ = false;
  }
  ~ProgressLine() {
    if (enabled_) finish();
  }
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

 private:
  void run() {
    std::unique_lock lock(mutex_);
    while (!wake_.wait_for(lock, std::chrono::milliseconds(500), [this] { return done_; })) print();
  }
  void print() const {
    const double elapsed = seconds_since(start_);
    std::cerr << "\rbench " << op_ << ": " << format_fixed(elapsed, 1) << " s, "
              << format_fixed(mb_per_s(bytes_.load(), elapsed), 1) << " MB/s so far   " << std::flush;
  }

  const char* op_;
  Clock::time_point start_;
  const std::atomic<std::uint64_t>& bytes_;
  bool enabled_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool done_ = false;
  std::thread thread_;
};

const char* op_name(BenchOp op) {
  switch (op) {
    case BenchOp::push:
      return "push";
    case BenchOp::pull:
      return "pull";
    case BenchOp::step:
      return "step";
    case BenchOp::exchange:
      return "exchange";
    case BenchOp::both:
      break;
  }
  return "both";
}

// One whole-model operation. step and exchange push the zeros of `buffer` and pull into `pulled`, so that every
// push stays a zero gradient.
Status run_once(Cluster& cluster, BenchOp op, std::vector<std::byte>& buffer, std::vector<std::byte>& pulled) {
  switch (op) {
    case BenchOp::push:
      return cluster.push(buffer);
    case BenchOp::pull:
      return cluster.pull(buffer);
    case BenchOp::step:
      if (Status s = cluster.push(buffer); !s.ok()) return s;
      return cluster.pull(pulled);
    case BenchOp::exchange:
      return cluster.exchange(buffer, pulled);
    case BenchOp::both:
      break;
  }
  return Status::Error("bench: no such single operation");
}

// Repeats one whole-model operation until `seconds` have passed (at least once), or `iterations` times, after
// `warmup` uncounted ones. Error: the first failure.
Result<PhaseResult> run_phase(Cluster& cluster, BenchOp op, const BenchOptions& options,
                              std::vector<std::byte>& buffer) {
  PhaseResult result;
  result.op = op_name(op);
  std::vector<std::byte> pulled(op == BenchOp::step || op == BenchOp::exchange ? buffer.size() : 0);
  // Bytes the link carries per operation: a step or an exchange pushes and pulls the model.
  const std::uint64_t op_bytes = buffer.size() * (pulled.empty() ? 1 : 2);
  auto failed = [&](std::uint64_t iteration, const char* what, const Status& s) {
    return Status::Error("bench " + std::string(result.op) + " (" + what + " " + std::to_string(iteration) +
                         "): " + s.message());
  };
  for (std::uint64_t i = 0; i < options.warmup; ++i)
    if (Status s = run_once(cluster, op, buffer, pulled); !s.ok()) return failed(i + 1, "warm-up", s);
  std::atomic<std::uint64_t> bytes{0};
  const Clock::time_point start = Clock::now();
  ProgressLine progress(result.op, start, bytes, options.progress);
  for (;;) {
    const Clock::time_point t0 = Clock::now();
    if (Status s = run_once(cluster, op, buffer, pulled); !s.ok()) {
      progress.finish();
      return failed(result.iterations + 1, "iteration", s);
    }
    result.latencies_s.push_back(seconds_since(t0));
    ++result.iterations;
    bytes += op_bytes;
    if (options.iterations != 0 ? result.iterations >= options.iterations : seconds_since(start) >= options.seconds)
      break;
  }
  result.seconds = seconds_since(start);
  result.bytes = bytes.load();
  progress.finish();
  return result;
}

// Nearest-rank percentile of sorted values.
double percentile(const std::vector<double>& sorted, double q) {
  const auto rank = static_cast<std::size_t>(std::ceil(q * static_cast<double>(sorted.size())));
  return sorted[std::clamp<std::size_t>(rank, 1, sorted.size()) - 1];
}

// The CPU-seconds (user + system, every thread) this process has used so far: bench/cluster divides them by the
// bytes the worker's link carried, for the CPU cost per byte against gloo's and iperf3's.
double process_cpu_seconds() {
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) != 0) return 0.0;
  const auto seconds = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6;
  };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

// {"op": "exchange", "iterations": N, "warmup": K, "model_bytes": B, "seconds": [...], "median_s": M,
//  "cpu_s": the process's CPU-seconds so far (its earlier ops included)}
void print_json(const PhaseResult& r, std::uint64_t model_bytes, std::uint64_t warmup) {
  std::vector<double> sorted = r.latencies_s;
  std::sort(sorted.begin(), sorted.end());
  nlohmann::json j = {{"op", r.op},
                      {"iterations", r.iterations},
                      {"warmup", warmup},
                      {"model_bytes", model_bytes},
                      {"seconds", r.latencies_s},
                      {"median_s", percentile(sorted, 0.5)},
                      {"cpu_s", process_cpu_seconds()}};
  std::cout << j.dump() << std::endl;
}

void print_summary(const std::vector<PhaseResult>& results) {
  TextTable table({{"op", TextTable::Align::left},
                   {"iterations"},
                   {"bytes"},
                   {"seconds"},
                   {"MB/s"},
                   {"mean ms"},
                   {"p50 ms"},
                   {"p99 ms"}});
  for (const PhaseResult& r : results) {
    std::vector<double> sorted = r.latencies_s;
    std::sort(sorted.begin(), sorted.end());
    double total = 0;
    for (double l : sorted) total += l;
    table.add_row({r.op, std::to_string(r.iterations), format_bytes(r.bytes), format_fixed(r.seconds, 2),
                   format_fixed(mb_per_s(r.bytes, r.seconds), 1),
                   format_fixed(total / static_cast<double>(sorted.size()) * 1e3, 3),
                   format_fixed(percentile(sorted, 0.50) * 1e3, 3), format_fixed(percentile(sorted, 0.99) * 1e3, 3)});
  }
  table.print(std::cout);
}

// What the run's sessions recovered from, per shard (Cluster::recovery_counters; each kind was logged on stderr as
// it happened): a long bench through restarts or a flaky link says how often it reconnected or lost a push.
void print_recovery(Cluster& c) {
  auto counters = c.recovery_counters();
  if (!counters.ok()) return;
  TextTable table({{"shard", TextTable::Align::left},
                   {"commands"},
                   {"reconnects"},
                   {"pushes given up"},
                   {"UNIT ATTENTION resent"}});
  for (std::size_t i = 0; i < counters.value().size(); ++i) {
    const LuQueueCounters& k = counters.value()[i];
    table.add_row({c.config().shards[i].name, std::to_string(k.commands), std::to_string(k.reconnects),
                   std::to_string(k.unanswered_writes_dropped), std::to_string(k.unit_attentions_resent)});
  }
  table.print(std::cout);
}

}  // namespace

int run_bench(const std::string& cluster_file, const BenchOptions& options) {
  auto cluster = Cluster::open(cluster_file, OpenOptions::of_job(options.job));
  if (!cluster.ok()) {
    print_error(cluster.message());
    return kExitFailed;
  }
  Cluster& c = *cluster.value();
  std::vector<BenchOp> phases;
  if (options.op == BenchOp::both) {
    phases = {BenchOp::push, BenchOp::pull};
  } else {
    phases = {options.op};
  }

  if (!options.json) {
    std::cout << "bench: model " << format_bytes(c.model_bytes()) << " (" << to_string(c.config().model.dtype) << ", "
              << c.config().shards.size() << " shards, " << to_string(c.config().layout) << "), "
              << (options.iterations != 0 ? std::to_string(options.iterations) + " iterations"
                                          : format_fixed(options.seconds, 2) + " s")
              << " per op; pushes send a zero gradient" << std::endl;
  }
  std::vector<PhaseResult> results;
  for (BenchOp op : phases) {
    // Zeros for the pushes (0.0 in every dtype); the pulls overwrite the same buffer.
    std::vector<std::byte> buffer(c.model_bytes());
    auto phase = run_phase(c, op, options, buffer);
    if (!phase.ok()) {
      if (!results.empty()) print_summary(results);
      print_error(phase.message());
      return kExitFailed;
    }
    if (options.json) print_json(phase.value(), c.model_bytes(), options.warmup);
    results.push_back(std::move(phase.value()));
  }
  if (!options.json) {
    print_summary(results);
    print_recovery(c);
  }
  return kExitOk;
}

}  // namespace blockps::cli
