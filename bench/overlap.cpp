// bench/overlap: a synthetic trainer through 2 private shards that measures what double buffering and adaptive
// pull buy. One run:
//   1. the ceiling: push + pull of the model with no compute (the exchange time, "comm"), measured here;
//   2. for each compute time (given as a multiple of that comm, or in ms), three pipelines of `--steps` steps:
//        none      push then pull inside the step, no overlap (PipelineMode::sequential)
//        double    double buffering, pull right after the push
//        adaptive  double buffering + adaptive pull (bubble before the pull)
//      and prints per pipeline: stall as % of compute, mean bubble, mean weight age; the ideal stall of double
//      buffering (max(0, comm - compute) / compute) from the ceiling; and the ratios: stall(double) / compute,
//      age(double) / age(adaptive).
// Targets: with double buffering, stall <= 5% of compute whenever comm <= compute; adaptive pull cuts
// the mean weight age >= 2x against pulling right after the push.
//
// Compute is a sleep by default: the worker's CPU is free while its accelerator computes, as on
// GPU workers (--compute spin burns a core instead, for CPU training on a host that also runs the shards).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_report.h"
#include "blockps/cluster.h"
#include "blockps/cluster_file.h"
#include "blockps/double_buffer.h"
#include "contract/byte_size.h"
#include "tests/support/blockps_shard.h"
#include "tests/support/local_cluster.h"

namespace {

using blockps::DoubleBuffer;
using blockps::PipelineMode;
using blockps::PipelineOptions;
using Clock = std::chrono::steady_clock;

struct Totals {
  double compute = 0, stall = 0, bubble = 0, age = 0;
  int steps = 0;
  double stall_pct() const { return 100 * stall / compute; }
  double mean_ms(double sum) const { return 1e3 * sum / steps; }
};

void compute_for(double seconds, bool spin) {
  if (!spin) {
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    return;
  }
  const auto end = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  while (Clock::now() < end) {
  }
}

// One pipeline: `warmup` steps not counted (the moving averages settle), then `steps` counted.
blockps::Result<Totals> train(blockps::Cluster& cluster, const PipelineOptions& options, double compute_s, int steps,
                              int warmup, bool spin) {
  auto db = DoubleBuffer::create(cluster, options);
  if (!db.ok()) return db.status();
  Totals t;
  for (int k = 0; k < warmup + steps; ++k) {
    compute_for(compute_s, spin);
    auto m = db.value()->step();
    if (!m.ok()) return m.status();
    if (k < warmup) continue;
    t.compute += m->compute_s;
    t.stall += m->stall_s;
    t.bubble += m->bubble_s;
    t.age += m->weight_age_s;
    ++t.steps;
  }
  return t;
}

int run(const std::string& model_size, int steps, int warmup, int rounds, const std::vector<double>& ratios,
        const std::vector<double>& compute_ms, bool spin) {
  std::uint64_t model_bytes = 0;
  if (!blockps::parse_byte_size(model_size, model_bytes) || model_bytes == 0 || model_bytes % (512 * 1024) != 0) {
    std::fprintf(stderr, "overlap: --model-size '%s' must be a byte count that is a multiple of 512K\n",
                 model_size.c_str());
    return 2;
  }
  if (blockps::Status s = blockps::bench::preflight(); !s.ok()) {
    std::fprintf(stderr, "overlap: cannot run here: %s\n", s.message().c_str());
    return 2;
  }
  blockps::bench::print_run_header("bench/overlap");
  blockps::testing::LocalCluster local;
  if (auto s = local.start({.model_bytes = model_bytes,
                            .block_bytes = 256 * 1024,
                            .shard_options = "dtype=f32;opt=sgd;lr=0.000001",
                            .client_options = ""},
                           "blockps-overlap-");
      !s.ok()) {
    std::fprintf(stderr, "overlap: starting the shards: %s\n", s.message().c_str());
    return 2;
  }
  auto cluster = blockps::Cluster::open(local.cluster_file());
  if (!cluster.ok()) {
    std::fprintf(stderr, "overlap: %s\n", cluster.message().c_str());
    return 2;
  }
  // The ceiling: the exchange itself, no compute (the sequential pipeline's stall is exactly push + pull).
  auto ceiling = train(*cluster.value(), {.mode = PipelineMode::sequential}, 0, steps, warmup, false);
  if (!ceiling.ok()) {
    std::fprintf(stderr, "overlap: %s\n", ceiling.message().c_str());
    return 2;
  }
  const double comm = ceiling->stall / ceiling->steps;
  std::printf(
      "model %s (f32) striped over 2 shards (one tgtd each, loopback, libiscsi), 256K blocks; %d steps "
      "after %d warm-up per pipeline, median of %d rounds; compute = %s\n",
      model_size.c_str(), steps, warmup, rounds, spin ? "spin (a busy core)" : "sleep (accelerator-like)");
  std::printf("ceiling: push + pull with no compute = %.2f ms per step\n\n", comm * 1e3);

  std::vector<double> computes;
  for (double r : ratios) computes.push_back(r * comm);
  for (double ms : compute_ms) computes.push_back(ms / 1e3);

  std::printf("%9s %9s %-9s %8s %10s %8s %10s\n", "compute", "comm/", "pipeline", "stall %", "ideal %", "bubble",
              "weight age");
  std::printf("%9s %9s %-9s %8s %10s %8s %10s\n", "ms", "compute", "", "", "(ceiling)", "ms", "ms");
  int missed = 0;
  for (double c : computes) {
    const double ideal = 100 * std::max(0.0, comm - c) / c;
    const struct {
      const char* name;
      PipelineOptions options;
    } pipelines[] = {{"none", {.mode = PipelineMode::sequential}},
                     {"double", {.mode = PipelineMode::double_buffer, .adaptive_pull = false}},
                     {"adaptive", {.mode = PipelineMode::double_buffer, .adaptive_pull = true}}};
    // Rounds alternate the pipelines so that a burst of load elsewhere on the host hits all three alike;
    // every figure is the median over rounds.
    std::vector<std::vector<Totals>> per_round(rounds);
    for (int round = 0; round < rounds; ++round)
      for (const auto& p : pipelines) {
        auto r = train(*cluster.value(), p.options, c, steps, warmup, spin);
        if (!r.ok()) {
          std::fprintf(stderr, "overlap: %s: %s\n", p.name, r.message().c_str());
          return 2;
        }
        per_round[static_cast<std::size_t>(round)].push_back(r.value());
      }
    auto med = [&](std::size_t pipeline, auto figure) {
      std::vector<double> v;
      for (const auto& r : per_round) v.push_back(figure(r[pipeline]));
      return blockps::bench::median(v);
    };
    std::vector<Totals> t;
    for (std::size_t i = 0; i < 3; ++i) {
      Totals m;
      m.steps = 1;
      m.compute = 1;
      m.stall = med(i, [](const Totals& x) { return x.stall / x.compute; });
      m.bubble = med(i, [](const Totals& x) { return x.bubble / x.steps; });
      m.age = med(i, [](const Totals& x) { return x.age / x.steps; });
      t.push_back(m);
      std::printf("%9.2f %9.2f %-9s %8.1f %10.1f %8.2f %10.2f\n", c * 1e3, comm / c, pipelines[i].name, 100 * m.stall,
                  ideal, 1e3 * m.bubble, 1e3 * m.age);
    }
    const double stall_ratio = t[1].stall / t[1].compute;
    const double age_ratio = t[1].age / std::max(t[2].age, 1e-9);
    const bool comm_fits = comm <= c;
    std::printf(
        "  ratios: stall(double)/compute = %.3f%s; stall(adaptive)/compute = %.3f; "
        "age(double)/age(adaptive) = %.1fx%s; stall(none)/stall(double) = %.1fx\n\n",
        stall_ratio, comm_fits ? (stall_ratio <= 0.05 ? " (target <= 0.05: met)" : " (target <= 0.05: MISSED)") : "",
        t[2].stall / t[2].compute, age_ratio,
        comm_fits ? (age_ratio >= 2 ? " (target >= 2x: met)" : " (target >= 2x: MISSED)") : "",
        t[0].stall / std::max(t[1].stall, 1e-9));
    if (comm_fits && (stall_ratio > 0.05 || age_ratio < 2)) ++missed;
  }
  std::printf("%s\n", missed ? "some targets were MISSED (see above)" : "every target that applies was met");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Synthetic trainer: stall and weight age without overlap, with double buffering, with adaptive pull"};
  std::string model_size = "16M";
  int steps = 40, warmup = 10, rounds = 3;
  std::vector<double> ratios{2.0, 0.5};
  std::vector<double> compute_ms;
  std::string compute_kind = "sleep";
  app.add_option("--model-size", model_size, "model bytes (f32), a multiple of 512K")->capture_default_str();
  app.add_option("--steps", steps, "counted steps per figure")->check(CLI::Range(5, 100000))->capture_default_str();
  app.add_option("--rounds", rounds, "rounds of all pipelines; figures are medians")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app.add_option("--warmup", warmup, "uncounted steps first")->check(CLI::Range(3, 100000))->capture_default_str();
  app.add_option("--compute-ratios", ratios, "compute times as multiples of the measured comm time")
      ->delimiter(',')
      ->check(CLI::Range(0.01, 100.0))
      ->capture_default_str();
  app.add_option("--compute-ms", compute_ms, "compute times in ms (in addition to the ratios)")
      ->delimiter(',')
      ->check(CLI::Range(0.1, 60000.0));
  app.add_option("--compute", compute_kind, "how compute passes its time")
      ->check(CLI::IsMember({"sleep", "spin"}))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  return run(model_size, steps, warmup, rounds, ratios, compute_ms, compute_kind == "spin");
}
