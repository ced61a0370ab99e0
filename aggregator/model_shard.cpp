#include "aggregator/model_shard.h"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <new>
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

}  // namespace

std::string geometry_error(const ShardGeometry& g) {
  if (!known_dtype(g.dtype)) {
    return "dtype " + std::to_string(static_cast<unsigned>(g.dtype)) + " is not one of f32, bf16, f16";
  }
  const std::size_t size = wire_size(g.dtype);
  if (g.bytes == 0 || g.bytes % size != 0) {
    return "shard bytes " + std::to_string(g.bytes) + " must be a positive multiple of " + element_size_text(g.dtype);
  }
  if (g.block_bytes == 0 || g.block_bytes % size != 0) {
    return "block_bytes " + std::to_string(g.block_bytes) + " must be a positive multiple of " +
           element_size_text(g.dtype);
  }
  return "";
}

std::string range_error(const ShardGeometry& g, std::uint64_t offset, std::uint64_t len) {
  if (std::string why = geometry_error(g); !why.empty()) return "unusable geometry: " + why;
  const std::size_t size = wire_size(g.dtype);
  if (offset % size != 0) {
    return "offset " + std::to_string(offset) + " is not a multiple of " + element_size_text(g.dtype);
  }
  if (len % size != 0) {
    return "length " + std::to_string(len) + " is not a multiple of " + element_size_text(g.dtype);
  }
  if (offset > g.bytes || len > g.bytes - offset) {
    return "range at offset " + std::to_string(offset) + " of " + std::to_string(len) +
           " bytes ends beyond the shard's " + std::to_string(g.bytes) + " bytes";
  }
  return "";
}

namespace {

// Cache-line aligned so that vector loads start on a line and neighbouring data never shares one.
constexpr std::align_val_t kArrayAlignment{64};

struct FreeAligned {
  void operator()(float* p) const { ::operator delete[](p, kArrayAlignment); }
};
using AlignedFloats = std::unique_ptr<float[], FreeAligned>;

AlignedFloats zeroed_floats(std::uint64_t n) {
  if (n == 0) return nullptr;
  auto* p = static_cast<float*>(::operator new[](n * sizeof(float), kArrayAlignment));
  std::memset(p, 0, n * sizeof(float));
  return AlignedFloats(p);
}

// One cache line per block, so that threads working on neighbouring blocks do not contend for a line.
struct alignas(64) Block {
  std::shared_mutex lock;
  std::uint64_t step = 0;  // guarded by lock
};

}  // namespace

struct ModelShard::Storage {
  // The shard's geometry, or for an unusable one the empty default: no elements, no blocks.
  ShardGeometry layout;
  int slots = 0;
  AlignedFloats weights;
  AlignedFloats state[2];
  std::unique_ptr<Block[]> blocks;

  Storage(const ShardGeometry& g, OptimizerKind kind) {
    if (!geometry_error(g).empty()) return;
    layout = g;
    slots = state_slots(kind);
    weights = zeroed_floats(layout.elements());
    for (int slot = 0; slot < slots; ++slot) state[slot] = zeroed_floats(layout.elements());
    blocks = std::make_unique<Block[]>(layout.blocks());
  }

  float* state_at(int slot, std::uint64_t element) const {
    return slot < slots ? state[slot].get() + element : nullptr;
  }
  std::uint64_t block_begin(std::uint64_t b) const { return b * layout.block_elements(); }

  /// The part of a request that falls into one block.
  struct Piece {
    Block& block;
    std::uint64_t element;    // first element of the shard it covers
    std::uint64_t count;      // elements
    std::size_t wire_offset;  // where its bytes start in the request's buffer
  };

  /// Calls piece_fn(Piece) for each block that the wire byte range [offset, offset+len) touches (a range without
  /// a range_error()); on the engine's threads when there is more than one block.
  template <class PieceFn>
  void for_each_piece(CpuEngine* engine, std::uint64_t offset, std::uint64_t len, const PieceFn& piece_fn) const {
    if (len == 0) return;
    const std::size_t size = wire_size(layout.dtype);
    const std::uint64_t first = offset / size;
    const std::uint64_t end = first + len / size;
    const std::uint64_t first_block = first / layout.block_elements();
    const std::uint64_t pieces = (end - 1) / layout.block_elements() - first_block + 1;
    const auto run = [&](std::size_t i) {
      const std::uint64_t b = first_block + i;
      const std::uint64_t begin = std::max(first, block_begin(b));
      const std::uint64_t stop = std::min(end, block_begin(b + 1));
      piece_fn(
          Piece{.block = blocks[b], .element = begin, .count = stop - begin, .wire_offset = (begin - first) * size});
    };
    if (pieces == 1 || engine == nullptr) {
      for (std::uint64_t i = 0; i < pieces; ++i) run(i);
    } else {
      engine->parallel_for(pieces, run);
    }
  }
};

ModelShard::ModelShard(const ShardGeometry& geometry, const OptimizerParams& params, std::shared_ptr<CpuEngine> engine)
    : geometry_(geometry),
      params_(params),
      engine_(std::move(engine)),
      storage_(std::make_unique<Storage>(geometry, params.kind)) {}

ModelShard::~ModelShard() = default;

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

void ModelShard::push_gradient(std::uint64_t offset, std::span<const std::byte> grad) {
  if (!range_error(geometry_, offset, grad.size()).empty()) return;
  const OptimizerParams p = params();  // one set of hyper-parameters for the whole request
  Storage& s = *storage_;
  s.for_each_piece(engine_.get(), offset, grad.size(), [&](const Storage::Piece& piece) {
    std::unique_lock lock(piece.block.lock);
    const StepConstants k = step_constants(p, ++piece.block.step);
    cpu_update(p.kind, geometry_.dtype, k, s.weights.get() + piece.element, grad.data() + piece.wire_offset,
               s.state_at(0, piece.element), s.state_at(1, piece.element), piece.count);
  });
}

bool ModelShard::apply_block_gradient(std::uint64_t index, std::span<const float> grad) {
  Storage& s = *storage_;
  if (index >= s.layout.blocks() || grad.size() != s.layout.elements_in_block(index)) return false;
  const OptimizerParams p = params();
  auto& block = s.blocks[index];
  const std::uint64_t begin = s.block_begin(index);
  std::unique_lock lock(block.lock);
  const StepConstants k = step_constants(p, ++block.step);
  cpu_update(p.kind, WireDtype::f32, k, s.weights.get() + begin, grad.data(), s.state_at(0, begin),
             s.state_at(1, begin), grad.size());
  return true;
}

void ModelShard::read_weights(std::uint64_t offset, std::span<std::byte> out) const {
  if (!range_error(geometry_, offset, out.size()).empty()) {
    std::fill(out.begin(), out.end(), std::byte{0});
    return;
  }
  const Storage& s = *storage_;
  s.for_each_piece(engine_.get(), offset, out.size(), [&](const Storage::Piece& piece) {
    std::shared_lock lock(piece.block.lock);
    encode_wire(geometry_.dtype, s.weights.get() + piece.element, out.data() + piece.wire_offset, piece.count);
  });
}

void ModelShard::assign_weights(std::uint64_t offset, std::span<const std::byte> in) {
  if (!range_error(geometry_, offset, in.size()).empty()) return;
  Storage& s = *storage_;
  s.for_each_piece(engine_.get(), offset, in.size(), [&](const Storage::Piece& piece) {
    std::unique_lock lock(piece.block.lock);
    decode_wire(geometry_.dtype, in.data() + piece.wire_offset, s.weights.get() + piece.element, piece.count);
  });
}

void ModelShard::fill_weights(const std::function<float(std::uint64_t element)>& value_of) {
  Storage& s = *storage_;
  for (std::uint64_t b = 0; b < s.layout.blocks(); ++b) {
    std::unique_lock lock(s.blocks[b].lock);
    const std::uint64_t begin = s.block_begin(b);
    const std::uint64_t end = begin + s.layout.elements_in_block(b);
    for (std::uint64_t e = begin; e < end; ++e) s.weights[e] = value_of(e);
  }
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
  BlockView view{.index = b, .step = s.blocks[b].step, .weights = {s.weights.get() + begin, n}, .state = {}};
  for (int slot = 0; slot < s.slots; ++slot) view.state[slot] = {s.state_at(slot, begin), n};
  visit(view);
  return true;
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
  std::copy(weights.begin(), weights.end(), s.weights.get() + begin);
  for (int slot = 0; slot < s.slots; ++slot) std::copy(state[slot].begin(), state[slot].end(), s.state_at(slot, begin));
  s.blocks[index].step = step;
  return true;
}

}  // namespace blockps
