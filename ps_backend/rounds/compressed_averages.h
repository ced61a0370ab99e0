// An averaging shard's compressed rounds (compress=, issue 50): per block, the last compressed round's average as the
// workers read it (the compressed block at the start of the block's byte range on the grad LU, zeros after it), and
// the shard's own error feedback: what compressing each average left out is carried into the next round's, as every
// worker carries its own into its next push. Written when a round is applied (BspMode::apply), read by the grad LU's
// READs (ServedShard::pull), kept by the checkpoints (the residuals).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "aggregator/model_shard.h"
#include "contract/compressed_wire.h"
#include "contract/result.h"

namespace blockps {

class CompressedAverages {
 public:
  CompressedAverages(const ShardGeometry& geometry, CompressedFormat format);

  CompressedFormat format() const { return format_; }
  /// A compressed round of `block` was averaged: `average` (the block's elements) is compressed with the block's
  /// residual into the block's image for READs, and becomes what the workers decode from it (what the shard then keeps
  /// as the block's weights). An error (an average that is not finite: compress() refuses it) leaves the block as it
  /// was.
  Status publish(std::uint64_t block, std::span<float> average);
  /// A full-precision round of `block` was applied (the warm-up, after a reset): READs return the weights again.
  void forget(std::uint64_t block);
  /// Drop every image and zero every residual (reset-rounds: a new run starts its feedback afresh).
  void reset();
  /// Fill `out` with bytes [offset_in_block, offset_in_block + out.size()) of block `block`'s image: the compressed
  /// block, then zeros to the block's end. False, and `out` untouched, while the block holds no compressed round.
  bool read(std::uint64_t block, std::uint64_t offset_in_block, std::span<std::byte> out) const;

  /// The residual of `block` (checkpoints): a copy, taken under the block's lock.
  std::vector<float> residual(std::uint64_t block) const;
  /// Restore the residual of `block` (checkpoint load); false when the size is not the block's.
  bool restore_residual(std::uint64_t block, std::span<const float> residual);

 private:
  struct Block {
    mutable std::mutex lock;
    bool holds = false;            // image is a compressed round's average
    std::vector<std::byte> image;  // compressed_block_bytes(format, elements)
    std::vector<float> residual;   // allocated by the first publish or restore
  };
  const ShardGeometry geometry_;
  const CompressedFormat format_;
  std::unique_ptr<Block[]> blocks_;
};

}  // namespace blockps
