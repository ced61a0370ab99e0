#include "blockps/layout.h"

namespace blockps {

std::string_view to_string(LayoutKind kind) { return kind == LayoutKind::stripe ? "stripe" : "range"; }

Layout::Layout(std::uint64_t model_bytes, std::uint64_t block_bytes, std::size_t shards)
    : model_bytes_(model_bytes),
      block_bytes_(block_bytes),
      shards_(shards),
      blocks_(block_bytes == 0 ? 0 : (model_bytes + block_bytes - 1) / block_bytes) {}

std::uint64_t Layout::bytes_of_block(std::uint64_t block) const {
  const std::uint64_t start = block * block_bytes_;
  return start + block_bytes_ <= model_bytes_ ? block_bytes_ : model_bytes_ - start;
}

std::uint64_t Layout::model_offset_of_block(std::uint64_t block) const {
  return block >= blocks_ ? model_bytes_ : block * block_bytes_;
}

std::vector<ShardRun> Layout::runs(std::uint64_t first, std::uint64_t count, std::uint64_t max_run_bytes) const {
  std::vector<ShardRun> out;
  std::vector<ShardRun> open(shards_);  // the run being grown on each shard; bytes == 0: none
  for (std::uint64_t b = first; b < first + count && b < blocks_; ++b) {
    const BlockPlace p = place(b);
    ShardRun& run = open[p.shard];
    const bool extends =
        run.bytes != 0 && run.shard_offset + run.bytes == p.shard_offset && run.bytes + p.bytes <= max_run_bytes;
    if (!extends) {
      if (run.bytes != 0) out.push_back(std::move(run));
      run = ShardRun{p.shard, p.shard_offset, 0, {}};
    }
    run.bytes += p.bytes;
    if (!run.pieces.empty() && run.pieces.back().model_offset + run.pieces.back().bytes == p.model_offset) {
      run.pieces.back().bytes += p.bytes;
    } else {
      run.pieces.push_back({p.model_offset, p.bytes});
    }
  }
  for (ShardRun& run : open)
    if (run.bytes != 0) out.push_back(std::move(run));
  return out;
}

BlockPlace StripeLayout::place(std::uint64_t block) const {
  return {static_cast<std::size_t>(block % shards_), (block / shards_) * block_bytes_, block * block_bytes_,
          bytes_of_block(block)};
}

std::uint64_t StripeLayout::shard_bytes(std::size_t shard) const {
  const std::uint64_t held = blocks_ / shards_ + (shard < blocks_ % shards_ ? 1 : 0);
  std::uint64_t bytes = held * block_bytes_;
  // The short last block is the last one on its shard.
  if (blocks_ != 0 && (blocks_ - 1) % shards_ == shard) bytes -= block_bytes_ - bytes_of_block(blocks_ - 1);
  return bytes;
}

std::uint64_t RangeLayout::block_count_of(std::size_t shard) const {
  return blocks_ / shards_ + (shard < blocks_ % shards_ ? 1 : 0);
}

std::uint64_t RangeLayout::first_block(std::size_t shard) const {
  const std::uint64_t base = blocks_ / shards_, extra = blocks_ % shards_;
  return shard * base + (shard < extra ? shard : extra);
}

BlockPlace RangeLayout::place(std::uint64_t block) const {
  const std::uint64_t base = blocks_ / shards_, extra = blocks_ % shards_;
  const std::uint64_t in_big = extra * (base + 1);  // blocks held by the shards that got one extra
  std::size_t shard = 0;
  if (block < in_big) {
    shard = static_cast<std::size_t>(block / (base + 1));
  } else {
    shard = static_cast<std::size_t>(extra + (block - in_big) / base);
  }
  return {shard, (block - first_block(shard)) * block_bytes_, block * block_bytes_, bytes_of_block(block)};
}

std::uint64_t RangeLayout::shard_bytes(std::size_t shard) const {
  const std::uint64_t first = first_block(shard);
  const std::uint64_t n = block_count_of(shard);
  return model_offset_of_block(first + n) - model_offset_of_block(first);
}

std::unique_ptr<Layout> make_layout(LayoutKind kind, std::uint64_t model_bytes, std::uint64_t block_bytes,
                                    std::size_t shards) {
  if (kind == LayoutKind::range) return std::make_unique<RangeLayout>(model_bytes, block_bytes, shards);
  return std::make_unique<StripeLayout>(model_bytes, block_bytes, shards);
}

}  // namespace blockps
