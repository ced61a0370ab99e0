// The worker-PS contract: compressed blocks, the fixed-ratio formats a block of f32 elements may take on an LU where
// links are slow (issue 50), with their codecs. Both sides run them (the worker compresses its push and decompresses
// an averaged pull; a shard decompresses pushes into its f32 sum and compresses the average), so the format has one
// definition here (compressed_wire.cpp, target blockps_compressed_wire). Shards serve them with compress=
// (ps_backend/rounds/: contribution.cpp decodes pushes, compressed_averages.cpp compresses an averaging shard's
// averages), clients through Cluster::exchange_compressed_blocks and the C and Python calls; docs/OPTIONS.md,
// "Compressed blocks (formats)".
//
// Layout of one block of n f32 elements (little-endian), chunks = ceil(n / kCompressedChunkElements), chunk c the
// elements [256c, min(256c + 256, n)) (the last chunk may be short):
//
//   offset 0                    f32 scale[chunks]: chunk c's scale, IEEE-754 binary32, finite, sign bit clear
//   offset 4 * chunks           the payload, element i of the block at
//     sign1: ceil(n / 8) bytes; element i is bit (i % 8) of byte i / 8 (LSB first), 1 = negative; it decodes to
//            -scale or +scale of its chunk. The bits after element n - 1 in the last byte are zero.
//     int8:  n bytes; element i is byte i, a two's-complement q in [-127, 127]; it decodes to q * scale of its chunk.
//   then zero bytes up to the next multiple of kCompressedBlockAlignBytes (512, the LU's sector), so a block keeps
//   a fixed LBA range and a /dev user can pwrite/pread whole compressed blocks.
//
// Size and ratio against f32, for n = 64Ki elements (256 chunks; the same for the largest block, 128Ki):
//   sign1: 1024 B scales + 8192 B bits  =  9216 B (18 sectors, no padding): 262144 / 9216  = 28.44x
//   int8:  1024 B scales + 65536 B      = 66560 B (130 sectors, no padding): 262144 / 66560 = 3.94x
// Small blocks pay for the padding: n = 4Ki gives sign1 576 B padded to 1024 B (16x), int8 4160 B to 4608 B (3.56x).
//
// Chunk of 256 elements: a scale costs 1/8 bit per element (sign1 stays at 1.125 bits, 28.4x; 512 would give 30.1x,
// 128 25.6x), while a chunk stays small enough that a block straddling two layers of very different gradient
// magnitudes spoils at most one chunk's scale; 256 divides every power-of-two block of 256 elements or more, so only
// a model's odd-sized last block has a short chunk; a chunk's sign bits are whole bytes (32) and its f32 values
// (1 KiB) stay in L1 between the passes that compute its scale, its payload and its residual.
//
// Not yet implemented (issue 50, a later slice): THC-style shared scales. When every worker quantizes a chunk with
// the same scale (agreed beforehand, e.g. from the previous round's average after a randomized Hadamard transform),
// a shard can sum the int8 payloads directly into i32 counters (at most 2^24 / 127 workers keep the sum exact in
// f32 too) and multiply by the shared scale once, with no decompress per push and no re-compress: that needs a
// scale both sides know before the round, which this format (a scale per block instance) does not carry.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "contract/limits.h"
#include "contract/result.h"

namespace blockps {

enum class CompressedFormat : std::uint8_t { sign1 = 0, int8 = 1 };

constexpr std::string_view to_string(CompressedFormat f) {
  switch (f) {
    case CompressedFormat::sign1:
      return "sign1";
    case CompressedFormat::int8:
      return "int8";
  }
  return "?";
}

/// "sign1", "int8"; nullopt for anything else.
constexpr std::optional<CompressedFormat> parse_compressed_format(std::string_view name) {
  for (CompressedFormat f : {CompressedFormat::sign1, CompressedFormat::int8}) {
    if (name == to_string(f)) return f;
  }
  return std::nullopt;
}

/// Elements per chunk: each chunk has one f32 scale.
inline constexpr std::size_t kCompressedChunkElements = 256;
/// A compressed block is zero-padded to a whole multiple of this (the LU's sector).
inline constexpr std::size_t kCompressedBlockAlignBytes = kSectorBytes;
/// The largest int8 scale: the largest f32 s for which 127 * s is finite (FLT_MAX / 127 rounds up past it). A chunk
/// whose max|v| / 127 exceeds it is compressed with this scale (its largest values then clamp to +-127).
inline constexpr float kInt8MaxScale = 0x1.020406p+121f;

/// Where the parts of a compressed block of n elements lie (the scales start at offset 0).
struct CompressedLayout {
  std::size_t chunks = 0;
  std::size_t payload_offset = 0;  // 4 * chunks
  std::size_t payload_bytes = 0;   // sign1: ceil(n / 8), int8: n
  std::size_t bytes = 0;           // the whole block: payload_offset + payload_bytes rounded up to 512
  constexpr bool operator==(const CompressedLayout&) const = default;
};

/// The layout of a block of n elements in `format` (all zero for n = 0 or a format outside the enum).
constexpr CompressedLayout compressed_layout(CompressedFormat format, std::size_t n) {
  if (n == 0 || !(format == CompressedFormat::sign1 || format == CompressedFormat::int8)) return {};
  CompressedLayout l;
  l.chunks = (n + kCompressedChunkElements - 1) / kCompressedChunkElements;
  l.payload_offset = sizeof(float) * l.chunks;
  l.payload_bytes = format == CompressedFormat::sign1 ? (n + 7) / 8 : n;
  const std::size_t used = l.payload_offset + l.payload_bytes;
  l.bytes = (used + kCompressedBlockAlignBytes - 1) / kCompressedBlockAlignBytes * kCompressedBlockAlignBytes;
  return l;
}

/// Bytes a compressed block of n elements takes on the LU, padding included (a multiple of 512; 0 for n = 0).
constexpr std::size_t compressed_block_bytes(CompressedFormat format, std::size_t n) {
  return compressed_layout(format, n).bytes;
}

/// Compress one block with error feedback: v = x + residual (element-wise, f32; no feedback when `residual` is
/// empty: v = x) goes to `out` (compressed_block_bytes(format, x.size()) bytes: scales, payload, zero padding), and
/// `residual` becomes v - decompress(out), as f32 computes it, for the next step. Per chunk:
///   sign1: scale = mean |v| (the scale that minimises the L2 error of v ~ +-scale); bit = v < 0 (0 and -0 are +).
///   int8:  scale = min(max |v| / 127, kInt8MaxScale), q = v / scale rounded to nearest even and clamped to
///          [-127, 127]; a chunk whose scale is 0 (all zeros, or denormals below 127 times the smallest one) has
///          q = 0 and decodes to zeros (its values stay in the residual).
/// No allocation. invalid_argument, with nothing written to `out` or `residual`: a format outside the enum; a
/// residual that is neither empty nor x's size, or an `out` of the wrong size (both sizes named); an element of x
/// or residual that is NaN or Inf, or whose sum overflows f32 (its index named).
Status compress(CompressedFormat format, std::span<const float> x, std::span<float> residual, std::span<std::byte> out);

/// Decode a compressed block of out.size() elements from `in` (compressed_block_bytes(format, out.size()) bytes).
/// invalid_argument, with nothing written to `out`: a format outside the enum, `in` of the wrong size, a scale that
/// is NaN, Inf, negative (sign bit set, -0 included) or (int8) above kInt8MaxScale, an int8 payload byte of -128,
/// a sign1 bit after element n - 1 set, or a padding byte not zero: a /dev user who writes garbage is refused rather
/// than summed.
Status decompress(CompressedFormat format, std::span<const std::byte> in, std::span<float> out);

/// sum += decompress(in), element-wise in f32, for sum.size() elements: what a shard does per compressed push. The
/// same checks and refusals as decompress, with nothing added to `sum` when refused.
Status accumulate(CompressedFormat format, std::span<const std::byte> in, std::span<float> sum);

}  // namespace blockps
