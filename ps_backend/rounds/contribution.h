// A push as the rounds see it: its part in each block (BlockSpan), and one worker's gradient of one block in one
// round (Contribution), filled by one or more pushes that each claim their own sectors of it.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "aggregator/model_shard.h"
#include "contract/compressed_wire.h"
#include "contract/limits.h"
#include "ps_backend/rounds/worker_ref.h"

namespace blockps {

// Pushes cover a block in units of kSectorBytes (contract/limits.h): every LU block size tgt allows is a multiple of
// it, and so are `size` and `block` (lu_options checks them against the LU block size).

/// The part of a WRITE that falls in one block.
struct BlockSpan {
  std::uint64_t block;
  std::uint64_t data_offset;                 // bytes into the WRITE's data
  std::uint64_t first_sector, sectors;       // within the block
  std::uint64_t element_in_block, elements;  // the same in elements of the wire dtype
};

/// The block spans of a WRITE of [offset, offset+len), in block order; empty when the range is not whole
/// sectors inside the shard (the data path refuses such a WRITE with its own sense).
std::vector<BlockSpan> split_into_blocks(const ShardGeometry& geometry, std::uint64_t offset, std::uint64_t len);

/// One worker's gradient of one block in one round. Its sectors are claimed by admitted pushes (under the
/// rounds' lock) and land as their data arrives.
struct Contribution {
  /// `decoded`: the gradient is kept in f32 for a round's average (mode=sync); else only the sectors are tracked.
  /// `compressed`: the round's pushes carry the block compressed (contract/compressed_wire.h): its sectors are the
  /// compressed block's, claimed and landed by one push of all of them.
  Contribution(const ShardGeometry& geometry, std::uint64_t block_index, std::uint64_t round_index,
               const WorkerRef& worker, bool decoded, std::optional<CompressedFormat> compressed = std::nullopt);

  std::uint64_t block, round, itn;
  std::optional<CompressedFormat> compressed;
  std::string iqn;
  std::uint64_t elements;  // of `grad` once the first push of it lands; 0 when not decoded
  std::once_flag grad_allocated;
  std::vector<float> grad;    // allocated by the first landing push (an I/O thread, not tgtd's main thread)
  std::vector<bool> claimed;  // per sector
  std::uint32_t sectors, claimed_n = 0, landed_n = 0;
  bool discarded = false;  // its round closed without it: what still lands is dropped, not decoded

  bool complete() const { return landed_n == sectors; }
  bool in_flight() const { return landed_n < claimed_n; }
  bool fully_claimed() const { return claimed_n == sectors; }
  /// Whether the span claims a sector claimed already, or one beyond this contribution's (a push of another form).
  bool claims_any(const BlockSpan& s) const;
  void claim(const BlockSpan& s);
  /// A claim given back: the span's push was refused after its admission (a compressed block that does not decode).
  void unclaim(const BlockSpan& s);
  /// The span's data (wire dtype, or the whole compressed block) decoded into `grad` (an I/O thread; the span's
  /// sectors are its own). A compressed block that decompress() refuses: its error, and `grad` as it was.
  Status decode(WireDtype dtype, const BlockSpan& s, std::span<const std::byte> data);
};

/// The sectors of block `block`'s part of a push in `format` (its compressed block, padding included); 0 for a block
/// the geometry does not have.
std::uint32_t compressed_sectors(const ShardGeometry& geometry, std::uint64_t block, CompressedFormat format);

/// The part of an admitted push that falls into one block: its sectors are claimed for that push alone. A push
/// admitted only to be refused when its data comes (a compressed round's push of the wrong form) is one piece
/// with no contribution and `refusal` saying why; `rejected`: its data did not decode (its claim is given back).
struct TicketPiece {
  std::shared_ptr<Contribution> contribution;
  BlockSpan span;
  std::string refusal;
  bool rejected = false;
};
/// An admitted push: what it claimed, block by block, until its data lands.
using Ticket = std::vector<TicketPiece>;

}  // namespace blockps
