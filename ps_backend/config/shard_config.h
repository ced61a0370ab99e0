// What describes a shard: its geometry, optimizer, first weights, rounds policy and device. Shared by all LUs over
// one checkpoint path and recorded in the checkpoint's header (as the options text, ps_backend/config/lu_options.h).
#pragma once

#include <cstdint>
#include <string>

#include "aggregator/model_shard.h"
#include "aggregator/optimizer.h"
#include "ps_backend/config/round_policy.h"

namespace blockps {

/// How a new shard's weights start (ignored when a checkpoint is loaded).
struct InitSpec {
  enum class Kind { zeros, uniform, normal, file } kind = Kind::zeros;
  double scale = 0;  // uniform: a (U(-a, a)); normal: standard deviation
  std::string path;  // file: raw wire-dtype bytes, exactly `size` bytes
  bool operator==(const InitSpec&) const = default;
};

/// Everything that describes a shard (shared by all LUs over one checkpoint path).
struct ShardConfig {
  ShardGeometry geometry;
  OptimizerParams optimizer;
  InitSpec init;
  std::uint64_t seed = 1;
  std::uint32_t checkpoint_s = 0;  // 0: only on SYNCHRONIZE CACHE and close
  // A second file every checkpoint is copied to once written (an absolute path on other storage, so that a host
  // lost with its disk leaves a checkpoint behind); "": none.
  std::string checkpoint_copy;
  // Seconds the job holding the shard may send no command before another job's job= line may claim it (0: never;
  // docs/OPTIONS.md, "Jobs and places").
  std::uint32_t claim_idle_s = 30;
  RoundPolicy rounds;
  std::string device = "cpu";  // cpu, auto or gpu:N as given (ServedShard resolves auto)
};

}  // namespace blockps
