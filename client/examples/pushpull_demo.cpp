// blockps-pushpull-demo: what the PS does, end to end, on a running cluster (scripts/demo.sh starts one).
//
//   blockps-pushpull-demo --shard iscsi://127.0.0.1:3261/iqn...:shard0 --shard iscsi://...:shard1 [--steps N]
//
// Each --shard is a target URL without a LUN: its LUN 1 is the grad LU, LUN 3 the status LU. The model is the
// shards' blocks striped (global block i on shard i mod S). The "training" is the simplest real one: minimise
// 0.5 * |w - w*|^2 for a random target w*, whose gradient is w - w*. Every step pulls all weights (READ of
// each grad LU), computes the gradient, and pushes it (WRITE of each grad LU; the shard runs its optimizer).
// It prints loss and throughput per step, checks the loss fell at least 10x, checkpoints every shard
// (SYNCHRONIZE CACHE), and prints each shard's status page counters. Exit 0 on success, 1 when the loss did
// not fall, 2 on any error.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "client/transport/iscsi_lun.h"

namespace {

using blockps::IscsiLun;
using blockps::ScsiResult;
using Clock = std::chrono::steady_clock;

constexpr const char* kInitiator = "iqn.2026-11.io.blockps:demo-worker";

struct Shard {
  std::string url;
  IscsiLun grad;
  std::uint64_t bytes = 0;
  std::uint64_t block = 0;
  std::vector<float> local;  // the shard's elements in its own LU order
};

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

nlohmann::json read_status(const std::string& url) {
  IscsiLun status;
  if (const blockps::Status st = status.connect(url + "/3", kInitiator); !st.ok())
    throw std::runtime_error(url + "/3 (status LU): " + st.message());
  std::vector<std::byte> page(64 * 1024);
  if (const ScsiResult r = status.read(0, page); !r.ok()) throw std::runtime_error(url + "/3: " + r.describe());
  const auto j = nlohmann::json::parse(reinterpret_cast<const char*>(page.data()), nullptr, false);
  if (j.is_discarded()) throw std::runtime_error(url + "/3: the status page is not JSON");
  return j;
}

// Run fn(shard) for every shard at once and return the slowest time.
template <class Fn>
double on_all(std::vector<Shard>& shards, Fn fn) {
  const auto t0 = Clock::now();
  std::vector<std::thread> threads;
  std::vector<std::string> errors(shards.size());
  for (std::size_t s = 0; s < shards.size(); ++s)
    threads.emplace_back([&, s] {
      const ScsiResult r = fn(shards[s]);
      if (!r.ok()) errors[s] = shards[s].url + ": " + r.describe();
    });
  for (auto& t : threads) t.join();
  for (const auto& e : errors)
    if (!e.empty()) throw std::runtime_error(e);
  return seconds_since(t0);
}

int run(const std::vector<std::string>& urls, int steps) {
  std::vector<Shard> shards(urls.size());
  std::uint64_t block = 0, total = 0;
  for (std::size_t s = 0; s < urls.size(); ++s) {
    Shard& sh = shards[s];
    sh.url = urls[s];
    const auto st = read_status(sh.url)["shard"];
    if (st["dtype"] != "f32") throw std::runtime_error(sh.url + ": this demo needs dtype=f32, the shard has " + st["dtype"].dump());
    sh.bytes = st["size"].get<std::uint64_t>();
    sh.block = st["block"].get<std::uint64_t>();
    if (block && block != sh.block) throw std::runtime_error("shards disagree on the block size");
    block = sh.block;
    if (const blockps::Status c = sh.grad.connect(sh.url + "/1", kInitiator); !c.ok())
      throw std::runtime_error(sh.url + "/1 (grad LU): " + c.message());
    if (sh.grad.capacity_bytes() != sh.bytes) throw std::runtime_error(sh.url + ": grad LU capacity differs from the status page");
    sh.local.resize(sh.bytes / 4);
    total += sh.bytes;
    std::printf("shard %zu  %s  %.1f MiB  opt=%s lr=%g\n", s, sh.url.c_str(),
                static_cast<double>(sh.bytes) / (1 << 20), st["opt"].get<std::string>().c_str(),
                st["lr"].get<double>());
  }
  // Global element index -> (shard, local index): block i of the model lives on shard i mod S (stripe).
  const std::uint64_t block_elems = block / 4, n = total / 4, S = shards.size();
  auto locate = [&](std::uint64_t i) {
    const std::uint64_t b = i / block_elems, s = b % S;
    return std::pair{s, (b / S) * block_elems + i % block_elems};
  };
  std::vector<float> target(n);
  std::mt19937 gen(2026);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (auto& t : target) t = dist(gen);
  std::printf("model: %llu parameters in %llu-byte blocks striped over %llu shards; minimising 0.5*|w - w*|^2\n\n",
              static_cast<unsigned long long>(n), static_cast<unsigned long long>(block),
              static_cast<unsigned long long>(S));
  std::printf("%5s %14s %10s %10s %10s\n", "step", "loss", "pull MB/s", "push MB/s", "step ms");

  double first_loss = 0, loss = 0;
  for (int step = 0; step <= steps; ++step) {
    const auto t0 = Clock::now();
    const double pull_s = on_all(shards, [](Shard& sh) {
      return sh.grad.read(0, std::as_writable_bytes(std::span(sh.local)));
    });
    loss = 0;
    for (std::uint64_t i = 0; i < n; ++i) {
      const auto [s, j] = locate(i);
      const double d = static_cast<double>(shards[s].local[j]) - target[i];
      loss += 0.5 * d * d;
      shards[s].local[j] = static_cast<float>(d);  // the gradient replaces the weight in the buffer
    }
    loss /= static_cast<double>(n);
    if (step == 0) first_loss = loss;
    double push_s = 0;
    if (step < steps)
      push_s = on_all(shards, [](Shard& sh) { return sh.grad.write(0, std::as_bytes(std::span(sh.local))); });
    if (step % std::max(1, steps / 15) == 0 || step == steps)
      std::printf("%5d %14.6f %10.0f %10.0f %10.1f\n", step, loss, total / pull_s / 1e6,
                  push_s > 0 ? total / push_s / 1e6 : 0.0, seconds_since(t0) * 1e3);
  }
  on_all(shards, [](Shard& sh) { return sh.grad.synchronize_cache(); });
  std::printf("\ncheckpointed every shard (SYNCHRONIZE CACHE)\n\n%-6s %8s %8s %12s %12s %14s %12s\n", "shard",
              "pushes", "pulls", "pushed MB", "pulled MB", "mean aggr us", "checkpoints");
  for (std::size_t s = 0; s < S; ++s) {
    const auto j = read_status(shards[s].url);
    std::printf("%-6zu %8llu %8llu %12.1f %12.1f %14.1f %12llu\n", s,
                j["counters"]["pushes"].get<unsigned long long>(), j["counters"]["pulls"].get<unsigned long long>(),
                j["counters"]["push_bytes"].get<double>() / 1e6, j["counters"]["pull_bytes"].get<double>() / 1e6,
                j["aggregation"]["mean_ns"].get<double>() / 1e3, j["checkpoint"]["count"].get<unsigned long long>());
  }
  const bool learned = loss < first_loss / 10;
  std::printf("\nloss %.6f -> %.6f over %d steps: %s\n", first_loss, loss, steps,
              learned ? "the PS trained the model" : "FAILED: the loss did not fall 10x");
  return learned ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Push gradients to and pull weights from a running blockps cluster, and show what happened"};
  std::vector<std::string> urls;
  int steps = 40;
  app.add_option("--shard", urls, "target URL of a shard, iscsi://HOST:PORT/IQN (repeat per shard)")->required();
  app.add_option("--steps", steps, "training steps")->check(CLI::Range(1, 100000));
  CLI11_PARSE(app, argc, argv);
  try {
    return run(urls, steps);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "blockps-pushpull-demo: %s\n", e.what());
    return 2;
  }
}
