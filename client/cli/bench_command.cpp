// `blockps bench`: whole-model pushes and/or pulls back to back for a while each, with a progress line on
// stderr, then a summary table (throughput, and latency per whole-model operation).
//
// Pushes send a zero gradient: all-zero bytes are 0.0 in every wire dtype (f32, bf16, f16), so no conversion is
// needed, and sgd/momentum/adam/sum leave the weights as they are (adamw's decoupled weight decay still
// shrinks them, and adam's step counters advance: bench a scratch cluster, or `save` first).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <iostream>
#include <mutex>
#include <thread>
#include <vector>

#include "client/blockps.h"
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

// Repeats one whole-model operation until `seconds` have passed (at least once). Error: the first failure.
Result<PhaseResult> run_phase(Cluster& cluster, BenchOp op, const BenchOptions& options,
                              std::vector<std::byte>& buffer) {
  PhaseResult result;
  result.op = op == BenchOp::push ? "push" : "pull";
  std::atomic<std::uint64_t> bytes{0};
  const Clock::time_point start = Clock::now();
  ProgressLine progress(result.op, start, bytes, options.progress);
  for (;;) {
    const Clock::time_point t0 = Clock::now();
    const Status s = op == BenchOp::push ? cluster.push(buffer) : cluster.pull(buffer);
    if (!s.ok()) {
      progress.finish();
      return Status::Error("bench " + std::string(result.op) + " (iteration " + std::to_string(result.iterations + 1) +
                           "): " + s.message());
    }
    result.latencies_s.push_back(seconds_since(t0));
    ++result.iterations;
    bytes += buffer.size();
    if (seconds_since(start) >= options.seconds) break;
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

}  // namespace

int run_bench(const std::string& cluster_file, const BenchOptions& options) {
  auto cluster = Cluster::open(cluster_file);
  if (!cluster.ok()) {
    print_error(cluster.message());
    return kExitFailed;
  }
  Cluster& c = *cluster.value();
  std::vector<BenchOp> phases;
  if (options.op != BenchOp::pull) phases.push_back(BenchOp::push);
  if (options.op != BenchOp::push) phases.push_back(BenchOp::pull);

  std::cout << "bench: model " << format_bytes(c.model_bytes()) << " (" << to_string(c.config().model.dtype) << ", "
            << c.config().shards.size() << " shards, " << to_string(c.config().layout) << "), "
            << format_fixed(options.seconds, 2) << " s per op; pushes send a zero gradient" << std::endl;
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
    results.push_back(std::move(phase.value()));
  }
  print_summary(results);
  return kExitOk;
}

}  // namespace blockps::cli
