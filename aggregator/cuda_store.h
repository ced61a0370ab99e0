// The CUDA store's pipeline shape, for whoever compares shapes (bench/gpu_aggregation, the GPU tests). Shards
// get make_cuda_store() of shard_store.h, which is this with the default shape. CUDA builds only.
#pragma once

#include <cstdint>
#include <memory>

#include "aggregator/optimizer.h"
#include "aggregator/shard_store.h"
#include "contract/status.h"

namespace blockps {

/// How a push moves through the GPU (aggregator/cuda_store.cu). Defaults: the shape measured fastest for 1 MiB
/// pushes (bench/RESULTS.md, "CUDA engine (issue 41)").
struct CudaStoreShape {
  /// Gradient bytes per pipeline stage (staging copy, upload, kernel, copy-back), at least 16: a push of more is
  /// cut into stages that overlap one another.
  std::uint64_t chunk_bytes = 512u << 10;
  /// The last stage's updated weights are copied back on the stream that ran its kernel (true), or on the
  /// lane's copy-back stream after an event, as the earlier stages' are (false: one more cross-stream wait).
  bool last_copy_back_in_order = true;
  /// Thread blocks per multiprocessor of a launch (0: as many as fit at once).
  int ctas_per_multiprocessor = 0;
};

/// make_cuda_store (shard_store.h) with `shape`: the store or the reason it cannot be made (check_device(), out
/// of device or pinned memory, a chunk below 16 bytes).
Result<std::unique_ptr<ShardStore>> make_cuda_store(int ordinal, std::uint64_t elements, OptimizerKind kind,
                                                    const CudaStoreShape& shape);

}  // namespace blockps
