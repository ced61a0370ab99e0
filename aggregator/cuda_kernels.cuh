// The CUDA engine's fused optimizer kernel (nvcc only): one launch applies a step to up to kMaxLaunchPieces
// pieces of a shard, each with its own step constants. The element math is ElementUpdate<K> (optimizer.h) and the
// wire conversion load_wire<D> (wire_dtype.h), the same definitions the CPU engine runs; this file only adds how
// the GPU walks and loads the elements. Built with -fmad=false, so that nvcc does not fuse a*b+c into an FMA
// where the CPU (built with -ffp-contract=off) rounds twice: the results are bit-identical.
//
// The walk (docs/ARCHITECTURE.md, "Parts"): each thread takes kVector consecutive elements at a time with one
// 16-byte load per f32 array (weights, each state slot, an f32 gradient; 8 bytes of a 16-bit gradient), in a
// grid-stride loop; by default the grid has a thread per vector (LaunchShape), so that a large piece is one launch
// that streams at memory bandwidth. The few elements before the first 16-byte boundary and after the last vector are
// updated one per thread. Contiguous pieces with the same step constants are merged into one (pack_chunk), so a
// request whose blocks are at the same step is one piece however many blocks it spans.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <span>
#include <type_traits>

#include "aggregator/optimizer.h"
#include "aggregator/shard_store.h"
#include "aggregator/update_dispatch.h"
#include "aggregator/wire_convert.h"

namespace blockps::cuda {

constexpr int kMaxLaunchPieces = 32;  // pieces per launch: keeps the parameter block ~2 KiB (limit 4 KiB)
constexpr int kThreadsPerBlock = 256;
constexpr int kVector = 4;  // elements per vector access: 16 bytes of f32 (8 of a 16-bit gradient)

struct LaunchPiece {
  std::uint64_t element;     // first element of the shard (index into w, s0, s1)
  std::uint64_t count;       // elements
  std::uint64_t grad_index;  // first element in the launch's gradient buffer; equal to `element` modulo kVector
  StepConstants constants;
};

struct Launch {
  int pieces = 0;
  std::uint64_t max_count = 0;
  LaunchPiece piece[kMaxLaunchPieces];
};

/// How wide a launch may be. multiprocessors <= 0 (the default, 3-7% faster than the capped shapes on an H200:
/// bench/RESULTS.md): one vector per thread, as many blocks as that takes; else at most multiprocessors *
/// ctas_per_multiprocessor thread blocks (0: as many as fit on a multiprocessor at once, from the kernel's
/// occupancy), which loop over the piece.
struct LaunchShape {
  int multiprocessors = 0;
  int ctas_per_multiprocessor = 0;
};

/// Bitwise equality: two pieces merge only when every element would get exactly the same arithmetic.
inline bool same_constants(const StepConstants& a, const StepConstants& b) {
  const auto bits = [](float f) { return std::bit_cast<std::uint32_t>(f); };
  return bits(a.lr) == bits(b.lr) && bits(a.weight_decay) == bits(b.weight_decay) &&
         bits(a.momentum) == bits(b.momentum) && bits(a.beta1) == bits(b.beta1) && bits(a.beta2) == bits(b.beta2) &&
         bits(a.eps) == bits(b.eps) && bits(a.bias_correction1) == bits(b.bias_correction1) &&
         bits(a.bias_correction2) == bits(b.bias_correction2) && a.nesterov == b.nesterov;
}

/// Adds `p` to `launch`, merged into the last piece when it continues it (next element, next gradient index) with
/// the same constants. False, and nothing added, when the launch already has kMaxLaunchPieces other pieces.
inline bool append_piece(Launch& launch, const LaunchPiece& p) {
  if (launch.pieces > 0) {
    LaunchPiece& last = launch.piece[launch.pieces - 1];
    if (last.element + last.count == p.element && last.grad_index + last.count == p.grad_index &&
        same_constants(last.constants, p.constants)) {
      last.count += p.count;
      launch.max_count = std::max(launch.max_count, last.count);
      return true;
    }
  }
  if (launch.pieces == kMaxLaunchPieces) return false;
  launch.piece[launch.pieces++] = p;
  launch.max_count = std::max(launch.max_count, p.count);
  return true;
}

/// Where pack_chunk goes on in a request's updates: update `update`, of which `done` elements are packed.
struct ChunkCursor {
  std::size_t update = 0;
  std::uint64_t done = 0;
  bool at_end(std::span<const BlockUpdate> updates) const { return update >= updates.size(); }
};

/// One launch's share of a request: `elements` consecutive elements of the shard from `element_first`, whose
/// gradient is the request's elements [grad_first, grad_first + elements). The launch reads that gradient at
/// element `grad_offset` of its buffer (element_first modulo kVector, so that gradient and weights share their
/// 16-byte boundaries): upload it there.
struct Chunk {
  std::uint64_t element_first = 0;
  std::uint64_t grad_first = 0;
  std::uint64_t grad_offset = 0;
  std::uint64_t elements = 0;
};

/// Packs the next chunk of `updates` (a request's: consecutive in the shard and in the gradient, as ModelShard
/// makes them) into `launch`, from `at` on: at most `max_elements` elements (>= 1; an update is split where the
/// limit falls) and kMaxLaunchPieces pieces after merging. Advances `at`.
inline Chunk pack_chunk(std::span<const BlockUpdate> updates, ChunkCursor& at, std::uint64_t max_elements,
                        Launch& launch) {
  Chunk c;
  launch = Launch{};
  if (at.at_end(updates)) return c;
  c.element_first = updates[at.update].element + at.done;
  c.grad_first = updates[at.update].grad_index + at.done;
  c.grad_offset = c.element_first % kVector;
  while (!at.at_end(updates) && c.elements < max_elements) {
    const BlockUpdate& u = updates[at.update];
    const std::uint64_t take = std::min(u.count - at.done, max_elements - c.elements);
    const LaunchPiece piece{.element = u.element + at.done,
                            .count = take,
                            .grad_index = u.grad_index + at.done - c.grad_first + c.grad_offset,
                            .constants = u.constants};
    if (!append_piece(launch, piece)) break;
    c.elements += take;
    at.done += take;
    if (at.done == u.count) {
      ++at.update;
      at.done = 0;
    }
  }
  return c;
}

template <OptimizerKind K>
inline constexpr int kSlots = state_slots(K);  // evaluated on the host: device code sees a constant

// The gradient's vector of kVector elements: 16 bytes of f32, 8 of a 16-bit dtype.
template <WireDtype D>
using GradVector = std::conditional_t<D == WireDtype::f32, float4, uint2>;

template <OptimizerKind K, WireDtype D>
__device__ __forceinline__ void update_element(const StepConstants& k, float* __restrict__ w,
                                               const void* __restrict__ g, float* __restrict__ s0,
                                               float* __restrict__ s1, std::uint64_t e, std::uint64_t gi) {
  float weight = w[e];
  float state0 = 0.0f;
  float state1 = 0.0f;
  if constexpr (kSlots < K >> 0) state0 = s0[e];
  if constexpr (kSlots < K >> 1) state1 = s1[e];
  ElementUpdate<K>::apply(k, weight, load_wire<D>(g, gi), state0, state1);
  w[e] = weight;
  if constexpr (kSlots < K >> 0) s0[e] = state0;
  if constexpr (kSlots < K >> 1) s1[e] = state1;
}

// Elements e .. e+kVector-1 (e and gi multiples of kVector): every load and store one vector wide.
template <OptimizerKind K, WireDtype D>
__device__ __forceinline__ void update_vector(const StepConstants& k, float* __restrict__ w, const void* __restrict__ g,
                                              float* __restrict__ s0, float* __restrict__ s1, std::uint64_t e,
                                              std::uint64_t gi) {
  float4 weight = *reinterpret_cast<const float4*>(w + e);
  float4 state0{};
  float4 state1{};
  if constexpr (kSlots < K >> 0) state0 = *reinterpret_cast<const float4*>(s0 + e);
  if constexpr (kSlots < K >> 1) state1 = *reinterpret_cast<const float4*>(s1 + e);
  const GradVector<D> grad = static_cast<const GradVector<D>*>(g)[gi / kVector];
  ElementUpdate<K>::apply(k, weight.x, load_wire<D>(&grad, 0), state0.x, state1.x);
  ElementUpdate<K>::apply(k, weight.y, load_wire<D>(&grad, 1), state0.y, state1.y);
  ElementUpdate<K>::apply(k, weight.z, load_wire<D>(&grad, 2), state0.z, state1.z);
  ElementUpdate<K>::apply(k, weight.w, load_wire<D>(&grad, 3), state0.w, state1.w);
  *reinterpret_cast<float4*>(w + e) = weight;
  if constexpr (kSlots < K >> 0) *reinterpret_cast<float4*>(s0 + e) = state0;
  if constexpr (kSlots < K >> 1) *reinterpret_cast<float4*>(s1 + e) = state1;
}

template <OptimizerKind K, WireDtype D>
__global__ void __launch_bounds__(kThreadsPerBlock)
    fused_update_kernel(const Launch launch, float* __restrict__ w, const void* __restrict__ g, float* __restrict__ s0,
                        float* __restrict__ s1) {
  const LaunchPiece& piece = launch.piece[blockIdx.y];
  const StepConstants k = piece.constants;
  const std::uint64_t first = piece.element;
  const std::uint64_t count = piece.count;
  const std::uint64_t grad = piece.grad_index;
  const std::uint64_t to_boundary = (kVector - first % kVector) % kVector;
  const std::uint64_t head = count < to_boundary ? count : to_boundary;
  const std::uint64_t vectors = (count - head) / kVector;
  const std::uint64_t thread = std::uint64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  const std::uint64_t stride = std::uint64_t{gridDim.x} * blockDim.x;
  for (std::uint64_t v = thread; v < vectors; v += stride)
    update_vector<K, D>(k, w, g, s0, s1, first + head + v * kVector, grad + head + v * kVector);
  // The elements before the first vector and after the last (fewer than kVector each): one per thread.
  const std::uint64_t body_end = head + vectors * kVector;
  if (thread < head) {
    update_element<K, D>(k, w, g, s0, s1, first + thread, grad + thread);
  } else if (thread - head < count - body_end) {
    const std::uint64_t i = body_end + (thread - head);
    update_element<K, D>(k, w, g, s0, s1, first + i, grad + i);
  }
}

inline bool aligned(const void* p, std::uintptr_t bytes) { return reinterpret_cast<std::uintptr_t>(p) % bytes == 0; }

/// Enqueue one fused update on `stream` (g in device memory, `dtype` elements; w, s0, s1 16-byte aligned, g aligned
/// to a vector of its dtype, each piece's grad_index equal to its element modulo kVector, as pack_chunk makes
/// them). Returns the launch error, or cudaErrorInvalidValue when the alignment is not met.
inline cudaError_t launch_update(OptimizerKind kind, WireDtype dtype, const Launch& launch, float* w, const void* g,
                                 float* s0, float* s1, const LaunchShape& shape, cudaStream_t stream) {
  if (launch.pieces <= 0) return cudaSuccess;
  for (int i = 0; i < launch.pieces; ++i)
    if (launch.piece[i].element % kVector != launch.piece[i].grad_index % kVector) return cudaErrorInvalidValue;
  if (!aligned(w, 16) || !aligned(s0, 16) || !aligned(s1, 16) || !aligned(g, wire_size(dtype) * kVector))
    return cudaErrorInvalidValue;
  return dispatch_update(
      kind, dtype,
      [&]<OptimizerKind K, WireDtype D>() {
        // Thread blocks of this kernel one multiprocessor holds at once (the same for every GPU of a build's
        // architecture; asked once).
        static const int resident = [] {
          int n = 0;
          if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, fused_update_kernel<K, D>, kThreadsPerBlock, 0) !=
              cudaSuccess)
            n = 0;
          return std::max(n, 1);
        }();
        const std::uint64_t vectors = std::max<std::uint64_t>(1, (launch.max_count + kVector - 1) / kVector);
        std::uint64_t blocks_x = (vectors + kThreadsPerBlock - 1) / kThreadsPerBlock;
        if (shape.multiprocessors > 0) {
          const int per_multiprocessor = shape.ctas_per_multiprocessor > 0 ? shape.ctas_per_multiprocessor : resident;
          const std::uint64_t fit = std::uint64_t(shape.multiprocessors) * per_multiprocessor / launch.pieces;
          blocks_x = std::min(blocks_x, std::max<std::uint64_t>(fit, 1));
        }
        const dim3 grid(static_cast<unsigned>(std::min<std::uint64_t>(blocks_x, 0x7fffffffu)),
                        static_cast<unsigned>(launch.pieces));
        fused_update_kernel<K, D><<<grid, kThreadsPerBlock, 0, stream>>>(launch, w, g, s0, s1);
        return cudaGetLastError();
      },
      [] { return cudaErrorInvalidValue; });
}

}  // namespace blockps::cuda
