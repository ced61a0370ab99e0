// One shard of a model: f32 master weights, optimizer state and per-block step counts, cut into blocks that are
// the unit of locking. The weights and state live with the shard's engine (host memory for the CPU, GPU memory
// with a host mirror for CUDA: see shard_store.h); ranges, blocks, locks and steps are handled here, the same
// for every engine. Offsets and lengths are in wire bytes (what the LU exposes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <shared_mutex>
#include <span>
#include <string>
#include <vector>

#include "aggregator/cpu_engine.h"
#include "aggregator/optimizer.h"
#include "aggregator/shard_store.h"
#include "aggregator/wire_convert.h"
#include "contract/result.h"

namespace blockps {

/// The shape of a shard. `bytes` and `block_bytes` are wire bytes; the last block may be shorter.
struct ShardGeometry {
  std::uint64_t bytes = 0;
  WireDtype dtype = WireDtype::f32;
  std::uint32_t block_bytes = 256 * 1024;

  std::uint64_t elements() const { return bytes / wire_size(dtype); }
  std::uint64_t block_elements() const { return block_bytes / wire_size(dtype); }
  std::uint64_t blocks() const { return block_bytes == 0 ? 0 : (bytes + block_bytes - 1) / block_bytes; }
  /// Elements of block b (block_elements() but for a shorter last block); 0 for b >= blocks().
  std::uint64_t elements_in_block(std::uint64_t b) const;
  bool operator==(const ShardGeometry&) const = default;
};

/// Ok, or why a geometry is unusable (invalid_argument): bytes 0 or not a multiple of the element size,
/// block_bytes 0 or not a multiple of the element size.
Status check_geometry(const ShardGeometry& g);
/// Ok, or why the wire byte range [offset, offset+len) is not one the data path accepts (invalid_argument): the
/// geometry is unusable, offset or len is not element-aligned, or the range ends beyond the shard.
Status check_range(const ShardGeometry& g, std::uint64_t offset, std::uint64_t len);

/// A read-only view of one block for checkpointing, taken under the block's lock.
struct BlockView {
  std::uint64_t index;
  std::uint64_t step;  // optimizer steps applied to this block so far
  std::span<const float> weights;
  std::span<const float> state[2];  // empty spans for unused slots
};

class ModelShard {
 public:
  /// Weights start at zero, state at zero, steps at zero. `engine` runs the host-side work (the CPU engine's
  /// math, wire conversions of reads; shared by shards; null runs it on the caller's thread). `device` holds
  /// the weights and state and runs the optimizer. A geometry that check_geometry() refuses gives a shard with no
  /// blocks: it holds nothing, and a push or assignment is refused with the geometry's error. The shard, or why
  /// `device` cannot hold it (check_device(), its memory). Host memory that cannot be had is std::bad_alloc, as
  /// everywhere in C++.
  /// `wrap_store`, when given, gets the engine's store and returns the one the shard uses (a test double that
  /// fails on demand: tests/support/faulty_store.h).
  using StoreWrapper = std::function<std::unique_ptr<ShardStore>(std::unique_ptr<ShardStore>)>;
  static Result<std::unique_ptr<ModelShard>> create(const ShardGeometry& geometry, const OptimizerParams& params,
                                                    std::shared_ptr<CpuEngine> engine, Device device = Device::cpu(),
                                                    const StoreWrapper& wrap_store = {});
  /// A shard in host memory (Device::cpu()), which nothing but host memory can refuse: create() for any device.
  ModelShard(const ShardGeometry& geometry, const OptimizerParams& params, std::shared_ptr<CpuEngine> engine,
             const StoreWrapper& wrap_store = {});
  ~ModelShard();
  ModelShard(const ModelShard&) = delete;
  ModelShard& operator=(const ModelShard&) = delete;

  const ShardGeometry& geometry() const { return geometry_; }
  /// Where the weights and state live and the optimizer runs.
  Device device() const;
  /// Ok while the engine works; else why it failed (a GPU fault). Once failed, the data path refuses every call.
  Status engine_status() const;
  OptimizerParams params() const;
  /// Replace hyper-parameters (not the kind: the state layout depends on it); takes effect on the next push.
  void set_params(const OptimizerParams& p);

  // The data path. [offset, offset+len) must lie inside the shard and be element-aligned; callers (the SCSI
  // layer) check that first. Ranges may cover partial blocks; each touched block is locked while it changes,
  // so a concurrent read sees every block either before or after an update, never in between.
  // A range that check_range() refuses is not applied: push/assign change nothing and return that error
  // ("push refused: ..."), read fills `out` with zeros. Otherwise calls that change the shard return ok or the
  // engine's error (engine_status(); only a GPU engine fails).

  /// Apply one optimizer step to every element the gradient (wire dtype) covers; each touched block's step +1.
  Status push_gradient(std::uint64_t offset, std::span<const std::byte> grad);
  /// push_gradient with an f32 gradient whatever the wire dtype (e.g. an average already decoded from several
  /// pushes). `offset` is in wire bytes like every other call; grad.size() elements are updated.
  Status apply_gradient_f32(std::uint64_t offset, std::span<const float> grad);
  /// Current weights in the wire dtype (from host memory: the GPU engine's mirror).
  void read_weights(std::uint64_t offset, std::span<std::byte> out) const;
  /// Overwrite weights (wire dtype in, f32 kept); optimizer state and steps are left as they are.
  Status assign_weights(std::uint64_t offset, std::span<const std::byte> in);

  /// Set every weight from a generator (initialisation; not concurrent with the data path).
  Status fill_weights(const std::function<float(std::uint64_t element)>& value_of);

  /// Visit every block in order, each under its (shared) lock: for checkpoints. The view's spans are valid only
  /// during the call.
  void for_each_block(const std::function<void(const BlockView&)>& visit) const;
  /// Visit one block under its (shared) lock; false when there is no such block or the engine failed to read
  /// its state (engine_status() says why). On a GPU the view holds a copy of the device state.
  bool visit_block(std::uint64_t index, const std::function<void(const BlockView&)>& visit) const;
  /// Optimizer steps applied to block `index` so far (0 for no such block); reads no weights or state.
  std::uint64_t block_step(std::uint64_t index) const;
  /// block_step() summed over every block, each read under its lock in turn (not one instant across blocks).
  std::uint64_t total_block_steps() const;
  /// Restore one block (checkpoint load). Spans must have the block's element count; state spans for the
  /// optimizer's slots only (the others are ignored). False, and nothing changed, when the index is not a block
  /// or a span has the wrong size (or the engine failed: engine_status()).
  bool restore_block(std::uint64_t index, std::uint64_t step, std::span<const float> weights,
                     std::span<const float> state0, std::span<const float> state1);

 private:
  ShardGeometry geometry_;
  mutable std::shared_mutex params_mutex_;
  OptimizerParams params_;
  std::shared_ptr<CpuEngine> engine_;
  Status push(std::uint64_t offset, std::uint64_t len, Gradient grad);
  // Over a store made for the geometry (create(), the host-memory constructor).
  ModelShard(const ShardGeometry& geometry, const OptimizerParams& params, std::shared_ptr<CpuEngine> engine,
             std::unique_ptr<ShardStore> store);

  // per-block step counts and locks, and the engine's store of weights and state
  struct Storage;
  std::unique_ptr<Storage> storage_;
};

}  // namespace blockps
