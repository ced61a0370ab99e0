// Shard checkpoints: one file per shard (the LUs' --backing-store path), written crash-safely (temp file,
// fsync, rename, fsync of the directory) so that a crash at any moment leaves the previous or the new one.
//
// Layout (little-endian): "BLKPSCK1" | u32 header length | header (JSON: format, options, blocks, created, and
// from format 2 job and place when the shard has them) | per block: u64 step, f32 weights[n], f32 state
// slots[n]... | u32 CRC-32 of all preceding bytes | "BLKPSEND". Format 1 files (no job, no place) still load.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "aggregator/model_shard.h"
#include "contract/place.h"
#include "contract/result.h"
#include "ps_backend/config/shard_config.h"

namespace blockps {

/// Whose the shard is: the job that holds it (not its sessions: they end with the process) and its place.
struct ShardTenancy {
  std::string job;  // "" when unclaimed
  std::uint64_t claimed_unix = 0;
  std::optional<Place> place;
  bool operator==(const ShardTenancy&) const = default;
};

struct CheckpointHeader {
  ShardConfig config;
  std::uint64_t created_unix = 0;
  ShardTenancy tenancy;  // a format 1 file: unclaimed, no place
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

/// What a checkpoint written holds, as the status page reports it.
struct CheckpointWritten {
  std::uint64_t block_steps = 0;  // the blocks' step counts in the file, summed (each taken under its block's lock)
};

/// Write `shard` with `config` and `tenancy` in its header; what it wrote, or the reason. The old file stays
/// intact on any failure.
Result<CheckpointWritten> write_checkpoint(const std::string& path, const ModelShard& shard, const ShardConfig& config,
                                           const ShardTenancy& tenancy = {});

/// Copy the checkpoint file `from` to `to` byte for byte, as crash-safely as write_checkpoint writes (a crash
/// leaves the old `to` or the new one); ok or the reason.
Status copy_checkpoint(const std::string& from, const std::string& to);

}  // namespace blockps
