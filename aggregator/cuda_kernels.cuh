// The CUDA engine's fused optimizer kernel (nvcc only): one launch applies a step to up to kMaxLaunchBlocks
// block pieces, each with its own step constants. The element math is ElementUpdate<K> (optimizer.h), the same
// definition the CPU engine runs; this file only adds the loop. Built with -fmad=false, so that nvcc does not
// fuse a*b+c into an FMA where the CPU (built with -ffp-contract=off) rounds twice: the results are bit-identical.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "aggregator/optimizer.h"
#include "aggregator/update_dispatch.h"
#include "aggregator/wire_dtype.h"

namespace blockps::cuda {

constexpr int kMaxLaunchBlocks = 32;  // pieces per launch: keeps the parameter block ~2 KiB (limit 4 KiB)
constexpr int kThreadsPerBlock = 256;

struct LaunchPiece {
  std::uint64_t element;     // first element of the shard (index into w, s0, s1)
  std::uint64_t count;       // elements
  std::uint64_t grad_index;  // first element in the launch's gradient buffer
  StepConstants constants;
};

struct Launch {
  int pieces = 0;
  std::uint64_t max_count = 0;
  LaunchPiece piece[kMaxLaunchBlocks];
};

template <OptimizerKind K>
inline constexpr int kSlots = state_slots(K);  // evaluated on the host: device code sees a constant

template <OptimizerKind K, WireDtype D>
__global__ void __launch_bounds__(kThreadsPerBlock)
    fused_update_kernel(const Launch launch, float* __restrict__ w, const void* __restrict__ g, float* __restrict__ s0,
                        float* __restrict__ s1) {
  const LaunchPiece& piece = launch.piece[blockIdx.y];
  const StepConstants k = piece.constants;
  const std::uint64_t stride = std::uint64_t{gridDim.x} * blockDim.x;
  for (std::uint64_t i = std::uint64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < piece.count; i += stride) {
    const std::uint64_t e = piece.element + i;
    float weight = w[e];
    float state0 = 0.0f;
    float state1 = 0.0f;
    if constexpr (kSlots < K >> 0) state0 = s0[e];
    if constexpr (kSlots < K >> 1) state1 = s1[e];
    ElementUpdate<K>::apply(k, weight, load_wire<D>(g, piece.grad_index + i), state0, state1);
    w[e] = weight;
    if constexpr (kSlots < K >> 0) s0[e] = state0;
    if constexpr (kSlots < K >> 1) s1[e] = state1;
  }
}

/// Enqueue one fused update on `stream` (g in device memory, `dtype` elements). Returns the launch error.
inline cudaError_t launch_update(OptimizerKind kind, WireDtype dtype, const Launch& launch, float* w, const void* g,
                                 float* s0, float* s1, cudaStream_t stream) {
  if (launch.pieces <= 0) return cudaSuccess;
  const auto blocks_x = static_cast<unsigned>((launch.max_count + kThreadsPerBlock - 1) / kThreadsPerBlock);
  const dim3 grid(blocks_x == 0 ? 1 : blocks_x, static_cast<unsigned>(launch.pieces));
  return dispatch_update(
      kind, dtype,
      [&]<OptimizerKind K, WireDtype D>() {
        fused_update_kernel<K, D><<<grid, kThreadsPerBlock, 0, stream>>>(launch, w, g, s0, s1);
        return cudaGetLastError();
      },
      [] { return cudaErrorInvalidValue; });
}

}  // namespace blockps::cuda
