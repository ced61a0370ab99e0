// Shard checkpoints: one file per shard (the LUs' --backing-store path), written crash-safely (temp file,
// fsync, rename, fsync of the directory) so that a crash at any moment leaves the previous or the new one.
//
// Layout (little-endian): "BLKPSCK1" | u32 header length | header (JSON: format, options, blocks, created) |
// per block: u64 step, f32 weights[n], f32 state slots[n]... | u32 CRC-32 of all preceding bytes | "BLKPSEND".
#pragma once

#include <cstdint>
#include <string>

#include "aggregator/model_shard.h"
#include "contract/status.h"
#include "ps_backend/shard_config.h"

namespace blockps {

struct CheckpointHeader {
  ShardConfig config;
  std::uint64_t created_unix = 0;
};

/// True when `path` holds a checkpoint to load: it exists and is not empty (an empty file, as tgt-admin needs
/// the backing store to exist, means "no checkpoint yet").
bool checkpoint_exists(const std::string& path);

/// Read and check only the header (to compare configs before allocating a shard).
Result<CheckpointHeader> read_checkpoint_header(const std::string& path);

/// Load a whole checkpoint into `shard`, whose geometry and optimizer kind must equal the header's. Returns ok
/// or the reason (truncated, CRC mismatch: invalid_argument; I/O error: io; another shape: mismatch). On error the
/// shard's contents are unspecified: load into a shard that is not yet serving.
Status load_checkpoint(const std::string& path, ModelShard& shard);

/// Write `shard` with `config` as its header; ok or the reason. The old file stays intact on any failure.
Status write_checkpoint(const std::string& path, const ModelShard& shard, const ShardConfig& config);

}  // namespace blockps
