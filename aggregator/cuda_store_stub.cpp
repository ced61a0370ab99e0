// The CUDA engine's entry points in a build without nvcc: there is no GPU engine, and every GPU device is
// refused with that reason (check_device()).
#include "aggregator/shard_store.h"

namespace blockps {

bool cuda_engine_built() { return false; }

int cuda_device_count(std::string* why) {
  if (why) *why = "this build has no CUDA engine";
  return 0;
}

Result<std::unique_ptr<ShardStore>> make_cuda_store(int ordinal, std::uint64_t /*elements*/,
                                                    std::uint64_t /*block_elements*/, OptimizerKind /*kind*/) {
  return check_device(Device::cuda(ordinal));
}

}  // namespace blockps
