// blockps_sync_rounds: what a synchronous round costs. W workers (each its own libiscsi session, its own thread)
// push a gradient of the whole model and pull the weights back, repeatedly, against one shard:
//   - async (the ceiling: the same bytes, no waiting for each other), the time of one step of all workers;
//   - mode=sync workers=W, the time of one round (the last pull returns after the round is applied).
// Prints both and the ratio sync/async for W = 2 and 3, per model size. Same tgtd, same run.
//
//   blockps_sync_rounds [--model-mib N] [--rounds N]
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <future>
#include <string>
#include <vector>

#include "bench/bench_report.h"
#include "client/transport/iscsi_lun.h"
#include "tests/support/blockps_shard.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tgtd_instance.h"

namespace {

using namespace blockps;
using namespace blockps::testing;
using Clock = std::chrono::steady_clock;

// Median seconds of `rounds` steps: every worker pushes the whole LU, then reads it back, in parallel.
Result<double> median_step_seconds(std::vector<IscsiLun>& workers, const std::vector<std::byte>& grad, int rounds) {
  std::vector<double> times;
  for (int r = 0; r < rounds; ++r) {
    const auto t0 = Clock::now();
    std::vector<std::future<Status>> done;
    for (IscsiLun& w : workers) {
      done.push_back(std::async(std::launch::async, [&w, &grad] {
        if (ScsiResult s = w.write(0, grad); !s.ok()) return Status::Error(StatusCode::io, "push: " + s.describe());
        std::vector<std::byte> back(grad.size());
        if (ScsiResult s = w.read(0, back); !s.ok()) return Status::Error(StatusCode::io, "pull: " + s.describe());
        return Status::Ok();
      }));
    }
    Status first_error = Status::Ok();
    for (auto& d : done)
      if (Status e = d.get(); !e.ok() && first_error.ok()) first_error = e;
    if (!first_error.ok()) return first_error;
    times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return bench::median(times);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"per-round latency of mode=sync against async push+pull of the same bytes"};
  int model_mib = 16, rounds = 15;
  app.add_option("--model-mib", model_mib, "model size in MiB (f32)")->check(CLI::Range(1, 1024));
  app.add_option("--rounds", rounds, "rounds measured per case (median reported)")->check(CLI::Range(3, 1000));
  CLI11_PARSE(app, argc, argv);

  bench::print_run_header("blockps sync rounds");
  if (Status s = bench::preflight(); !s.ok()) return bench::fail("sync_rounds", s.message());
  TempDir dir;
  if (!dir.create("blockps-bench-sync-").ok()) return 1;
  TgtdInstance tgtd;
  const std::string size = "size=" + std::to_string(model_mib) + "M;opt=sgd;lr=0.001;";
  std::printf("model %d MiB f32 per worker push and pull, median of %d rounds\n\n", model_mib, rounds);
  std::printf("%-8s %14s %14s %12s\n", "workers", "async step ms", "sync round ms", "sync/async");
  const auto grad = bench::finite_f32_gradients(static_cast<std::size_t>(model_mib) << 20, 1);
  int tid = 0;
  for (int w : {2, 3}) {
    double seconds[2] = {0, 0};
    for (int sync = 0; sync < 2; ++sync) {
      ++tid;
      const std::string iqn = "iqn.2026-11.io.blockps:bench-sync" + std::to_string(tid);
      const std::string opts = size + (sync ? "mode=sync;workers=" + std::to_string(w) +
                                                  ";min_workers=" + std::to_string(w) + ";straggler_ms=60000"
                                            : std::string("mode=async"));
      if (Status s = add_blockps_shard(tgtd, tid, iqn, dir.path("m" + std::to_string(tid) + ".ckpt"), opts); !s.ok()) {
        return bench::fail("sync_rounds", "shard: " + s.message(), std::span(&tgtd, 1));
      }
      std::vector<IscsiLun> workers(static_cast<std::size_t>(w));
      for (int k = 0; k < w; ++k) {
        if (Status s = workers[static_cast<std::size_t>(k)].connect(
                tgtd.url(iqn, 1), "iqn.2026-11.io.blockps:bench-worker" + std::to_string(k));
            !s.ok()) {
          return bench::fail("sync_rounds", "connect: " + s.message(), std::span(&tgtd, 1));
        }
      }
      Result<double> step = median_step_seconds(workers, grad, 2);  // warm-up
      if (step.ok()) step = median_step_seconds(workers, grad, rounds);
      if (!step.ok()) {
        return bench::fail("sync_rounds", std::string(sync ? "sync: " : "async: ") + step.message(),
                           std::span(&tgtd, 1));
      }
      seconds[sync] = *step;
    }
    std::printf("%-8d %14.1f %14.1f %12.2f\n", w, seconds[0] * 1e3, seconds[1] * 1e3, seconds[1] / seconds[0]);
  }
  std::printf(
      "\nsync/async: the cost of waiting for the round (the slowest worker plus the averaging) on top of\n"
      "moving the same bytes; 1.00 would be free.\n");
  return 0;
}
