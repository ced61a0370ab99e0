#include "ps_backend/rounds/compressed_averages.h"

#include <algorithm>
#include <cstring>

namespace blockps {

CompressedAverages::CompressedAverages(const ShardGeometry& geometry, CompressedFormat format)
    : geometry_(geometry), format_(format), blocks_(std::make_unique<Block[]>(geometry.blocks())) {}

Status CompressedAverages::publish(std::uint64_t block, std::span<float> average) {
  Block& b = blocks_[block];
  std::lock_guard lock(b.lock);
  if (b.residual.size() != average.size()) b.residual.assign(average.size(), 0.0f);
  b.image.resize(compressed_block_bytes(format_, average.size()));
  // compress() writes nothing when it refuses, so the block keeps its image and residual; decompress() of the image
  // it just wrote cannot refuse it.
  if (Status s = compress(format_, average, b.residual, b.image); !s.ok()) return s;
  b.holds = true;
  return decompress(format_, b.image, average);
}

void CompressedAverages::forget(std::uint64_t block) {
  Block& b = blocks_[block];
  std::lock_guard lock(b.lock);
  b.holds = false;
}

void CompressedAverages::reset() {
  for (std::uint64_t i = 0; i < geometry_.blocks(); ++i) {
    Block& b = blocks_[i];
    std::lock_guard lock(b.lock);
    b.holds = false;
    std::fill(b.residual.begin(), b.residual.end(), 0.0f);
  }
}

bool CompressedAverages::read(std::uint64_t block, std::uint64_t offset_in_block, std::span<std::byte> out) const {
  const Block& b = blocks_[block];
  std::lock_guard lock(b.lock);
  if (!b.holds) return false;
  std::fill(out.begin(), out.end(), std::byte{0});
  if (offset_in_block < b.image.size()) {
    const std::size_t n = std::min<std::size_t>(out.size(), b.image.size() - offset_in_block);
    std::memcpy(out.data(), b.image.data() + offset_in_block, n);
  }
  return true;
}

std::vector<float> CompressedAverages::residual(std::uint64_t block) const {
  const Block& b = blocks_[block];
  std::lock_guard lock(b.lock);
  if (b.residual.empty()) return std::vector<float>(geometry_.elements_in_block(block), 0.0f);
  return b.residual;
}

bool CompressedAverages::restore_residual(std::uint64_t block, std::span<const float> residual) {
  if (block >= geometry_.blocks() || residual.size() != geometry_.elements_in_block(block)) return false;
  Block& b = blocks_[block];
  std::lock_guard lock(b.lock);
  b.residual.assign(residual.begin(), residual.end());
  return true;
}

}  // namespace blockps
