// blockps_compressed_wire: the compressed blocks' codecs (contract/compressed_wire.h) on one core, against memcpy of
// the same f32 bytes in the same run. A model of --model-mib MiB of f32 in blocks of --block-elements:
//   - compress with error feedback (reads the gradient and the residual, writes the residual and the block);
//   - decompress (reads the block, writes f32); accumulate (reads the block and the sum, writes the sum);
// each as GB/s of f32 elements handled (the model's f32 bytes / the median time) and as a ratio to memcpy of the
// model's f32 bytes. No tgtd, no root.
//
//   blockps_compressed_wire [--model-mib N] [--block-elements N] [--rounds N]
#include "contract/compressed_wire.h"

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "bench/bench_report.h"

namespace {

using namespace blockps;
using Clock = std::chrono::steady_clock;

// Median seconds of `rounds` runs of `pass` (after one unmeasured run); the first refusal stops it.
Result<double> median_seconds(int rounds, const std::function<Status()>& pass) {
  if (Status s = pass(); !s.ok()) return s;
  std::vector<double> times;
  for (int r = 0; r < rounds; ++r) {
    const auto t0 = Clock::now();
    if (Status s = pass(); !s.ok()) return s;
    times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return bench::median(times);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"compressed blocks: compress (error feedback), decompress, accumulate against memcpy"};
  int model_mib = 64, rounds = 9;
  std::size_t block_elements = 65536;
  app.add_option("--model-mib", model_mib, "model size in MiB of f32")->check(CLI::Range(1, 4096));
  app.add_option("--block-elements", block_elements, "elements per block")->check(CLI::Range(1, 1 << 20));
  app.add_option("--rounds", rounds, "passes measured per case (median reported)")->check(CLI::Range(3, 1000));
  CLI11_PARSE(app, argc, argv);

  bench::print_run_header("blockps compressed wire");
  const std::size_t n = std::size_t(model_mib) << 18;  // f32 elements
  const std::size_t blocks = (n + block_elements - 1) / block_elements;
  const double f32_bytes = 4.0 * static_cast<double>(n);
  const std::vector<std::byte> grad_bytes = bench::finite_f32_gradients(4 * n, 50);
  std::vector<float> grad(n), residual(n, 0.0f), sum(n, 0.0f), copy(n);
  std::memcpy(grad.data(), grad_bytes.data(), 4 * n);

  const auto memcpy_s = median_seconds(rounds, [&] {
    std::memcpy(copy.data(), grad.data(), 4 * n);
    return Status::Ok();
  });
  if (!memcpy_s.ok()) return bench::fail("compressed_wire", memcpy_s.message());
  std::printf("model %d MiB f32 (%zu elements), blocks of %zu elements, %d rounds, 1 thread\n", model_mib, n,
              block_elements, rounds);
  std::printf("memcpy of the f32 bytes: %.2f GB/s\n", f32_bytes / *memcpy_s / 1e9);
  std::printf("%-6s %-11s %10s %12s %9s\n", "format", "op", "GB/s(f32)", "vs memcpy", "ratio");

  for (CompressedFormat f : {CompressedFormat::sign1, CompressedFormat::int8}) {
    const std::size_t block_bytes = compressed_block_bytes(f, block_elements);
    std::vector<std::byte> wire(blocks * block_bytes);
    // Each block's elements, its compressed bytes; the last block may be short.
    auto for_blocks = [&](const std::function<Status(std::span<float>, std::span<std::byte>)>& op) {
      for (std::size_t b = 0; b < blocks; ++b) {
        const std::size_t first = b * block_elements, len = std::min(block_elements, n - first);
        const std::size_t bytes = compressed_block_bytes(f, len);
        if (Status s = op({grad.data() + first, len}, {wire.data() + b * block_bytes, bytes}); !s.ok()) return s;
      }
      return Status::Ok();
    };
    const auto compress_s = median_seconds(rounds, [&] {
      return for_blocks([&](std::span<float> g, std::span<std::byte> w) {
        const std::size_t first = static_cast<std::size_t>(g.data() - grad.data());
        return compress(f, g, {residual.data() + first, g.size()}, w);
      });
    });
    const auto decompress_s = median_seconds(rounds, [&] {
      return for_blocks([&](std::span<float> g, std::span<std::byte> w) {
        return decompress(f, w, {copy.data() + (g.data() - grad.data()), g.size()});
      });
    });
    const auto accumulate_s = median_seconds(rounds, [&] {
      return for_blocks([&](std::span<float> g, std::span<std::byte> w) {
        return accumulate(f, w, {sum.data() + (g.data() - grad.data()), g.size()});
      });
    });
    for (const auto& [op, seconds] : {std::pair{"compress", &compress_s}, std::pair{"decompress", &decompress_s},
                                      std::pair{"accumulate", &accumulate_s}}) {
      if (!seconds->ok()) return bench::fail("compressed_wire", seconds->message());
      std::printf("%-6s %-11s %10.2f %12.2f %8.2fx\n", std::string(to_string(f)).c_str(), op,
                  f32_bytes / **seconds / 1e9, *memcpy_s / **seconds, 4.0 * block_elements / block_bytes);
    }
  }
  return 0;
}
