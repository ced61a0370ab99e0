// gpu_aggregation: the CUDA engine against the ceilings of the GPU it runs on, measured in the same run.
//
//   gpu_aggregation [--elements N] [--reps R] [--request-bytes B] [--threads T] [--only kernels|requests]
//
// 1. Kernels (target >= 0.85 of the memory-bound maximum, every optimizer and dtype). The kernel the engine
//    launches (aggregator/cuda_kernels.cuh, compiled with the engine's -fmad=false) over N f32 weights (default
//    64Mi: 256 MiB) with their state and a gradient already on the GPU, random finite data, against the GPU's
//    device-to-device copy. A copy moves 2 bytes of memory traffic per byte copied; an optimizer reads the
//    gradient and reads and writes the weights and each state slot (average only writes the weights), so at
//    the copy's bandwidth its gradient GB/s / copy GB/s would be 2 / (traffic per gradient byte): the 'max'
//    column. 'merged' is the whole tensor as the engine packs a request whose blocks are at the same step (one
//    piece, one launch); '32 pieces' is launches of 32 blocks of 256 KiB each at another step (nothing merges: a
//    request whose blocks are at different steps). Each figure is a fraction of 'max'; the median of R timed
//    repetitions (CUDA events) after one warm-up.
// 2. ModelShard's per-request path (target >= 0.7 of the ceiling): B-byte pushes (default 1 MiB) from T writer
//    threads (default 4, as tgt's I/O threads) over a 256 MiB shard, through ModelShard::push_gradient, against
//    the ceiling of such a push: each thread on its own stream copies B bytes of gradient from pinned memory to
//    the GPU and the request's f32 weights back into pinned memory, and waits. Also shown: the host memcpy into
//    pinned memory that a push adds (the gradient arrives in pageable memory), the CPU engine on this host, and
//    the engine's pipeline shapes (CudaStoreShape: chunk bytes, where the last copy-back runs).
// Without a usable GPU it says so loudly and exits 0.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "aggregator/cuda_kernels.cuh"
#include "aggregator/cuda_store.h"
#include "aggregator/model_shard.h"

namespace {

using namespace blockps;

constexpr double kKernelTarget = 0.85;  // of the memory-bound maximum
constexpr double kRequestTarget = 0.7;  // of the copy ceiling of a request
constexpr std::uint64_t kShardBytes = 256ull << 20;

struct Args {
  std::uint64_t elements = 64ull << 20;
  int reps = 20;
  std::uint64_t request_bytes = 1u << 20;
  int threads = 4;
  std::string only;  // "", "kernels" or "requests"
};

bool ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "gpu_aggregation: ERROR: %s: %s\n", what, cudaGetErrorString(e));
  return false;
}

// Median seconds of `reps` timed calls of `body` (enqueued on stream `s`), after one warm-up call.
template <class Body>
double median_seconds(cudaStream_t s, int reps, const Body& body) {
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  body();
  std::vector<double> times;
  for (int i = 0; i < reps; ++i) {
    cudaEventRecord(start, s);
    body();
    cudaEventRecord(stop, s);
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    times.push_back(ms / 1e3);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// Random finite values (a hash of the index): f32 in [lo, hi), or the wire dtype D of such a value.
__device__ float random_value(std::uint64_t i, std::uint32_t seed, float lo, float hi) {
  std::uint32_t x = static_cast<std::uint32_t>(i) * 2654435761u ^ static_cast<std::uint32_t>(i >> 32) ^ seed;
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return lo + (hi - lo) * static_cast<float>(x >> 8) * (1.0f / 16777216.0f);
}

template <WireDtype D>
__global__ void fill_random(void* out, std::uint64_t n, std::uint32_t seed, float lo, float hi) {
  for (std::uint64_t i = std::uint64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n;
       i += std::uint64_t{gridDim.x} * blockDim.x)
    store_wire<D>(out, i, random_value(i, seed, lo, hi));
}

void fill(WireDtype d, void* out, std::uint64_t n, std::uint32_t seed, float lo, float hi) {
  switch (d) {
    case WireDtype::f32:
      fill_random<WireDtype::f32><<<1024, 256>>>(out, n, seed, lo, hi);
      break;
    case WireDtype::bf16:
      fill_random<WireDtype::bf16><<<1024, 256>>>(out, n, seed, lo, hi);
      break;
    case WireDtype::f16:
      fill_random<WireDtype::f16><<<1024, 256>>>(out, n, seed, lo, hi);
      break;
  }
}

// Bytes of memory traffic per gradient byte: the gradient once, the weights and each state slot read and
// written (average: weights written only).
double traffic_per_gradient_byte(OptimizerKind kind, WireDtype d) {
  const double g = static_cast<double>(wire_size(d));
  const double weights = kind == OptimizerKind::average ? 4.0 : 8.0;
  return (g + weights + 8.0 * state_slots(kind)) / g;
}

struct DeviceArrays {
  float *w = nullptr, *s0 = nullptr, *s1 = nullptr, *copy_dst = nullptr;
  void* g = nullptr;
  ~DeviceArrays() { cudaFree(w), cudaFree(s0), cudaFree(s1), cudaFree(copy_dst), cudaFree(g); }
};

// The launches of a whole-tensor update as the engine packs them: merged (every block at the same step: one
// piece) or with the blocks at steps 1..7 in turn (no two neighbours merge: 32 blocks per launch).
std::vector<cuda::Launch> tensor_launches(OptimizerKind kind, WireDtype d, std::uint64_t n, bool merged) {
  const std::uint64_t block = (256u << 10) / wire_size(d);
  std::vector<BlockUpdate> updates;
  for (std::uint64_t first = 0, b = 0; first < n; first += block, ++b)
    updates.push_back({.element = first,
                       .count = std::min(block, n - first),
                       .grad_index = first,
                       .constants = step_constants(OptimizerParams{.kind = kind}, merged ? 1 : 1 + b % 7)});
  std::vector<cuda::Launch> launches;
  cuda::ChunkCursor at;
  while (!at.at_end(updates)) {
    launches.emplace_back();
    (void)cuda::pack_chunk(updates, at, n, launches.back());  // starts at element 0: grad_offset 0
  }
  return launches;
}

// Seconds (median) of one whole-tensor update with `launches`, launched with `shape`.
double update_seconds(const DeviceArrays& a, OptimizerKind kind, WireDtype d, const std::vector<cuda::Launch>& launches,
                      const cuda::LaunchShape& shape, cudaStream_t stream, int reps, bool& failed) {
  return median_seconds(stream, reps, [&] {
    for (const cuda::Launch& launch : launches)
      failed |= cuda::launch_update(kind, d, launch, a.w, a.g, a.s0, a.s1, shape, stream) != cudaSuccess;
  });
}

int kernel_figures(const Args& args, int multiprocessors) {
  const std::uint64_t n = args.elements;
  DeviceArrays a;
  cudaStream_t stream;
  if (!ok(cudaMalloc(&a.w, n * 4), "cudaMalloc") || !ok(cudaMalloc(&a.s0, n * 4), "cudaMalloc") ||
      !ok(cudaMalloc(&a.s1, n * 4), "cudaMalloc") || !ok(cudaMalloc(&a.g, n * 4), "cudaMalloc") ||
      !ok(cudaMalloc(&a.copy_dst, n * 4), "cudaMalloc") || !ok(cudaStreamCreate(&stream), "cudaStreamCreate"))
    return 1;
  const double copy_s = median_seconds(
      stream, args.reps, [&] { cudaMemcpyAsync(a.copy_dst, a.w, n * 4, cudaMemcpyDeviceToDevice, stream); });
  const double copy_gbps = n * 4 / copy_s / 1e9;
  std::printf("device-to-device copy: %.1f GB/s (bytes copied per second; %.1f GB/s of memory traffic), %llu MiB\n\n",
              copy_gbps, 2 * copy_gbps, static_cast<unsigned long long>(n * 4 >> 20));
  std::printf("%-9s %-5s %9s %7s | %13s %8s | %13s %8s\n", "opt", "dtype", "traffic/B", "max", "merged GB/s", "of max",
              "32 pcs GB/s", "of max");

  const cuda::LaunchShape shape{};  // the engine's default (CudaStoreShape): one vector per thread
  int missed = 0, rows = 0;
  bool failed = false;
  for (OptimizerKind kind : kAllOptimizerKinds) {
    for (WireDtype d : {WireDtype::f32, WireDtype::bf16, WireDtype::f16}) {
      fill(WireDtype::f32, a.w, n, 1, -1.0f, 1.0f);
      fill(WireDtype::f32, a.s0, n, 2, -0.1f, 0.1f);
      fill(WireDtype::f32, a.s1, n, 3, 0.0f, 0.01f);  // adam's second moment: not negative
      fill(d, a.g, n, 4, -1.0f, 1.0f);
      if (!ok(cudaDeviceSynchronize(), "fill")) return 1;
      const double gbytes = static_cast<double>(n * wire_size(d)) / 1e9;
      const double max = 2.0 / traffic_per_gradient_byte(kind, d);
      double fraction[2];
      for (int merged = 1; merged >= 0; --merged) {
        const std::vector<cuda::Launch> launches = tensor_launches(kind, d, n, merged == 1);
        const double s = update_seconds(a, kind, d, launches, shape, stream, args.reps, failed);
        fraction[merged] = gbytes / s / copy_gbps / max;
      }
      if (failed || !ok(cudaDeviceSynchronize(), "kernel")) return 1;
      ++rows;
      missed += fraction[1] < kKernelTarget;
      std::printf("%-9s %-5s %9.1f %7.3f | %13.1f %7.2f%s | %13.1f %7.2f%s\n", std::string(to_string(kind)).c_str(),
                  std::string(to_string(d)).c_str(), traffic_per_gradient_byte(kind, d), max,
                  fraction[1] * max * copy_gbps, fraction[1], fraction[1] >= kKernelTarget ? " " : "!",
                  fraction[0] * max * copy_gbps, fraction[0], fraction[0] >= kKernelTarget ? " " : "!");
    }
  }
  std::printf(
      "\ntarget: 'merged' >= %.2f of max; '!' marks a miss (%d of %d). Launch shape: the engine's (one vector of\n"
      "%d elements per thread, 256 threads per block; %d multiprocessors).\n\n",
      kKernelTarget, missed, rows, cuda::kVector, multiprocessors);

  // Launch shapes, merged: thread blocks per multiprocessor (0: occupancy), and one vector per thread.
  std::printf("launch shapes (merged, fraction of max): %-10s", "opt dtype");
  const int per_sm[] = {1, 2, 4, 0, -1};
  for (int c : per_sm)
    std::printf(" %9s", c < 0 ? "uncapped" : c == 0 ? "occupancy" : (std::to_string(c) + "/SM").c_str());
  std::printf("\n");
  for (auto [kind, d] :
       {std::pair{OptimizerKind::sgd, WireDtype::f32}, std::pair{OptimizerKind::adam, WireDtype::f32},
        std::pair{OptimizerKind::sgd, WireDtype::bf16}, std::pair{OptimizerKind::adam, WireDtype::bf16}}) {
    fill(WireDtype::f32, a.s1, n, 3, 0.0f, 0.01f);
    fill(d, a.g, n, 4, -1.0f, 1.0f);
    const std::vector<cuda::Launch> launches = tensor_launches(kind, d, n, true);
    const double max = 2.0 / traffic_per_gradient_byte(kind, d);
    std::printf("%41s", (std::string(to_string(kind)) + " " + std::string(to_string(d))).c_str());
    for (int c : per_sm) {
      const cuda::LaunchShape s{.multiprocessors = c < 0 ? 0 : multiprocessors, .ctas_per_multiprocessor = c};
      const double secs = update_seconds(a, kind, d, launches, s, stream, args.reps, failed);
      std::printf(" %9.3f", n * wire_size(d) / secs / 1e9 / copy_gbps / max);
    }
    std::printf("\n");
  }
  if (failed || !ok(cudaDeviceSynchronize(), "kernel")) return 1;
  std::printf("\n");
  cudaStreamDestroy(stream);
  return 0;
}

// Runs body(thread) on `threads` threads that start together; seconds until the last one is done.
template <class Body>
double on_threads(int threads, const Body& body) {
  std::barrier start(threads + 1);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      start.arrive_and_wait();
      body(t);
    });
  start.arrive_and_wait();
  const auto t0 = std::chrono::steady_clock::now();
  for (auto& th : pool) th.join();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The copy ceiling of a push: GB/s of gradient when each of `threads` threads moves `requests` requests of
// `grad_bytes` (gradient in) and `weight_bytes` (f32 weights back) through pinned memory on its own stream, waiting
// for each; h2d or d2h alone when the other size is 0. Also the host memcpy into pinned memory (pageable source).
struct Ceiling {
  double request_gbps = 0, h2d_gbps = 0, d2h_gbps = 0, memcpy_gbps = 0;
};

Ceiling copy_ceiling(std::uint64_t grad_bytes, std::uint64_t weight_bytes, int threads, int requests) {
  struct PerThread {
    cudaStream_t stream = nullptr;
    void *pinned_in = nullptr, *pinned_out = nullptr, *device_in = nullptr, *device_out = nullptr;
    std::vector<std::byte> pageable;
  };
  std::vector<PerThread> per(threads);
  for (PerThread& p : per) {
    if (!ok(cudaStreamCreateWithFlags(&p.stream, cudaStreamNonBlocking), "cudaStreamCreate") ||
        !ok(cudaMallocHost(&p.pinned_in, grad_bytes), "cudaMallocHost") ||
        !ok(cudaMallocHost(&p.pinned_out, weight_bytes), "cudaMallocHost") ||
        !ok(cudaMalloc(&p.device_in, grad_bytes), "cudaMalloc") ||
        !ok(cudaMalloc(&p.device_out, weight_bytes), "cudaMalloc"))
      return {};
    p.pageable.assign(grad_bytes, std::byte{1});
    std::memset(p.pinned_in, 1, grad_bytes);
  }
  const auto gbps = [&](bool in, bool out) {
    const double s = on_threads(threads, [&](int t) {
      PerThread& p = per[t];
      for (int r = 0; r < requests; ++r) {
        if (in) cudaMemcpyAsync(p.device_in, p.pinned_in, grad_bytes, cudaMemcpyHostToDevice, p.stream);
        if (out) cudaMemcpyAsync(p.pinned_out, p.device_out, weight_bytes, cudaMemcpyDeviceToHost, p.stream);
        cudaStreamSynchronize(p.stream);
      }
    });
    return static_cast<double>(grad_bytes) * requests * threads / s / 1e9;
  };
  Ceiling c;
  gbps(true, true);  // warm-up
  c.request_gbps = gbps(true, true);
  c.h2d_gbps = gbps(true, false);
  c.d2h_gbps = gbps(false, true) * weight_bytes / grad_bytes;  // bytes of weights per second
  const double s = on_threads(threads, [&](int t) {
    for (int r = 0; r < requests; ++r) std::memcpy(per[t].pinned_in, per[t].pageable.data(), grad_bytes);
  });
  c.memcpy_gbps = static_cast<double>(grad_bytes) * requests * threads / s / 1e9;
  for (PerThread& p : per) {
    cudaStreamDestroy(p.stream);
    cudaFreeHost(p.pinned_in), cudaFreeHost(p.pinned_out), cudaFree(p.device_in), cudaFree(p.device_out);
  }
  return c;
}

// GB/s of gradient through ModelShard::push_gradient from `threads` writers (as tgt's I/O threads call it), each
// pushing its own requests (random finite values) over the shard `passes` times.
double engine_gbps(ModelShard& shard, std::uint64_t request_bytes, int threads, int passes) {
  const std::uint64_t bytes = shard.geometry().bytes;
  std::vector<std::vector<std::byte>> grads(threads);
  for (int t = 0; t < threads; ++t) {
    std::vector<float> values(request_bytes / wire_size(shard.geometry().dtype));
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>((i * 7 + t) % 13) * 1e-3f - 6e-3f;
    grads[t].resize(request_bytes);
    encode_wire(shard.geometry().dtype, values.data(), grads[t].data(), values.size());
  }
  std::atomic<bool> failed{false};
  const double s = on_threads(threads, [&](int t) {
    for (int p = 0; p < passes; ++p)
      for (std::uint64_t off = t * request_bytes; off + request_bytes <= bytes; off += threads * request_bytes)
        if (!shard.push_gradient(off, grads[t]).ok()) failed = true;
  });
  return failed ? -1 : static_cast<double>(bytes) * passes / s / 1e9;
}

struct NamedShape {
  const char* name;
  CudaStoreShape shape;
};

int engine_figures(const Args& a) {
  const NamedShape shapes[] = {
      {"default", CudaStoreShape{}},
      {"in order", CudaStoreShape{.last_copy_back_in_order = true}},
      {"512K", CudaStoreShape{.chunk_bytes = 512u << 10}},
      {"pageable", CudaStoreShape{.stage_in_pinned = false}},
      {"pageable,io", CudaStoreShape{.stage_in_pinned = false, .last_copy_back_in_order = true}},
  };
  std::printf("per-request path: ModelShard::push_gradient of %llu KiB requests, %d writer threads, 256 MiB shard\n",
              static_cast<unsigned long long>(a.request_bytes >> 10), a.threads);
  std::printf(
      "ceiling: each thread, its own stream: the request's gradient pinned -> GPU, its f32 weights GPU -> pinned, "
      "wait\n");
  std::printf("default shape: chunk %llu KiB, gradient staged in pinned memory, copy-back on the side stream\n\n",
              static_cast<unsigned long long>(CudaStoreShape{}.chunk_bytes >> 10));
  std::printf("%-6s %-5s %9s %8s %8s %9s %9s |", "opt", "dtype", "ceiling", "h2d", "d2h", "memcpy", "cpu");
  for (const NamedShape& s : shapes) std::printf(" %9s", s.name);
  std::printf(" | %8s\n", "default/ceiling");
  int missed = 0;
  for (auto [kind, dtype] :
       {std::pair{OptimizerKind::sgd, WireDtype::f32}, std::pair{OptimizerKind::adam, WireDtype::f32},
        std::pair{OptimizerKind::adam, WireDtype::bf16}}) {
    const ShardGeometry g{.bytes = kShardBytes, .dtype = dtype, .block_bytes = 256u << 10};
    const std::uint64_t weight_bytes = a.request_bytes / wire_size(dtype) * sizeof(float);
    const int requests = static_cast<int>(3 * kShardBytes / a.request_bytes / a.threads);
    const Ceiling c = copy_ceiling(a.request_bytes, weight_bytes, a.threads, requests);
    const OptimizerParams p{.kind = kind};
    double cpu = 0;
    {
      ModelShard shard(g, p, std::make_shared<CpuEngine>(0));
      engine_gbps(shard, a.request_bytes, a.threads, 1);  // warm-up: first touch of the memory
      cpu = engine_gbps(shard, a.request_bytes, a.threads, 3);
    }
    std::printf("%-6s %-5s %9.2f %8.2f %8.2f %9.2f %9.2f |", std::string(to_string(kind)).c_str(),
                std::string(to_string(dtype)).c_str(), c.request_gbps, c.h2d_gbps, c.d2h_gbps, c.memcpy_gbps, cpu);
    double default_gbps = 0;
    for (const NamedShape& s : shapes) {
      Result<std::unique_ptr<ShardStore>> shaped = make_cuda_store(0, g.elements(), kind, s.shape);
      if (!shaped.ok()) {
        std::fprintf(stderr, "gpu_aggregation: ERROR: shape %s: %s\n", s.name, shaped.message().c_str());
        return 1;
      }
      // The shard's own store (the default shape) is dropped for this one.
      Result<std::unique_ptr<ModelShard>> made =
          ModelShard::create(g, p, std::make_shared<CpuEngine>(0), Device::cuda(0),
                             [&](std::unique_ptr<ShardStore>) { return std::move(shaped).value(); });
      if (!made.ok()) {
        std::fprintf(stderr, "gpu_aggregation: ERROR: shape %s: %s\n", s.name, made.message().c_str());
        return 1;
      }
      ModelShard& gpu = *made.value();
      engine_gbps(gpu, a.request_bytes, a.threads, 1);
      const double gbps = engine_gbps(gpu, a.request_bytes, a.threads, 3);
      if (const Status engine = gpu.engine_status(); !engine.ok() || gbps < 0) {
        std::fprintf(stderr, "gpu_aggregation: ERROR: shape %s: %s\n", s.name, engine.message().c_str());
        return 1;
      }
      if (&s == &shapes[0]) default_gbps = gbps;
      std::printf(" %9.2f", gbps);
    }
    const double ratio = default_gbps / c.request_gbps;
    missed += ratio < kRequestTarget;
    std::printf(" | %7.2f%s\n", ratio, ratio >= kRequestTarget ? " " : "!");
  }
  std::printf(
      "\nGB/s of gradient (wire bytes); h2d: gradient only; d2h: weights only (GB/s of weights); memcpy: pageable ->\n"
      "pinned on the host (the copy a push adds before its upload). Target: default/ceiling >= %.2f; '!' marks a\n"
      "miss (%d of 3). Shapes: in order = the last copy-back on the kernel's stream; 512K = chunks of 512 KiB;\n"
      "pageable = uploaded from the caller's pageable memory (the driver stages it); chunk 4 MiB unless named.\n",
      kRequestTarget, missed);
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
    else if (arg == "--threads" && has_value)
      a.threads = std::atoi(argv[++i]);
    else if (arg == "--only" && has_value &&
             (std::string(argv[i + 1]) == "kernels" || std::string(argv[i + 1]) == "requests"))
      a.only = argv[++i];
    else {
      std::fprintf(stderr,
                   "usage: gpu_aggregation [--elements N] [--reps R] [--request-bytes B] [--threads T] "
                   "[--only kernels|requests] (got '%s')\n",
                   arg.c_str());
      return 2;
    }
  }
  if (a.elements == 0 || a.reps <= 0 || a.threads <= 0 || a.request_bytes == 0 || a.request_bytes % 4 != 0 ||
      kShardBytes % a.request_bytes != 0) {
    std::fprintf(stderr,
                 "gpu_aggregation: --elements, --reps and --threads must be > 0, --request-bytes a multiple of 4 that "
                 "divides 256 MiB\n");
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
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  std::printf(
      "gpu_aggregation: gpu:0 = %s (sm_%d%d, %d multiprocessors, %.0f GiB, L2 %d MiB), CUDA driver %d.%d, "
      "runtime %d.%d\n\n",
      prop.name, prop.major, prop.minor, prop.multiProcessorCount, prop.totalGlobalMem / double(1ull << 30),
      prop.l2CacheSize >> 20, driver / 1000, driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10);
  if (a.only != "requests")
    if (int rc = kernel_figures(a, prop.multiProcessorCount); rc != 0) return rc;
  return a.only == "kernels" ? 0 : engine_figures(a);
}
