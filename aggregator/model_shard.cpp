#include "aggregator/model_shard.h"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <new>
#include <optional>
#include <string>

namespace blockps {

std::uint64_t ShardGeometry::elements_in_block(std::uint64_t b) const {
  if (b >= blocks()) return 0;
  return std::min(block_elements(), elements() - b * block_elements());
}

namespace {

bool known_dtype(WireDtype d) { return d == WireDtype::f32 || d == WireDtype::bf16 || d == WireDtype::f16; }

std::string element_size_text(WireDtype d) {
  return std::string("the ") + std::string(to_string(d)) + " element size " + std::to_string(wire_size(d));
}

// The first error of calls made on several threads at once (the CPU engine's pieces of one request).
class FirstError {
 public:
  void keep(Status status) {
    if (status.ok()) return;
    std::lock_guard guard(mutex_);
    if (!first_) first_ = std::move(status);
  }
  Status status() const { return first_.value_or(Status::Ok()); }

 private:
  std::mutex mutex_;
  std::optional<Status> first_;
};

}  // namespace

Status check_geometry(const ShardGeometry& g) {
  const auto refuse = [](std::string why) { return Status::Error(StatusCode::invalid_argument, std::move(why)); };
  if (!known_dtype(g.dtype)) {
    return refuse("dtype " + std::to_string(static_cast<unsigned>(g.dtype)) + " is not one of f32, bf16, f16");
  }
  const std::size_t size = wire_size(g.dtype);
  if (g.bytes == 0 || g.bytes % size != 0) {
    return refuse("shard bytes " + std::to_string(g.bytes) + " must be a positive multiple of " +
                  element_size_text(g.dtype));
  }
  if (g.block_bytes == 0 || g.block_bytes % size != 0) {
    return refuse("block_bytes " + std::to_string(g.block_bytes) + " must be a positive multiple of " +
                  element_size_text(g.dtype));
  }
  return Status::Ok();
}

Status check_range(const ShardGeometry& g, std::uint64_t offset, std::uint64_t len) {
  const auto refuse = [](std::string why) { return Status::Error(StatusCode::invalid_argument, std::move(why)); };
  if (Status geometry = check_geometry(g); !geometry.ok()) return refuse("unusable geometry: " + geometry.message());
  const std::size_t size = wire_size(g.dtype);
  if (offset % size != 0) {
    return refuse("offset " + std::to_string(offset) + " is not a multiple of " + element_size_text(g.dtype));
  }
  if (len % size != 0) {
    return refuse("length " + std::to_string(len) + " is not a multiple of " + element_size_text(g.dtype));
  }
  if (offset > g.bytes || len > g.bytes - offset) {
    return refuse("range at offset " + std::to_string(offset) + " of " + std::to_string(len) +
                  " bytes ends beyond the shard's " + std::to_string(g.bytes) + " bytes");
  }
  return Status::Ok();
}

namespace {

// One cache line per block, so that threads working on neighbouring blocks do not contend for a line.
struct alignas(64) Block {
  std::shared_mutex lock;
  std::uint64_t step = 0;  // guarded by lock
};

// The geometry a shard's storage is laid out for: `g`, or for an unusable one the empty default (no elements, no
// blocks).
ShardGeometry usable(const ShardGeometry& g) { return check_geometry(g).ok() ? g : ShardGeometry{}; }

// The store of `device` for a shard of `layout` (a usable geometry or the empty default), or why there is none.
Result<std::unique_ptr<ShardStore>> make_store(Device device, const ShardGeometry& layout, OptimizerKind kind) {
  if (!device.is_gpu()) return make_cpu_store(layout.elements(), kind);
  return make_cuda_store(device.gpu, layout.elements(), layout.block_elements(), kind);
}

}  // namespace

struct ModelShard::Storage {
  // The shard's geometry, or for an unusable one the empty default: no elements, no blocks.
  ShardGeometry layout;
  int slots = 0;
  std::unique_ptr<Block[]> blocks;
  std::unique_ptr<ShardStore> store;

  // `made`: the store for usable(g) (make_store).
  Storage(const ShardGeometry& g, OptimizerKind kind, std::unique_ptr<ShardStore> made) : store(std::move(made)) {
    if (check_geometry(g).ok()) {
      layout = g;
      slots = state_slots(kind);
      blocks = std::make_unique<Block[]>(layout.blocks());
    }
  }

  float* weights() const { return store->host_weights(); }
  std::uint64_t block_begin(std::uint64_t b) const { return b * layout.block_elements(); }

  /// The part of a request that falls into one block.
  struct Piece {
    std::uint64_t index;  // the block
    Block& block;
    std::uint64_t element;  // first element of the shard it covers
    std::uint64_t count;    // elements
    std::uint64_t first;    // its first element in the request
  };

  /// The blocks [first_block, first_block + pieces) that elements [first, end) touch.
  std::uint64_t first_block(std::uint64_t first) const { return first / layout.block_elements(); }
  std::uint64_t piece_count(std::uint64_t first, std::uint64_t end) const {
    return (end - 1) / layout.block_elements() - first_block(first) + 1;
  }
  Piece piece(std::uint64_t first, std::uint64_t end, std::uint64_t i) const {
    const std::uint64_t b = first_block(first) + i;
    const std::uint64_t begin = std::max(first, block_begin(b));
    const std::uint64_t stop = std::min(end, block_begin(b + 1));
    return Piece{.index = b, .block = blocks[b], .element = begin, .count = stop - begin, .first = begin - first};
  }

  /// Calls piece_fn(Piece) for each block that elements [first, end) touch (first < end, inside the shard); on
  /// the engine's threads when there is more than one block.
  template <class PieceFn>
  void for_each_piece(CpuEngine* engine, std::uint64_t first, std::uint64_t end, const PieceFn& piece_fn) const {
    if (first >= end) return;
    const std::uint64_t pieces = piece_count(first, end);
    const auto run = [&](std::size_t i) { piece_fn(piece(first, end, i)); };
    if (pieces == 1 || engine == nullptr) {
      for (std::uint64_t i = 0; i < pieces; ++i) run(i);
    } else {
      engine->parallel_for(pieces, run);
    }
  }
};

Result<std::unique_ptr<ModelShard>> ModelShard::create(const ShardGeometry& geometry, const OptimizerParams& params,
                                                       std::shared_ptr<CpuEngine> engine, Device device,
                                                       const StoreWrapper& wrap_store) {
  Result<std::unique_ptr<ShardStore>> store = make_store(device, usable(geometry), params.kind);
  if (!store.ok()) return store.status();
  std::unique_ptr<ShardStore> used = std::move(store).value();
  if (wrap_store) used = wrap_store(std::move(used));
  return std::unique_ptr<ModelShard>(new ModelShard(geometry, params, std::move(engine), std::move(used)));
}

ModelShard::ModelShard(const ShardGeometry& geometry, const OptimizerParams& params, std::shared_ptr<CpuEngine> engine,
                       const StoreWrapper& wrap_store)
    : ModelShard(geometry, params, std::move(engine), make_cpu_store(usable(geometry).elements(), params.kind)) {
  if (wrap_store) storage_->store = wrap_store(std::move(storage_->store));
}

ModelShard::ModelShard(const ShardGeometry& geometry, const OptimizerParams& params, std::shared_ptr<CpuEngine> engine,
                       std::unique_ptr<ShardStore> store)
    : geometry_(geometry),
      params_(params),
      engine_(std::move(engine)),
      storage_(std::make_unique<Storage>(geometry, params.kind, std::move(store))) {}

ModelShard::~ModelShard() = default;

Device ModelShard::device() const { return storage_->store->device(); }

Status ModelShard::engine_status() const { return storage_->store->status(); }

OptimizerParams ModelShard::params() const {
  std::shared_lock lock(params_mutex_);
  return params_;
}

void ModelShard::set_params(const OptimizerParams& p) {
  std::unique_lock lock(params_mutex_);
  const OptimizerKind kind = params_.kind;  // the state arrays were sized for it
  params_ = p;
  params_.kind = kind;
}

Status ModelShard::push_gradient(std::uint64_t offset, std::span<const std::byte> grad) {
  return push(offset, grad.size(), Gradient{grad.data(), geometry_.dtype});
}

Status ModelShard::apply_gradient_f32(std::uint64_t offset, std::span<const float> grad) {
  return push(offset, grad.size() * wire_size(geometry_.dtype), Gradient{grad.data(), WireDtype::f32});
}

Status ModelShard::push(std::uint64_t offset, std::uint64_t len, Gradient grad) {
  if (Status range = check_range(geometry_, offset, len); !range.ok()) {
    return Status::Error(range.code(), "push refused: " + range.message());
  }
  if (len == 0) return Status::Ok();
  const OptimizerParams p = params();  // one set of hyper-parameters for the whole request
  Storage& s = *storage_;
  const std::size_t size = wire_size(geometry_.dtype);
  const std::uint64_t first = offset / size;
  const std::uint64_t end = first + len / size;
  const auto update_of = [&](const Storage::Piece& piece) {
    return BlockUpdate{.element = piece.element,
                       .count = piece.count,
                       .grad_index = piece.first,
                       .constants = step_constants(p, ++piece.block.step)};
  };
  if (!s.store->updates_whole_requests()) {
    FirstError failed;
    s.for_each_piece(engine_.get(), first, end, [&](const Storage::Piece& piece) {
      std::unique_lock lock(piece.block.lock);
      const BlockUpdate u = update_of(piece);
      failed.keep(s.store->update(p.kind, grad, {&u, 1}));
    });
    return failed.status();
  }
  // The engine pipelines the blocks of a request (GPU): lock them all, in ascending order as every holder of
  // several block locks does, so that two requests cannot deadlock.
  const std::uint64_t pieces = s.piece_count(first, end);
  std::vector<std::unique_lock<std::shared_mutex>> locks;
  std::vector<BlockUpdate> updates;
  locks.reserve(pieces);
  updates.reserve(pieces);
  for (std::uint64_t i = 0; i < pieces; ++i) {
    const Storage::Piece piece = s.piece(first, end, i);
    locks.emplace_back(piece.block.lock);
    updates.push_back(update_of(piece));
  }
  return s.store->update(p.kind, grad, updates);
}

void ModelShard::read_weights(std::uint64_t offset, std::span<std::byte> out) const {
  if (!check_range(geometry_, offset, out.size()).ok()) {
    std::fill(out.begin(), out.end(), std::byte{0});
    return;
  }
  const Storage& s = *storage_;
  const std::size_t size = wire_size(geometry_.dtype);
  const std::uint64_t first = offset / size;
  s.for_each_piece(engine_.get(), first, first + out.size() / size, [&](const Storage::Piece& piece) {
    std::shared_lock lock(piece.block.lock);
    encode_wire(geometry_.dtype, s.weights() + piece.element, out.data() + piece.first * size, piece.count);
  });
}

Status ModelShard::assign_weights(std::uint64_t offset, std::span<const std::byte> in) {
  if (Status range = check_range(geometry_, offset, in.size()); !range.ok()) {
    return Status::Error(range.code(), "assignment refused: " + range.message());
  }
  Storage& s = *storage_;
  const std::size_t size = wire_size(geometry_.dtype);
  const std::uint64_t first = offset / size;
  FirstError failed;
  s.for_each_piece(engine_.get(), first, first + in.size() / size, [&](const Storage::Piece& piece) {
    std::unique_lock lock(piece.block.lock);
    decode_wire(geometry_.dtype, in.data() + piece.first * size, s.weights() + piece.element, piece.count);
    failed.keep(s.store->publish_weights(piece.element, piece.count));
  });
  return failed.status();
}

Status ModelShard::fill_weights(const std::function<float(std::uint64_t element)>& value_of) {
  Storage& s = *storage_;
  for (std::uint64_t b = 0; b < s.layout.blocks(); ++b) {
    std::unique_lock lock(s.blocks[b].lock);
    const std::uint64_t begin = s.block_begin(b);
    const std::uint64_t n = s.layout.elements_in_block(b);
    float* w = s.weights();
    for (std::uint64_t e = begin; e < begin + n; ++e) w[e] = value_of(e);
    if (Status published = s.store->publish_weights(begin, n); !published.ok()) return published;
  }
  return Status::Ok();
}

void ModelShard::for_each_block(const std::function<void(const BlockView&)>& visit) const {
  for (std::uint64_t b = 0; visit_block(b, visit); ++b) {
  }
}

bool ModelShard::visit_block(std::uint64_t b, const std::function<void(const BlockView&)>& visit) const {
  const Storage& s = *storage_;
  if (b >= s.layout.blocks()) return false;
  std::shared_lock lock(s.blocks[b].lock);
  const std::uint64_t begin = s.block_begin(b);
  const std::size_t n = s.layout.elements_in_block(b);
  // thread_local: checkpoints visit every block in turn; a GPU copy of the state reuses one buffer.
  thread_local std::vector<float> scratch;
  BlockView view{.index = b, .step = s.blocks[b].step, .weights = {s.weights() + begin, n}, .state = {}};
  if (!s.store->read_state(begin, n, scratch, view.state).ok()) return false;
  visit(view);
  return true;
}

std::uint64_t ModelShard::block_step(std::uint64_t b) const {
  const Storage& s = *storage_;
  if (b >= s.layout.blocks()) return 0;
  std::shared_lock lock(s.blocks[b].lock);
  return s.blocks[b].step;
}

std::uint64_t ModelShard::total_block_steps() const {
  std::uint64_t total = 0;
  for (std::uint64_t b = 0; b < storage_->layout.blocks(); ++b) total += block_step(b);
  return total;
}

bool ModelShard::restore_block(std::uint64_t index, std::uint64_t step, std::span<const float> weights,
                               std::span<const float> state0, std::span<const float> state1) {
  Storage& s = *storage_;
  if (index >= s.layout.blocks()) return false;
  const std::size_t n = s.layout.elements_in_block(index);
  const std::span<const float> state[2] = {state0, state1};
  if (weights.size() != n) return false;
  for (int slot = 0; slot < s.slots; ++slot) {
    if (state[slot].size() != n) return false;
  }
  std::unique_lock lock(s.blocks[index].lock);
  const std::uint64_t begin = s.block_begin(index);
  std::copy(weights.begin(), weights.end(), s.weights() + begin);
  if (!s.store->publish_weights(begin, n).ok()) return false;
  if (!s.store->write_state(begin, n, state0, state1).ok()) return false;
  s.blocks[index].step = step;
  return true;
}

}  // namespace blockps
