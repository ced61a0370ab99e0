#include "ps_backend/checkpoint/checkpoint.h"

#include <vector>

#include "ps_backend/config/lu_options.h"

namespace blockps {
namespace {

// The file is there and readable but is not a checkpoint this shard can use.
Status bad_file(std::string why) { return Status::Error(StatusCode::invalid_argument, std::move(why)); }

// The shard's config the header's options text describes, checked against the header's block count and the
// geometry it records (a file written by the Python package records the geometry it computed and the options it
// was given: they must agree).
Result<CheckpointHeader> shard_header(const CheckpointFileHeader& file, const std::string& path) {
  const Result<LuOptions> opts = parse_lu_options("role=grad;" + file.options, 1);
  if (!opts.ok()) return bad_file(path + ": checkpoint options: " + opts.message());
  CheckpointHeader h{opts->config, file.created_unix, file.tenancy};
  const ShardGeometry& g = h.config.geometry;
  if (Status geometry = check_geometry(g); !geometry.ok()) return bad_file(path + ": " + geometry.message());
  if (file.blocks != g.blocks())
    return bad_file(path + ": checkpoint block count " + std::to_string(file.blocks) +
                    " does not match its geometry (" + std::to_string(g.blocks()) + " blocks)");
  if (file.geometry && !(*file.geometry == checkpoint_geometry(h.config)))
    return bad_file(path + ": checkpoint records geometry " + to_string(*file.geometry) + ", its options (" +
                    file.options + ") give " + to_string(checkpoint_geometry(h.config)));
  return h;
}

}  // namespace

namespace {
// Whether the shard's checkpoints keep its residuals, after the optimizer's slots.
bool keeps_residuals(const ShardConfig& config) {
  return config.optimizer.kind == OptimizerKind::average && config.rounds.compress.has_value();
}
}  // namespace

CheckpointGeometry checkpoint_geometry(const ShardConfig& config) {
  return {config.geometry.elements(), config.geometry.block_elements(),
          static_cast<std::uint32_t>(state_slots(config.optimizer.kind) + (keeps_residuals(config) ? 1 : 0))};
}

Result<CheckpointHeader> read_checkpoint_header(const std::string& path) {
  const Result<CheckpointFileHeader> file = read_checkpoint_file_header(path);
  if (!file.ok()) return file.status();
  return shard_header(*file, path);
}

Status load_checkpoint(const std::string& path, ModelShard& shard) {
  const auto body_geometry = [&](const CheckpointFileHeader& file) -> Result<CheckpointGeometry> {
    const Result<CheckpointHeader> header = shard_header(file, path);
    if (!header.ok()) return header.status();
    const ShardConfig& c = header->config;
    if (!(c.geometry == shard.geometry()) || c.optimizer.kind != shard.params().kind)
      return Status::Error(StatusCode::mismatch, path + ": checkpoint shape differs from the shard it is loaded into");
    return checkpoint_geometry(c);
  };
  return read_checkpoint_file(path, body_geometry, [&](const CheckpointBlockRecord& r) -> Status {
    if (shard.restore_block(r.index, r.step, r.weights, r.state[0], r.state[1])) return Status::Ok();
    const Status engine = shard.engine_status();
    return Status::Error(path + ": block " + std::to_string(r.index) + " " +
                         (engine.ok() ? "does not fit the shard" : "not restored: " + engine.message()));
  });
}

Status load_checkpoint_residuals(const std::string& path, CompressedAverages& averages) {
  bool has_residuals = false;
  std::uint32_t slot = 0;  // the residuals' state slot, after the optimizer's
  const auto body_geometry = [&](const CheckpointFileHeader& file) -> Result<CheckpointGeometry> {
    const Result<CheckpointHeader> header = shard_header(file, path);
    if (!header.ok()) return header.status();
    has_residuals = keeps_residuals(header->config);
    slot = static_cast<std::uint32_t>(state_slots(header->config.optimizer.kind));
    return checkpoint_geometry(header->config);
  };
  return read_checkpoint_file(path, body_geometry, [&](const CheckpointBlockRecord& r) -> Status {
    if (!has_residuals || averages.restore_residual(r.index, r.state[slot])) return Status::Ok();
    return Status::Error(path + ": block " + std::to_string(r.index) + "'s residuals do not fit the shard");
  });
}

Result<CheckpointWritten> write_checkpoint(const std::string& path, const ModelShard& shard, const ShardConfig& config,
                                           const ShardTenancy& tenancy, const CompressedAverages* residuals) {
  const CheckpointGeometry geometry = checkpoint_geometry(config);
  CheckpointWritten written;
  // Each block is copied out under its lock and written after the lock is released: a push to a block never
  // waits for the disk.
  std::vector<float> staged;
  const auto give = [&](std::uint64_t b, CheckpointBlockRecord& r) -> Status {
    const bool visited = shard.visit_block(b, [&](const BlockView& v) {
      r.step = v.step;
      staged.assign(v.weights.begin(), v.weights.end());
      for (int s = 0; s < state_slots(config.optimizer.kind); ++s)
        staged.insert(staged.end(), v.state[s].begin(), v.state[s].end());
    });
    if (keeps_residuals(config)) {
      const std::size_t n = shard.geometry().elements_in_block(b);
      const std::vector<float> residual = residuals ? residuals->residual(b) : std::vector<float>(n, 0.0f);
      staged.insert(staged.end(), residual.begin(), residual.end());
    }
    // A GPU engine that failed stops the visit: that must not pass for a whole checkpoint.
    if (!visited)
      return Status::Error(path + ": checkpoint not written: block " + std::to_string(b) +
                           " unreadable: " + shard.engine_status().message());
    const std::size_t n = staged.size() / (1 + geometry.state_slots);
    r.weights = {staged.data(), n};
    for (std::uint32_t s = 0; s < geometry.state_slots; ++s) r.state[s] = {staged.data() + (s + 1) * n, n};
    written.block_steps += r.step;
    return Status::Ok();
  };
  if (Status replaced = write_checkpoint_file(path, format_shard_options(config), geometry, tenancy, give);
      !replaced.ok())
    return replaced;
  return written;
}

}  // namespace blockps
