// The CUDA store's pipeline shape, for whoever compares shapes (bench/gpu_aggregation, the GPU tests). Shards
// get make_cuda_store() of shard_store.h, which is this with the default shape. CUDA builds only.
#pragma once

#include <cstdint>
#include <memory>

#include "aggregator/optimizer.h"
#include "aggregator/shard_store.h"
#include "contract/result.h"

namespace blockps {

/// How a push moves through the GPU (aggregator/cuda_store.cu). Defaults: the shape of 2026-11-26 for the copies,
/// which no other shape beat for 1 MiB pushes on an H200, and the fastest launch shape (bench/RESULTS.md, "CUDA
/// engine (issue 41)").
struct CudaStoreShape {
  /// Gradient bytes per pipeline stage, at least 16: a push of more is cut into stages that overlap one another
  /// (each costs its own copies and launch).
  std::uint64_t chunk_bytes = 4u << 20;
  /// true: the gradient is copied into a pinned staging slot, then uploaded; false: uploaded from the caller's
  /// (pageable) memory, which the driver stages itself.
  bool stage_in_pinned = true;
  /// The last stage's updated weights are copied back on the stream that ran its kernel (true), or on the lane's
  /// copy-back stream after an event, as the earlier stages' are (false).
  bool last_copy_back_in_order = false;
  /// Thread blocks per multiprocessor of a launch: -1, one vector per thread and as many blocks as that takes;
  /// 0, as many as fit at once (from the kernel's occupancy), looping; N, that many, looping.
  int ctas_per_multiprocessor = -1;
};

/// make_cuda_store (shard_store.h) with `shape`: the store or the reason it cannot be made (check_device(), out
/// of device or pinned memory, a chunk below 16 bytes).
Result<std::unique_ptr<ShardStore>> make_cuda_store(int ordinal, std::uint64_t elements, OptimizerKind kind,
                                                    const CudaStoreShape& shape);

}  // namespace blockps
