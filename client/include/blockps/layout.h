// Where each block of the model lives: the one definition of the block mapping that every client path uses.
//
// The model is `model_bytes` wire bytes cut into blocks of `block_bytes` (the last block may be shorter). A
// layout puts every global block on one shard at a shard byte offset; a shard's blocks sit back to back on its
// LUs in increasing global order, so a shard's byte size is the sum of its blocks' sizes.
//   stripe: global block i on shard i mod S (spreads every layer over all shards).
//   range:  contiguous runs: shard s holds blocks [first_s, first_s + n_s), n_s = B/S, plus one for the first
//           B mod S shards.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

namespace blockps {

enum class LayoutKind { stripe, range };
std::string_view to_string(LayoutKind kind);

// One block: which shard holds it, where on that shard's LUs, and where in the model.
struct BlockPlace {
  std::size_t shard = 0;
  std::uint64_t shard_offset = 0;  // bytes on the shard's grad/weights LU
  std::uint64_t model_offset = 0;  // bytes in the whole model
  std::uint64_t bytes = 0;         // block_bytes, or less for the last block
};

// A piece of the model buffer (model byte offset and length).
struct ModelPiece {
  std::uint64_t model_offset = 0;
  std::uint64_t bytes = 0;
};

// Blocks that are contiguous on one shard's LU: one request. `pieces` are where those bytes are in the model,
// in LU order (one piece under `range`, one per block under `stripe`).
struct ShardRun {
  std::size_t shard = 0;
  std::uint64_t shard_offset = 0;
  std::uint64_t bytes = 0;
  std::vector<ModelPiece> pieces;
};

class Layout {
 public:
  // Preconditions (the cluster file loader checks them): block_bytes > 0, shards > 0, and at least one block
  // per shard.
  Layout(std::uint64_t model_bytes, std::uint64_t block_bytes, std::size_t shards);
  virtual ~Layout() = default;

  virtual LayoutKind kind() const = 0;
  // Where global block `block` (< block_count()) lives.
  virtual BlockPlace place(std::uint64_t block) const = 0;
  // Byte size of shard `shard`'s grad and weights LUs.
  virtual std::uint64_t shard_bytes(std::size_t shard) const = 0;

  std::uint64_t model_bytes() const { return model_bytes_; }
  std::uint64_t block_bytes() const { return block_bytes_; }
  std::size_t shard_count() const { return shards_; }
  std::uint64_t block_count() const { return blocks_; }
  // Size of global block `block`: block_bytes(), or the remainder for the last one.
  std::uint64_t bytes_of_block(std::uint64_t block) const;
  // Model byte offset of global block `block` (block <= block_count(); block_count() gives model_bytes()).
  std::uint64_t model_offset_of_block(std::uint64_t block) const;

  // Global blocks [first, first + count) as requests: runs of blocks contiguous on one shard, each at most
  // max_run_bytes (but always at least one block). Runs of one shard come in increasing shard offset.
  std::vector<ShardRun> runs(std::uint64_t first, std::uint64_t count, std::uint64_t max_run_bytes) const;

 protected:
  std::uint64_t model_bytes_;
  std::uint64_t block_bytes_;
  std::size_t shards_;
  std::uint64_t blocks_;
};

class StripeLayout final : public Layout {
 public:
  using Layout::Layout;
  LayoutKind kind() const override { return LayoutKind::stripe; }
  BlockPlace place(std::uint64_t block) const override;
  std::uint64_t shard_bytes(std::size_t shard) const override;
};

class RangeLayout final : public Layout {
 public:
  using Layout::Layout;
  LayoutKind kind() const override { return LayoutKind::range; }
  BlockPlace place(std::uint64_t block) const override;
  std::uint64_t shard_bytes(std::size_t shard) const override;
  // First global block of shard `shard` and how many it holds.
  std::uint64_t first_block(std::size_t shard) const;
  std::uint64_t block_count_of(std::size_t shard) const;
};

std::unique_ptr<Layout> make_layout(LayoutKind kind, std::uint64_t model_bytes, std::uint64_t block_bytes,
                                    std::size_t shards);

}  // namespace blockps
