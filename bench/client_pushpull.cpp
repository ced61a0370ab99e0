// client_pushpull: libblockps push+pull of a whole model through 2 shards, against (1) the same initiator
// code path driving tgt `null` LUs on the same tgtds in the same run (the ceiling), and (2) PyTorch's gloo
// allreduce of the same bytes among the same number of processes (bench/gloo_allreduce.py).
//
//   client_pushpull [--seconds S] [--rounds N] [--model-sizes 64M,256M] [--queue-depth 16] [--max-request 1M]
//                   [--python /usr/bin/python3] [--gloo-script PATH] [--gloo-iterations N] [--no-gloo]
//
// Setup: 2 private tgtds (one per shard, as on separate hosts; both on this host, loopback), each with a blockps
// shard (grad/weights/status LUs, opt=sgd, lr=1e-6, dtype=f32, block=256K, size = model/2) and a tgt `null` LU
// of the same tgtd (target 2). One cluster file for the blockps shards ([client] queue_depth, max_request;
// stripe layout); the null LUs cannot be opened as a Cluster (no status page), so:
//
// Ceiling ("null"): the exact commands the client issues for a push and a pull of the model (the same Layout's
// runs, max_request bytes each, scatter/gather segments into the same model buffer) run by the same function
// the client's libiscsi transport calls (IscsiLun::run_commands at the same queue depth), one thread per
// shard, both shards in parallel, on the null LUs. What the ceiling leaves out is exactly what the client adds:
// Cluster's per-shard I/O threads and operation bookkeeping, and the module's work behind each command.
//
// "rdwr" (diagnostic): the ceiling's code on a stock tgt `rdwr` LU over a tmpfs file (/dev/shm) in each shard's
// tgtd: a backing store that, like ours, copies every byte (no math). client ~ rdwr means the module costs no
// more than the copies any real store makes; the rest of the gap to null is the data moving at all.
// "direct" (diagnostic): the ceiling's code on the blockps grad LUs; client ~ direct means libblockps adds
// nothing and any gap to the ceiling is in the shards (module + tgtd).
// Figures: time per push+pull of the whole model (push() then pull(), blocking, as a worker does in a step), throughput
// = 2 x model bytes / that time. 1 worker: null and client alternate per round, ratio = median of per-round ratios. 2
// workers: two threads, each with its own Cluster and initiator IQN, pushing and pulling concurrently; per-worker time
// per push+pull is compared with gloo's time per allreduce of the same bytes among 2 processes (ratio gloo / blockps, >
// 1: blockps faster). The posix transport (/dev/sdX through the kernel initiator) is not measured: see the message it
// prints. Exit status is non-zero only when the benchmark could not run. Needs root, tgt and bs_blockps.so installed.
#include <sys/utsname.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_report.h"
#include "blockps/cluster.h"
#include "blockps/layout.h"
#include "client/transport/iscsi_lun.h"
#include "contract/byte_size.h"
#include "tests/support/blockps_shard.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tgtd_instance.h"

#ifndef BLOCKPS_SOURCE_DIR
#define BLOCKPS_SOURCE_DIR "."
#endif

namespace {

using namespace blockps;
using namespace blockps::testing;
using Clock = std::chrono::steady_clock;

constexpr int kShards = 2;
constexpr int kWorkers = 2;
constexpr std::uint64_t kBlockBytes = 256 << 10;
constexpr double kCeilingTarget = 0.85;

std::string shard_iqn(int s) { return "iqn.2026-11.io.blockps:bench-shard" + std::to_string(s); }
std::string null_iqn(int s) { return "iqn.2026-11.io.blockps:bench-null" + std::to_string(s); }
std::string rdwr_iqn(int s) { return "iqn.2026-11.io.blockps:bench-rdwr" + std::to_string(s); }
std::string initiator_iqn(const std::string& who, int w) {
  return "iqn.2026-11.io.blockps:bench-" + who + std::to_string(w);
}

struct Options {
  double seconds = 3.0;
  int rounds = 3;
  int queue_depth = 16;
  std::uint64_t max_request = 1u << 20;
  std::vector<std::uint64_t> model_sizes = {64ull << 20, 256ull << 20};
  std::string python = "/usr/bin/python3";
  std::string gloo_script = std::string(BLOCKPS_SOURCE_DIR) + "/bench/gloo_allreduce.py";
  int gloo_iterations = 10;
  bool gloo = true;
};

Status parse_args(int argc, char** argv, Options& o, bool& exit_now) {
  CLI::App app{
      "blockps client_pushpull: libblockps push+pull of a whole model through 2 shards, against tgt null "
      "LUs driven by the same initiator code in the same run, and against gloo allreduce"};
  std::string sizes, max_request = format_byte_size(o.max_request);
  app.add_option("--seconds", o.seconds, "seconds per figure")->check(CLI::PositiveNumber);
  app.add_option("--rounds", o.rounds, "rounds of null/client (1 worker); ratios are medians")
      ->check(CLI::Range(1, 1000));
  app.add_option("--model-sizes", sizes, "comma-separated model sizes (K/M/G), multiples of 2 x 256K");
  app.add_option("--queue-depth", o.queue_depth, "[client] queue_depth: commands in flight per shard")
      ->check(CLI::Range(1, 128));
  app.add_option("--max-request", max_request, "[client] max_request (multiple of 256K)");
  app.add_option("--python", o.python, "python with torch (Debian python3-torch)");
  app.add_option("--gloo-script", o.gloo_script, "path of bench/gloo_allreduce.py");
  app.add_option("--gloo-iterations", o.gloo_iterations, "timed allreduces per size")->check(CLI::Range(1, 10000));
  app.add_flag(
      "--no-gloo", [&](std::int64_t) { o.gloo = false; }, "skip the gloo comparison");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    std::cout << app.help();
    exit_now = true;
    return Status::Ok();
  } catch (const CLI::ParseError& e) {
    return bench::usage_error(e.what());
  }
  if (!parse_byte_size(max_request, o.max_request) || o.max_request == 0 || o.max_request % kBlockBytes != 0)
    return bench::usage_error("--max-request needs a multiple of 256K, got '" + max_request + "'");
  if (!sizes.empty()) {
    o.model_sizes.clear();
    std::stringstream list(sizes);
    for (std::string item; std::getline(list, item, ',');) {
      std::uint64_t b = 0;
      if (!parse_byte_size(item, b) || b == 0 || b % (kShards * kBlockBytes) != 0)
        return bench::usage_error("--model-sizes needs multiples of 512K, got '" + item + "'");
      o.model_sizes.push_back(b);
    }
  }
  return Status::Ok();
}

int fail(const std::string& msg, const TgtdInstance* tgtds = nullptr) {
  return bench::fail("client_pushpull", msg,
                     tgtds == nullptr ? std::span<const TgtdInstance>{} : std::span(tgtds, kShards));
}

// One worker step (push then pull of the whole model).
using Step = std::function<Status()>;

struct Timed {
  std::uint64_t steps = 0;
  double seconds = 0;
  Status error = Status::Ok();
  double seconds_per_step() const { return steps > 0 ? seconds / static_cast<double>(steps) : 0; }
};

// Runs `step` until `seconds` passed (at least 2 steps).
Timed repeat(const Step& step, double seconds) {
  Timed t;
  const auto start = Clock::now();
  for (;;) {
    if (Status e = step(); !e.ok()) {
      t.error = e;
      return t;
    }
    ++t.steps;
    t.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (t.seconds >= seconds && t.steps >= 2) return t;
  }
}

// The ceiling worker: one libiscsi session per null LU, and the commands the client builds for a whole-model
// push (WRITEs) and pull (READs) from the same layout, into its own model buffers.
class NullWorker {
 public:
  // Which LUs: the null LUs (the ceiling), the shards' grad LUs ("direct"), or the rdwr LUs on tmpfs ("rdwr").
  enum class Target { null, direct, rdwr };
  Status connect(const TgtdInstance* tgtds, int worker, Target target = Target::null) {
    static constexpr const char* kNames[] = {"null", "direct", "rdwr"};
    for (int s = 0; s < kShards; ++s) {
      const std::string iqn = target == Target::null     ? null_iqn(s)
                              : target == Target::direct ? shard_iqn(s)
                                                         : rdwr_iqn(s);
      if (Status st = luns_[s].connect(tgtds[s].url(iqn, 1), initiator_iqn(kNames[static_cast<int>(target)], worker));
          !st.ok())
        return st;
    }
    return Status::Ok();
  }
  void build(const Layout& layout, std::uint64_t max_request, std::vector<std::byte>& grads,
             std::vector<std::byte>& weights) {
    for (auto& c : push_) c.clear();
    for (auto& c : pull_) c.clear();
    for (const ShardRun& run : layout.runs(0, layout.block_count(), max_request)) {
      LuCommand w{IoDirection::write, run.shard_offset, {}}, r{IoDirection::read, run.shard_offset, {}};
      for (const ModelPiece& p : run.pieces) {
        w.segments.push_back({grads.data() + p.model_offset, p.bytes});
        r.segments.push_back({weights.data() + p.model_offset, p.bytes});
      }
      push_[run.shard].push_back(std::move(w));
      pull_[run.shard].push_back(std::move(r));
    }
  }
  // Both shards in parallel (one thread per shard, as the client's I/O threads), push then pull.
  Status step(int queue_depth) {
    for (auto* commands : {&push_, &pull_}) {
      const auto t0 = Clock::now();
      Status errors[kShards] = {Status::Ok(), Status::Ok()};
      std::thread other([&] {
        CommandBatchResult r = luns_[1].run_commands((*commands)[1], {.depth = queue_depth});
        if (!r.ok()) errors[1] = Status::Error(StatusCode::io, "null LU 1: " + r.error.describe());
      });
      CommandBatchResult r = luns_[0].run_commands((*commands)[0], {.depth = queue_depth});
      if (!r.ok()) errors[0] = Status::Error(StatusCode::io, "null LU 0: " + r.error.describe());
      other.join();
      for (const Status& e : errors)
        if (!e.ok()) return e;
      (commands == &push_ ? push_seconds : pull_seconds) += std::chrono::duration<double>(Clock::now() - t0).count();
    }
    return Status::Ok();
  }
  double push_seconds = 0, pull_seconds = 0;  // accumulated over steps, for the push / pull split

 private:
  IscsiLun luns_[kShards];
  std::vector<LuCommand> push_[kShards], pull_[kShards];
};

Status client_step(Cluster& c, std::span<const std::byte> grads, std::span<std::byte> weights, double& push_seconds,
                   double& pull_seconds) {
  const auto t0 = Clock::now();
  if (Status s = c.push(grads); !s.ok()) return Status::Error(s.code(), "push: " + s.message());
  const auto t1 = Clock::now();
  if (Status s = c.pull(weights); !s.ok()) return Status::Error(s.code(), "pull: " + s.message());
  push_seconds += std::chrono::duration<double>(t1 - t0).count();
  pull_seconds += std::chrono::duration<double>(Clock::now() - t1).count();
  return Status::Ok();
}

// Runs every step concurrently, one thread each, for `seconds`; results in order.
std::vector<Timed> concurrently(const std::vector<Step>& steps, double seconds) {
  std::vector<Timed> out(steps.size());
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < steps.size(); ++i) threads.emplace_back([&, i] { out[i] = repeat(steps[i], seconds); });
  for (auto& t : threads) t.join();
  return out;
}

// Runs the gloo script: its seconds per allreduce.
Result<double> gloo_seconds(const Options& o, std::uint64_t bytes) {
  RunOptions ro;
  ro.timeout = std::chrono::milliseconds(600'000);
  CommandResult r = run_command({o.python, o.gloo_script, "--bytes", std::to_string(bytes), "--world-size",
                                 std::to_string(kWorkers), "--iterations", std::to_string(o.gloo_iterations)},
                                ro);
  if (!r.ok()) return Status::Error(StatusCode::io, r.describe());
  // The last line holding "seconds_per_allreduce": {"...": X, ...}
  std::istringstream in(r.output);
  double value = -1;
  for (std::string line; std::getline(in, line);) {
    const std::string key = "\"seconds_per_allreduce\":";
    auto k = line.find(key);
    if (k == std::string::npos) continue;
    value = std::strtod(line.c_str() + k + key.size(), nullptr);
  }
  if (value <= 0)
    return Status::Error(StatusCode::io, "no seconds_per_allreduce in its output: " + tail_of(r.output, 500));
  return value;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  bool exit_now = false;
  if (Status s = parse_args(argc, argv, opt, exit_now); !s.ok()) return fail(s.message());
  if (exit_now) return 0;

  bench::print_run_header("blockps client_pushpull");
  if (Status s = bench::preflight(); !s.ok()) return fail(s.message());

  // Is gloo runnable? (checked once, up front)
  std::string gloo_skip;
  if (!opt.gloo) {
    gloo_skip = "--no-gloo";
  } else if (::access(opt.python.c_str(), X_OK) != 0) {
    gloo_skip = opt.python + " not found";
  } else if (::access(opt.gloo_script.c_str(), R_OK) != 0) {
    gloo_skip = opt.gloo_script + " not found (--gloo-script)";
  } else {
    CommandResult r =
        run_command({opt.python, "-c",
                     "import torch, torch.distributed as d; assert d.is_available() and d.is_gloo_available(); "
                     "print(torch.__version__)"});
    if (!r.ok()) {
      gloo_skip = "torch with gloo not importable by " + opt.python +
                  " (apt-get install -y --no-install-recommends python3-torch): " + tail_of(r.output, 300);
    } else {
      std::string v = r.output;
      while (!v.empty() && (v.back() == '\n' || v.back() == '\r')) v.pop_back();
      std::cout << "gloo: torch " << v << " (" << opt.python << "), " << kWorkers << " processes on localhost\n";
    }
  }
  if (!gloo_skip.empty()) std::cout << "gloo: SKIPPED: " << gloo_skip << "\n";

  std::cout << "posix transport: NOT MEASURED: it needs the LUs as /dev/sdX through the kernel iSCSI initiator "
               "(open-iscsi), which these machines do not provide; a loop device or file would not be the same "
               "path, so no figure is faked\n";
  std::cout << "ceiling: the client's own commands for the model (same layout runs of <= "
            << format_byte_size(opt.max_request) << ", same buffers) through IscsiLun::run_commands at queue depth "
            << opt.queue_depth
            << " (the call the libiscsi transport makes), one thread per shard, on a tgt null LU "
               "in each shard's tgtd\n";

  struct Row {
    std::uint64_t model = 0;
    double null1 = 0, client1 = 0, ratio1 = 0;  // 1 worker: MB/s medians, median ratio
    double direct1 = 0;                         // 1 worker: ceiling's code on the blockps LUs, MB/s median
    double rdwr1 = 0;                           // 1 worker: ceiling's code on rdwr LUs over tmpfs, MB/s median
    double push_ratio = 0, pull_ratio = 0;      // 1 worker: push / null write, pull / null read (all rounds)
    double client2_s = 0, null2_s = 0;          // 2 workers: seconds per push+pull per worker
    double gloo_s = -1;                         // -1: not measured (skipped or failed)
  };
  std::vector<Row> rows;

  for (std::uint64_t model : opt.model_sizes) {
    Row row;
    row.model = model;
    const std::uint64_t shard_bytes = model / kShards;
    TempDir dir;
    if (Status s = dir.create("blockps-client-pushpull-"); !s.ok()) return fail(s.message());
    TempDir shm;  // the rdwr LUs' files: in memory, like the shards
    if (Status s = shm.create("blockps-client-pushpull-", "/dev/shm"); !s.ok()) return fail(s.message());
    TgtdInstance tgtds[kShards];
    TgtdOptions tgtd_options;
    tgtd_options.environment.push_back(std::string("GLIBC_TUNABLES=") + kTgtdGlibcTunables);
    const std::string shard_opts = "size=" + std::to_string(shard_bytes) + ";block=" + std::to_string(kBlockBytes) +
                                   ";dtype=f32;opt=sgd;lr=0.000001";
    for (int s = 0; s < kShards; ++s) {
      if (Status st = tgtds[s].start(tgtd_options); !st.ok()) return fail(st.message(), tgtds);
      if (Status st =
              add_blockps_shard(tgtds[s], 1, shard_iqn(s), dir.path("shard" + std::to_string(s) + ".ckpt"), shard_opts);
          !st.ok())
        return fail(st.message(), tgtds);
      for (auto r : {tgtds[s].add_target(2, null_iqn(s)), tgtds[s].add_lu(2, 1, "null", "null")})
        if (!r.ok()) return fail(r.describe(), tgtds);
      const std::string rdwr_file = shm.path("rdwr" + std::to_string(s) + ".img");
      if (Status st = make_file(rdwr_file, shard_bytes); !st.ok()) return fail(st.message(), tgtds);
      for (auto r : {tgtds[s].add_target(3, rdwr_iqn(s)), tgtds[s].add_lu(3, 1, rdwr_file, "rdwr")})
        if (!r.ok()) return fail(r.describe(), tgtds);
    }
    auto cluster_text = [&](int worker) {
      std::string text = "[model]\nsize = " + std::to_string(model) +
                         "\ndtype = \"f32\"\nblock = " + std::to_string(kBlockBytes) +
                         "\n[layout]\nkind = \"stripe\"\n[client]\ninitiator = \"" + initiator_iqn("worker", worker) +
                         "\"\nqueue_depth = " + std::to_string(opt.queue_depth) +
                         "\nmax_request = " + std::to_string(opt.max_request) + "\n";
      for (int s = 0; s < kShards; ++s) {
        text += "[[shard]]\nname = \"shard" + std::to_string(s) + "\"\n";
        for (int lun = 1; lun <= 3; ++lun)
          text += std::string(lun == 1   ? "grad"
                              : lun == 2 ? "weights"
                                         : "status") +
                  " = \"" + tgtds[s].url(shard_iqn(s), lun) + "\"\n";
      }
      return text;
    };
    std::unique_ptr<Cluster> clusters[kWorkers];
    for (int w = 0; w < kWorkers; ++w) {
      const std::string path = dir.path("cluster" + std::to_string(w) + ".toml");
      std::ofstream(path) << cluster_text(w);
      auto c = Cluster::open(path);
      if (!c.ok()) return fail("Cluster::open(" + path + "): " + c.message(), tgtds);
      clusters[w] = std::move(c.value());
    }
    if (clusters[0]->model_bytes() != model) return fail("cluster model_bytes mismatch", tgtds);
    NullWorker nulls[kWorkers];
    NullWorker direct;  // diagnostic: the ceiling's code on the blockps grad LUs (no Cluster in between)
    std::vector<std::byte> grads[kWorkers], weights[kWorkers];
    for (int w = 0; w < kWorkers; ++w) {
      if (Status st = nulls[w].connect(tgtds, w); !st.ok()) return fail(st.message(), tgtds);
      grads[w] = bench::finite_f32_gradients(model, 1234u + static_cast<unsigned>(w));
      weights[w].assign(model, std::byte{0});
      nulls[w].build(clusters[w]->layout(), opt.max_request, grads[w], weights[w]);
    }
    if (Status st = direct.connect(tgtds, 0, NullWorker::Target::direct); !st.ok()) return fail(st.message(), tgtds);
    direct.build(clusters[0]->layout(), opt.max_request, grads[0], weights[0]);
    NullWorker rdwr;  // diagnostic: the ceiling's code on stock rdwr LUs over tmpfs (a store that copies)
    if (Status st = rdwr.connect(tgtds, 0, NullWorker::Target::rdwr); !st.ok()) return fail(st.message(), tgtds);
    rdwr.build(clusters[0]->layout(), opt.max_request, grads[0], weights[0]);
    {  // The null LUs and the shards' weights must be real memory before timing; null LU capacity check.
      std::vector<std::byte> zeros(model);
      if (Status s = clusters[0]->write_weights(zeros); !s.ok()) return fail("write_weights: " + s.message(), tgtds);
    }
    double client_push_s[kWorkers] = {}, client_pull_s[kWorkers] = {};
    std::vector<Step> null_steps, client_steps;
    for (int w = 0; w < kWorkers; ++w) {
      null_steps.push_back([&, w] { return nulls[w].step(opt.queue_depth); });
      client_steps.push_back(
          [&, w] { return client_step(*clusters[w], grads[w], weights[w], client_push_s[w], client_pull_s[w]); });
    }
    // Warm-up: one step each.
    for (int w = 0; w < kWorkers; ++w) {
      for (auto* steps : {&null_steps, &client_steps})
        if (Status e = (*steps)[static_cast<std::size_t>(w)](); !e.ok()) return fail("warm-up: " + e.message(), tgtds);
    }
    const double mb = 2.0 * static_cast<double>(model) / 1e6;  // per step
    std::vector<double> n1, c1, r1, direct_mbps, rdwr_mbps;
    nulls[0].push_seconds = nulls[0].pull_seconds = client_push_s[0] = client_pull_s[0] = 0;
    std::uint64_t null_steps1 = 0, client_steps1 = 0;
    for (int round = 0; round < opt.rounds; ++round) {
      const bool null_first = round % 2 == 0;
      Timed a = repeat(null_first ? null_steps[0] : client_steps[0], opt.seconds);
      if (!a.error.ok()) return fail(a.error.message(), tgtds);
      Timed b = repeat(null_first ? client_steps[0] : null_steps[0], opt.seconds);
      if (!b.error.ok()) return fail(b.error.message(), tgtds);
      null_steps1 += (null_first ? a : b).steps;
      client_steps1 += (null_first ? b : a).steps;
      Timed d = repeat([&] { return direct.step(opt.queue_depth); }, opt.seconds);
      if (!d.error.ok()) return fail("direct: " + d.error.message(), tgtds);
      direct_mbps.push_back(mb / d.seconds_per_step());
      Timed t = repeat([&] { return rdwr.step(opt.queue_depth); }, opt.seconds);
      if (!t.error.ok()) return fail("rdwr: " + t.error.message(), tgtds);
      rdwr_mbps.push_back(mb / t.seconds_per_step());
      const double null_mbps = mb / (null_first ? a : b).seconds_per_step();
      const double client_mbps = mb / (null_first ? b : a).seconds_per_step();
      n1.push_back(null_mbps);
      c1.push_back(client_mbps);
      r1.push_back(client_mbps / null_mbps);
      std::printf(
          "  %s, 1 worker, round %d: null %.0f MB/s, client %.0f MB/s (%.3f), %.1f ms per push+pull; "
          "direct %.0f MB/s (%.3f); rdwr on tmpfs %.0f MB/s (%.3f)\n",
          format_byte_size(model).c_str(), round + 1, null_mbps, client_mbps, r1.back(), 1e3 * mb / client_mbps,
          direct_mbps.back(), direct_mbps.back() / null_mbps, rdwr_mbps.back(), rdwr_mbps.back() / null_mbps);
    }
    {  // Where the time goes: push and pull separately, over all rounds (MB/s = model bytes / time).
      const double m = static_cast<double>(model) / 1e6;
      const double np = m * static_cast<double>(null_steps1) / nulls[0].push_seconds;
      const double nr = m * static_cast<double>(null_steps1) / nulls[0].pull_seconds;
      const double cp = m * static_cast<double>(client_steps1) / client_push_s[0];
      const double cr = m * static_cast<double>(client_steps1) / client_pull_s[0];
      std::printf(
          "  %s, 1 worker, split over all rounds: push %.0f MB/s vs null write %.0f (%.3f); pull %.0f MB/s "
          "vs null read %.0f (%.3f)\n",
          format_byte_size(model).c_str(), cp, np, cp / np, cr, nr, cr / nr);
      row.push_ratio = cp / np;
      row.pull_ratio = cr / nr;
    }
    row.direct1 = bench::median(direct_mbps);
    row.rdwr1 = bench::median(rdwr_mbps);
    row.null1 = bench::median(n1);
    row.client1 = bench::median(c1);
    row.ratio1 = bench::median(r1);
    // 2 workers concurrently: null, then client.
    for (auto* steps : {&null_steps, &client_steps}) {
      std::vector<Timed> t = concurrently(*steps, opt.seconds);
      double sum = 0;
      for (const Timed& x : t) {
        if (!x.error.ok()) return fail(x.error.message(), tgtds);
        sum += x.seconds_per_step();
      }
      (steps == &null_steps ? row.null2_s : row.client2_s) = sum / kWorkers;
    }
    std::printf("  %s, 2 workers: null %.1f ms, client %.1f ms per push+pull per worker (aggregate client %.0f MB/s)\n",
                format_byte_size(model).c_str(), 1e3 * row.null2_s, 1e3 * row.client2_s, kWorkers * mb / row.client2_s);
    {  // Sanity: weights finite after the run.
      std::size_t bad = 0;
      for (std::size_t i = 0; i < (1u << 20); i += 4) {
        float f;
        std::memcpy(&f, weights[0].data() + i, sizeof f);
        if (!std::isfinite(f)) ++bad;
      }
      if (bad != 0) std::cout << "WARNING: " << bad << " non-finite weights in the first MiB pulled\n";
    }
    for (auto& c : clusters) c.reset();
    for (auto& t : tgtds)
      if (Status s = t.stop(); !s.ok()) std::cerr << "client_pushpull: warning: " << s.message() << "\n";
    // gloo after the tgtds are gone (it gets the CPUs alone, as the client did).
    if (gloo_skip.empty()) {
      if (Result<double> gloo = gloo_seconds(opt, model); gloo.ok()) {
        row.gloo_s = *gloo;
        std::printf("  %s, gloo allreduce among %d processes: %.1f ms\n", format_byte_size(model).c_str(), kWorkers,
                    1e3 * row.gloo_s);
      } else {
        std::printf("  %s, gloo FAILED: %s\n", format_byte_size(model).c_str(), gloo.message().c_str());
      }
    }
    rows.push_back(row);
  }

  std::printf(
      "\n1 worker (libiscsi transport, queue depth %d, max_request %s, 2 shards), MB/s = 2 x model / time "
      "per push+pull:\n",
      opt.queue_depth, format_byte_size(opt.max_request).c_str());
  std::printf("%-8s %10s %12s %16s %14s %14s %12s %12s %12s\n", "model", "null MB/s", "client MB/s", "client/null",
              "push/null-wr", "pull/null-rd", "direct MB/s", "rdwr MB/s", "client/rdwr");
  for (const Row& r : rows) {
    std::printf("%-8s %10.0f %12.0f %10.3f %-5s %14.3f %14.3f %12.0f %12.0f %12.3f\n",
                format_byte_size(r.model).c_str(), r.null1, r.client1, r.ratio1,
                r.ratio1 >= kCeilingTarget ? "ok" : "MISSED", r.push_ratio, r.pull_ratio, r.direct1, r.rdwr1,
                r.client1 / r.rdwr1);
  }
  std::printf(
      "rdwr = the ceiling's code on stock tgt rdwr LUs over tmpfs (a store that copies every byte and does no "
      "math): client/rdwr ~ 1 means the module costs what any copying store costs\n");
  std::printf(
      "direct = the ceiling's code (no Cluster) on the blockps grad LUs: client ~ direct puts the gap in the "
      "shards (module + tgtd), not in libblockps\n");
  std::printf(
      "\n2 workers concurrently (each its own Cluster and initiator), ms per push+pull per worker, vs gloo "
      "allreduce of the same bytes among 2 processes:\n");
  std::printf("%-8s %10s %10s %12s %10s %18s\n", "model", "null ms", "client ms", "client/null", "gloo ms",
              "gloo/client");
  for (const Row& r : rows) {
    char g[32] = "skipped", gr[32] = "-";
    if (r.gloo_s > 0) {
      std::snprintf(g, sizeof g, "%.1f", 1e3 * r.gloo_s);
      std::snprintf(gr, sizeof gr, "%.2f %s", r.gloo_s / r.client2_s, r.gloo_s > r.client2_s ? "ok" : "MISSED");
    }
    std::printf("%-8s %10.1f %10.1f %12.3f %10s %18s\n", format_byte_size(r.model).c_str(), 1e3 * r.null2_s,
                1e3 * r.client2_s, r.null2_s / r.client2_s, g, gr);
  }
  std::printf(
      "targets: client/null >= %.2f (1 worker, median of %d per-round ratios); gloo/client > 1 (blockps "
      "faster)%s\n",
      kCeilingTarget, opt.rounds, gloo_skip.empty() ? "" : (" -- gloo skipped: " + gloo_skip).c_str());
  return 0;
}
