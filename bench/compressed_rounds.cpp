// blockps_compressed_rounds: what compressed blocks cost the shard (issue 50). One tgtd, one averaging shard
// (opt=average;mode=sync;workers=W) per format: f32 (no compress=), sign1 and int8 (compress_after=0). W workers, each
// its own libiscsi session and thread, push every block of the model (one WRITE a block: the f32 block, or its
// compressed image) and read it back (the round's average, compressed the same way), round after round. The shard's
// CPU (tgtd's utime + stime from /proc, every thread) over the timed rounds, per GB of f32 gradient the workers'
// pushes stand for (W x the model a round) and per GB that crossed the wire; in the same run, the ceiling: memcpy of
// the same f32 bytes on this machine (CPU seconds per GB at memcpy's rate), and the ratio of each to f32's.
//
//   blockps_compressed_rounds [--model-mib 16] [--block-kib 256] [--workers 2] [--rounds 10]
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <future>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_report.h"
#include "client/transport/iscsi_lun.h"
#include "contract/compressed_wire.h"
#include "tests/support/blockps_shard.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tgtd_instance.h"

namespace {

using namespace blockps;
using namespace blockps::testing;
using Clock = std::chrono::steady_clock;

// CPU seconds process `pid` has used (utime + stime of all its threads).
double cpu_seconds(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const auto close = text.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(text.substr(close + 2));
  std::string skip;
  for (int i = 0; i < 11; ++i) fields >> skip;  // state .. cmajflt: fields 3..13
  double utime = 0, stime = 0;
  fields >> utime >> stime;
  return (utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// One worker's pushes: per block, what it writes (the f32 block, or its compressed image).
struct WorkerBlocks {
  std::vector<std::vector<std::byte>> blocks;
  std::size_t bytes() const {
    std::size_t n = 0;
    for (const auto& b : blocks) n += b.size();
    return n;
  }
};

WorkerBlocks make_blocks(const std::vector<std::byte>& grad, std::size_t block_bytes,
                         std::optional<CompressedFormat> format) {
  WorkerBlocks w;
  for (std::size_t at = 0; at < grad.size(); at += block_bytes) {
    const std::span<const std::byte> block(grad.data() + at, block_bytes);
    if (!format) {
      w.blocks.emplace_back(block.begin(), block.end());
      continue;
    }
    std::vector<float> values(block_bytes / 4);
    std::memcpy(values.data(), block.data(), block_bytes);
    std::vector<std::byte> image(compressed_block_bytes(*format, values.size()));
    if (!compress(*format, values, {}, image).ok()) return {};
    w.blocks.push_back(std::move(image));
  }
  return w;
}

// `rounds` rounds of every worker pushing and reading back every block; the rounds' wall seconds.
Result<double> run_rounds(std::vector<IscsiLun>& workers, const std::vector<WorkerBlocks>& pushes,
                          std::size_t block_bytes, int rounds) {
  const auto t0 = Clock::now();
  for (int r = 0; r < rounds; ++r) {
    std::vector<std::future<Status>> done;
    for (std::size_t k = 0; k < workers.size(); ++k) {
      done.push_back(std::async(std::launch::async, [&, k] {
        const WorkerBlocks& mine = pushes[k];
        std::vector<std::byte> back;
        for (std::size_t b = 0; b < mine.blocks.size(); ++b) {
          const std::uint64_t at = b * block_bytes;
          if (ScsiResult s = workers[k].write(at, mine.blocks[b]); !s.ok())
            return Status::Error(StatusCode::io, "push: " + s.describe());
          back.resize(mine.blocks[b].size());
          if (ScsiResult s = workers[k].read(at, back); !s.ok())
            return Status::Error(StatusCode::io, "pull: " + s.describe());
        }
        return Status::Ok();
      }));
    }
    Status first = Status::Ok();
    for (auto& d : done)
      if (Status e = d.get(); !e.ok() && first.ok()) first = e;
    if (!first.ok()) return first;
  }
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"the shard's CPU per GB with compressed blocks (sign1, int8) against f32, and memcpy's"};
  int model_mib = 16, block_kib = 256, worker_count = 2, rounds = 10;
  app.add_option("--model-mib", model_mib, "model size in MiB of f32")->check(CLI::Range(1, 1024));
  app.add_option("--block-kib", block_kib, "block size in KiB of f32 (a power of two)")->check(CLI::Range(16, 512));
  app.add_option("--workers", worker_count, "workers, each its own session")->check(CLI::Range(1, 16));
  app.add_option("--rounds", rounds, "timed rounds per format")->check(CLI::Range(2, 1000));
  CLI11_PARSE(app, argc, argv);
  const std::size_t model_bytes = static_cast<std::size_t>(model_mib) << 20;
  const std::size_t block_bytes = static_cast<std::size_t>(block_kib) << 10;
  if (model_bytes % block_bytes) return bench::fail("compressed_rounds", "--model-mib must be whole blocks");

  bench::print_run_header("blockps compressed rounds");
  if (Status s = bench::preflight(); !s.ok()) return bench::fail("compressed_rounds", s.message());
  // The ceiling: memcpy of the f32 model on this machine, as CPU seconds per GB.
  std::vector<std::byte> from = bench::finite_f32_gradients(model_bytes, 99), to(model_bytes);
  std::vector<double> copies;
  for (int i = 0; i < 7; ++i) {
    const auto t0 = Clock::now();
    std::memcpy(to.data(), from.data(), model_bytes);
    copies.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  const double memcpy_s_per_gb = bench::median(copies) / (static_cast<double>(model_bytes) / 1e9);

  TempDir dir;
  if (!dir.create("blockps-bench-compressed-").ok()) return 1;
  TgtdInstance tgtd;
  std::printf("model %d MiB f32 in blocks of %d KiB, %d workers, %d rounds per format; memcpy %.3f CPU s/GB\n\n",
              model_mib, block_kib, worker_count, rounds, memcpy_s_per_gb);
  std::printf("%-6s %11s %10s %14s %14s %14s %12s\n", "format", "wire MB/rnd", "round ms", "CPU ms/round",
              "CPU s/GB grad", "CPU s/GB wire", "x f32 (grad)");
  std::vector<std::vector<std::byte>> grads;
  for (int k = 0; k < worker_count; ++k)
    grads.push_back(bench::finite_f32_gradients(model_bytes, static_cast<unsigned>(k + 1)));
  double f32_per_gb = 0;
  int tid = 0;
  for (const std::optional<CompressedFormat> format :
       {std::optional<CompressedFormat>(), std::optional(CompressedFormat::sign1),
        std::optional(CompressedFormat::int8)}) {
    ++tid;
    const std::string iqn = "iqn.2026-11.io.blockps:bench-compressed" + std::to_string(tid);
    const std::string opts = "size=" + std::to_string(model_bytes) + ";block=" + std::to_string(block_bytes) +
                             ";opt=average;mode=sync;workers=" + std::to_string(worker_count) +
                             ";min_workers=" + std::to_string(worker_count) + ";straggler_ms=60000" +
                             (format ? ";compress=" + std::string(to_string(*format)) + ";compress_after=0" : "");
    if (Status s = add_blockps_shard(tgtd, tid, iqn, dir.path("m" + std::to_string(tid) + ".ckpt"), opts); !s.ok())
      return bench::fail("compressed_rounds", "shard: " + s.message(), std::span(&tgtd, 1));
    std::vector<IscsiLun> workers(static_cast<std::size_t>(worker_count));
    std::vector<WorkerBlocks> pushes;
    for (int k = 0; k < worker_count; ++k) {
      if (Status s = workers[static_cast<std::size_t>(k)].connect(
              tgtd.url(iqn, 1), "iqn.2026-11.io.blockps:bench-worker" + std::to_string(k));
          !s.ok())
        return bench::fail("compressed_rounds", "connect: " + s.message(), std::span(&tgtd, 1));
      pushes.push_back(make_blocks(grads[static_cast<std::size_t>(k)], block_bytes, format));
      if (pushes.back().blocks.empty()) return bench::fail("compressed_rounds", "compress failed");
    }
    if (Result<double> warm = run_rounds(workers, pushes, block_bytes, 2); !warm.ok())
      return bench::fail("compressed_rounds", warm.message(), std::span(&tgtd, 1));
    const double cpu0 = cpu_seconds(tgtd.pid());
    const Result<double> wall = run_rounds(workers, pushes, block_bytes, rounds);
    if (!wall.ok()) return bench::fail("compressed_rounds", wall.message(), std::span(&tgtd, 1));
    const double cpu = cpu_seconds(tgtd.pid()) - cpu0;
    const double grad_gb = static_cast<double>(worker_count) * static_cast<double>(model_bytes) * rounds / 1e9;
    const double wire_gb = 2.0 * static_cast<double>(pushes[0].bytes()) * worker_count * rounds / 1e9;
    const double per_grad_gb = cpu / grad_gb;
    if (!format) f32_per_gb = per_grad_gb;
    std::printf("%-6s %11.2f %10.1f %14.1f %14.3f %14.3f %12.2f\n",
                format ? std::string(to_string(*format)).c_str() : "f32",
                2.0 * static_cast<double>(pushes[0].bytes()) * worker_count / 1e6, *wall / rounds * 1e3,
                cpu / rounds * 1e3, per_grad_gb, cpu / wire_gb, per_grad_gb / f32_per_gb);
  }
  std::printf(
      "\nCPU s/GB grad: tgtd's CPU per GB of f32 gradient the pushes stand for (W x the model a round); of the wire:\n"
      "per GB pushed and pulled. The ceiling of the shard's work a GB: memcpy's %.3f s (f32 at least reads every\n"
      "byte once and writes its sum). x f32: each format's CPU per gradient GB over f32's (below 1: the shard\n"
      "spends less per GB of gradient than uncompressed). Commands run serially per worker (one WRITE and one READ\n"
      "a block): the round time is not a throughput figure.\n",
      memcpy_s_per_gb);
  return 0;
}
