// gpu_aggregation: the CUDA engine's aggregation throughput (GB/s of gradient consumed) against the GPU's
// device-to-device copy bandwidth measured in the same run (target >= 0.8), and the engine as a WRITE drives it
// (ModelShard::push_gradient: pinned staging, upload, kernel, copy-back to the host mirror) against the CPU
// engine on this host.
//
//   gpu_aggregation [--elements N] [--reps R] [--request-bytes B]
//
// Kernel figures: the kernel the engine launches (aggregator/cuda_kernels.cuh), over N elements already on the
// GPU, in launches of 32 blocks of 256 KiB wire bytes as the engine issues them. Note the roofline: the copy
// moves 2 bytes of memory traffic per byte copied, while an optimizer reads the gradient and reads and writes
// the weights and state (sgd f32: 3 bytes per gradient byte; adam f32: 7), so the memory-bound ratio is at
// most 2/3 (sgd f32) and 2/7 (adam f32), less with 16-bit gradients (sgd bf16: 2/5): the 0.8 target is above
// every optimizer's roofline. Both the ratio and that bound are printed.
// Without a usable GPU it says so loudly and exits 0.
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "aggregator/cuda_kernels.cuh"
#include "aggregator/model_shard.h"

namespace {

using namespace blockps;

constexpr double kTarget = 0.8;

struct Args {
  std::uint64_t elements = 64ull << 20;
  int reps = 10;
  std::uint64_t request_bytes = 1u << 20;
};

bool ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "gpu_aggregation: ERROR: %s: %s\n", what, cudaGetErrorString(e));
  return false;
}

// Seconds per call of `body` (enqueued on stream `s`), median-free: the mean over `reps` after one warm-up.
template <class Body>
double time_on_stream(cudaStream_t s, int reps, const Body& body) {
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  body();
  cudaEventRecord(start, s);
  for (int i = 0; i < reps; ++i) body();
  cudaEventRecord(stop, s);
  cudaEventSynchronize(stop);
  float ms = 0;
  cudaEventElapsedTime(&ms, start, stop);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms / 1e3 / reps;
}

int kernel_figures(const Args& a) {
  const std::uint64_t n = a.elements;
  float *w = nullptr, *s0 = nullptr, *s1 = nullptr, *copy_dst = nullptr;
  void* g = nullptr;
  cudaStream_t stream;
  if (!ok(cudaMalloc(&w, n * 4), "cudaMalloc") || !ok(cudaMalloc(&s0, n * 4), "cudaMalloc") ||
      !ok(cudaMalloc(&s1, n * 4), "cudaMalloc") || !ok(cudaMalloc(&g, n * 4), "cudaMalloc") ||
      !ok(cudaMalloc(&copy_dst, n * 4), "cudaMalloc") || !ok(cudaStreamCreate(&stream), "cudaStreamCreate"))
    return 1;
  cudaMemset(w, 0, n * 4);
  cudaMemset(s0, 0, n * 4);
  cudaMemset(s1, 0, n * 4);
  cudaMemset(g, 0, n * 4);  // zeros: finite for every optimizer

  const double copy_s =
      time_on_stream(stream, a.reps, [&] { cudaMemcpyAsync(copy_dst, w, n * 4, cudaMemcpyDeviceToDevice, stream); });
  const double copy_gbps = n * 4 / copy_s / 1e9;
  std::printf("device-to-device copy: %.1f GB/s (bytes copied per second, %llu MiB)\n\n", copy_gbps,
              static_cast<unsigned long long>(n * 4 >> 20));
  std::printf("%-10s %-5s %14s %12s %16s %18s\n", "opt", "dtype", "gradient GB/s", "vs copy", "traffic/grad B",
              "memory-bound max");

  int missed = 0;
  for (OptimizerKind kind : kAllOptimizerKinds) {
    for (WireDtype d : {WireDtype::f32, WireDtype::bf16}) {
      const std::size_t gsize = wire_size(d);
      const std::uint64_t block = (256u << 10) / gsize;  // elements of a 256 KiB block
      const StepConstants k = step_constants(OptimizerParams{.kind = kind}, 1);
      const double s = time_on_stream(stream, a.reps, [&] {
        for (std::uint64_t first = 0; first < n;) {
          cuda::Launch launch;
          const std::uint64_t chunk_first = first;
          while (first < n && launch.pieces < cuda::kMaxLaunchBlocks) {
            const std::uint64_t count = std::min(block, n - first);
            launch.piece[launch.pieces++] = {first, count, first - chunk_first, k};
            launch.max_count = std::max(launch.max_count, count);
            first += count;
          }
          cuda::launch_update(kind, d, launch, w, static_cast<std::byte*>(g) + chunk_first * gsize, s0, s1, stream);
        }
      });
      if (!ok(cudaGetLastError(), "kernel")) return 1;
      const double grad_gbps = n * gsize / s / 1e9;
      // Bytes of memory traffic per gradient byte: the gradient once, weights and each state slot read + written.
      const double traffic = (gsize + 2.0 * 4 * (1 + state_slots(kind))) / gsize;
      const double ratio = grad_gbps / copy_gbps;
      missed += ratio < kTarget;
      std::printf("%-10s %-5s %14.1f %11.2f%s %16.1f %18.2f\n", std::string(to_string(kind)).c_str(),
                  std::string(to_string(d)).c_str(), grad_gbps, ratio, ratio >= kTarget ? " " : "!", traffic,
                  2.0 / traffic);
    }
  }
  std::printf(
      "\ntarget: gradient GB/s >= %.1f x copy GB/s; '!' marks a miss (%d of 10). 'memory-bound max' is the\n"
      "ratio a kernel at full copy bandwidth would reach given its traffic per gradient byte.\n\n",
      kTarget, missed);
  cudaFree(w), cudaFree(s0), cudaFree(s1), cudaFree(g), cudaFree(copy_dst);
  cudaStreamDestroy(stream);
  return 0;
}

// GB/s of gradient through ModelShard::push_gradient from `threads` writers (as tgt's I/O threads call it).
double engine_gbps(ModelShard& shard, std::uint64_t request_bytes, int threads, int passes) {
  const std::uint64_t bytes = shard.geometry().bytes;
  std::vector<std::byte> grad(request_bytes);  // zeros: finite for every optimizer
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (int p = 0; p < passes; ++p)
        for (std::uint64_t off = t * request_bytes; off + request_bytes <= bytes; off += threads * request_bytes)
          if (!shard.push_gradient(off, grad).ok()) return;
    });
  for (auto& th : pool) th.join();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return static_cast<double>(bytes) * passes / s / 1e9;
}

int engine_figures(const Args& a) {
  const ShardGeometry g{.bytes = 256ull << 20, .dtype = WireDtype::f32, .block_bytes = 256u << 10};
  std::printf("engine (ModelShard::push_gradient of %llu KiB requests, 4 writer threads, 256 MiB f32 shard):\n",
              static_cast<unsigned long long>(a.request_bytes >> 10));
  std::printf("%-10s %12s %12s %10s\n", "opt", "cpu GB/s", "gpu:0 GB/s", "gpu/cpu");
  for (OptimizerKind kind : {OptimizerKind::sgd, OptimizerKind::adam}) {
    const OptimizerParams p{.kind = kind};
    ModelShard cpu(g, p, std::make_shared<CpuEngine>(0));
    ModelShard gpu(g, p, std::make_shared<CpuEngine>(0), Device::cuda(0));
    engine_gbps(cpu, a.request_bytes, 4, 1);  // warm-up: first touch of the memory
    engine_gbps(gpu, a.request_bytes, 4, 1);
    const double c = engine_gbps(cpu, a.request_bytes, 4, 3);
    const double gg = engine_gbps(gpu, a.request_bytes, 4, 3);
    if (const Status engine = gpu.engine_status(); !engine.ok()) {
      std::fprintf(stderr, "gpu_aggregation: ERROR: %s\n", engine.message().c_str());
      return 1;
    }
    std::printf("%-10s %12.2f %12.2f %10.2f\n", std::string(to_string(kind)).c_str(), c, gg, gg / c);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--elements" && has_value)
      a.elements = std::strtoull(argv[++i], nullptr, 10);
    else if (arg == "--reps" && has_value)
      a.reps = std::atoi(argv[++i]);
    else if (arg == "--request-bytes" && has_value)
      a.request_bytes = std::strtoull(argv[++i], nullptr, 10);
    else {
      std::fprintf(stderr, "usage: gpu_aggregation [--elements N] [--reps R] [--request-bytes B] (got '%s')\n",
                   arg.c_str());
      return 2;
    }
  }
  if (a.elements == 0 || a.reps <= 0 || a.request_bytes == 0 || a.request_bytes % 4 != 0) {
    std::fprintf(stderr, "gpu_aggregation: --elements, --reps and --request-bytes (a multiple of 4) must be > 0\n");
    return 2;
  }
  if (const Status gpu = check_device(Device::cuda(0)); !gpu.ok()) {
    std::printf(
        "\n*** gpu_aggregation: NOT RUN, no usable GPU on this machine: %s ***\n"
        "*** No GPU figure was measured. Run it on a GPU host. ***\n\n",
        gpu.message().c_str());
    return 0;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("gpu_aggregation: gpu:0 = %s (sm_%d%d, %.0f GiB)\n", prop.name, prop.major, prop.minor,
              prop.totalGlobalMem / double(1ull << 30));
  if (int rc = kernel_figures(a); rc != 0) return rc;
  return engine_figures(a);
}
