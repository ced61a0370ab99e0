// A shard's checkpoint: its ModelShard and ShardConfig in the checkpoint file (contract/checkpoint_file.h: the
// format, its crash-safe write, copy_checkpoint, checkpoint_exists and ShardTenancy). This adapter records the
// config as its options text (ps_backend/config/lu_options.h) and reads it back, which is how a file that does not
// record its body's geometry (written before issue 49) is still loaded: the geometry follows from the options.
#pragma once

#include <cstdint>
#include <string>

#include "aggregator/model_shard.h"
#include "contract/checkpoint_file.h"
#include "contract/result.h"
#include "ps_backend/config/shard_config.h"
#include "ps_backend/rounds/compressed_averages.h"

namespace blockps {

struct CheckpointHeader {
  ShardConfig config;
  std::uint64_t created_unix = 0;
  ShardTenancy tenancy;  // a format 1 file: unclaimed, no place
};

/// The body's geometry of a shard with this config: its f32 elements, its block's, and its state slots: the
/// optimizer's, and for an averaging shard with compress= one more, its residuals (CompressedAverages: the error
/// feedback of its compressed averages).
CheckpointGeometry checkpoint_geometry(const ShardConfig& config);

/// Read and check only the header (to compare configs before allocating a shard): the file's fields, its options
/// parsed, and the geometry it records (if it does) equal to the options'.
Result<CheckpointHeader> read_checkpoint_header(const std::string& path);

/// Load a whole checkpoint into `shard`, whose geometry and optimizer kind must equal the header's. Returns ok
/// or the reason (truncated, CRC mismatch: invalid_argument; I/O error: io; another shape: mismatch). On error the
/// shard's contents are unspecified: load into a shard that is not yet serving.
Status load_checkpoint(const std::string& path, ModelShard& shard);
/// An averaging shard's residuals from the checkpoint at `path` into `averages`. Ok, restoring nothing, when the
/// file holds none (written without compress=); errors as load_checkpoint.
Status load_checkpoint_residuals(const std::string& path, CompressedAverages& averages);

/// What a checkpoint written holds, as the status page reports it.
struct CheckpointWritten {
  std::uint64_t block_steps = 0;  // the blocks' step counts in the file, summed (each taken under its block's lock)
};

/// Write `shard` with `config` and `tenancy` in its header, and `residuals` where the config keeps them (an averaging
/// shard with compress=; zeros when null); what it wrote, or the reason. The old file stays intact on any failure.
Result<CheckpointWritten> write_checkpoint(const std::string& path, const ModelShard& shard, const ShardConfig& config,
                                           const ShardTenancy& tenancy = {},
                                           const CompressedAverages* residuals = nullptr);

}  // namespace blockps
