// A shard's checkpoint file: its framing, header and block records, and its crash-safe writing (temp file, fsync,
// rename, fsync of the directory: a crash at any moment leaves the previous file or the new one). The PS writes
// and loads it (ps_backend/checkpoint/checkpoint.h maps a ModelShard and its ShardConfig onto it); the worker's
// Python package reads and writes it for torch-format export (client/python/shard_checkpoint_module.cpp). This
// library knows nothing of what the options text means: the PS parses it.
//
// Layout (little-endian): "BLKPSCK1" | u32 header length | header (JSON: format, options, blocks, created; job,
// claimed and place when the shard has them (format 2); elements, block_elements and state_slots: the body's
// geometry, recorded since issue 49, which older files leave to the PS to derive from the options) | per block:
// u64 step, f32 weights[n], f32 state slots[n]... | u32 CRC-32 of all preceding bytes | "BLKPSEND". Format 1
// files (no job, no place) still read. The geometry's fields did not change the format: a reader that ignores
// them (blockps before issue 49) derives the same geometry from the options, so it still loads a newer file.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>

#include "contract/place.h"
#include "contract/result.h"

namespace blockps {

/// The most f32 state values a block keeps per element (Adam: exp_avg, exp_avg_sq).
inline constexpr std::uint32_t kMaxCheckpointStateSlots = 2;

/// The shape of a checkpoint's body: every block record holds `block_elements` f32 weights (the last block the
/// rest of `elements`) and as many values for each of `state_slots` state slots.
struct CheckpointGeometry {
  std::uint64_t elements = 0;
  std::uint64_t block_elements = 0;
  std::uint32_t state_slots = 0;

  std::uint64_t blocks() const { return block_elements == 0 ? 0 : (elements + block_elements - 1) / block_elements; }
  /// Elements of block b (block_elements but for a shorter last block); 0 for b >= blocks().
  std::uint64_t elements_in_block(std::uint64_t b) const {
    if (b >= blocks()) return 0;
    const std::uint64_t first = b * block_elements;
    return elements - first < block_elements ? elements - first : block_elements;
  }
  bool operator==(const CheckpointGeometry&) const = default;
};

/// "elements=N block_elements=B state_slots=S", as refusals name a geometry.
std::string to_string(const CheckpointGeometry& g);

/// Ok, or why `g` describes no body (invalid_argument): no elements, no block elements, more than
/// kMaxCheckpointStateSlots slots.
Status check_checkpoint_geometry(const CheckpointGeometry& g);

/// Whose the shard is: the job that holds it (not its sessions: they end with the process) and its place.
struct ShardTenancy {
  std::string job;  // "" when unclaimed
  std::uint64_t claimed_unix = 0;
  std::optional<Place> place;
  bool operator==(const ShardTenancy&) const = default;
};

/// A checkpoint's header as read.
struct CheckpointFileHeader {
  std::string options;  // the shard's options text ("k=v;k=v", its bsopts keys; docs/OPTIONS.md), as recorded
  std::uint64_t blocks = 0;
  std::uint64_t created_unix = 0;  // 0 when the file does not say
  ShardTenancy tenancy;            // a format 1 file: unclaimed, no place
  // The body's geometry when the file records it (its block count is then `blocks`); absent in files written
  // before it was recorded, whose reader derives it from the options.
  std::optional<CheckpointGeometry> geometry;
};

/// One block's record: its optimizer step count, then its weights and its first `state_slots` state slots,
/// elements_in_block(index) values each (the unused slots are empty).
struct CheckpointBlockRecord {
  std::uint64_t index = 0;
  std::uint64_t step = 0;
  std::span<const float> weights;
  std::span<const float> state[kMaxCheckpointStateSlots];
};

/// True when `path` holds a checkpoint to read: it exists and is not empty (an empty file, as tgt-admin needs
/// the backing store to exist, means "no checkpoint yet").
bool checkpoint_exists(const std::string& path);

/// Read and check only the header. The reason otherwise: io (cannot open), invalid_argument (not a checkpoint,
/// a format this build does not know, a field of the wrong type or value, each named with the value seen).
Result<CheckpointFileHeader> read_checkpoint_file_header(const std::string& path);

/// Given the header just read, the geometry to read the body with (the reader's own, derived from the options,
/// or the header's), or why the file is not one the reader can use (that refusal is returned as it is).
using CheckpointBodyGeometry = std::function<Result<CheckpointGeometry>(const CheckpointFileHeader& header)>;
/// Takes one block's record (its spans valid during the call only); a refusal stops the read and is returned.
using CheckpointBlockSink = std::function<Status(const CheckpointBlockRecord& record)>;

/// Read the whole checkpoint at `path`: the header, then each block's record in order, handed to `take` as it is
/// read, then the CRC-32, the end marker and nothing after them. Ok, or the reason: the refusals of
/// read_checkpoint_file_header, `body_geometry`'s or `take`'s as they are, invalid_argument when the geometry's
/// block count is not the header's or the header records another geometry, or the file is truncated, has a CRC
/// mismatch or trailing bytes. Every record has been handed to `take` before the CRC is checked: a caller that
/// keeps them keeps them only when this returns ok.
Status read_checkpoint_file(const std::string& path, const CheckpointBodyGeometry& body_geometry,
                            const CheckpointBlockSink& take);

/// Fills `record` with block `index`'s step, weights and first `state_slots` slots (the spans must stay valid
/// until the next call); a refusal stops the write and is returned, and the old file stays.
using CheckpointBlockSource = std::function<Status(std::uint64_t index, CheckpointBlockRecord& record)>;

/// Replace `path` crash-safely with a checkpoint of the current format: `options` (recorded as given), the
/// geometry, the time now as created, the tenancy, and each block's record from `give`. Ok, or the reason:
/// invalid_argument (the geometry is unusable, a record's spans are not the block's length), io (creating,
/// writing, renaming or syncing failed: errno's text), or `give`'s refusal. The old file stays intact on any
/// failure.
Status write_checkpoint_file(const std::string& path, const std::string& options, const CheckpointGeometry& geometry,
                             const ShardTenancy& tenancy, const CheckpointBlockSource& give);

/// Copy the checkpoint file `from` to `to` byte for byte, as crash-safely as write_checkpoint_file writes (a
/// crash leaves the old `to` or the new one); ok or the reason (io).
Status copy_checkpoint(const std::string& from, const std::string& to);

}  // namespace blockps
