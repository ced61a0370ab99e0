// The worker-PS contract: the limits both sides check. Header-only and dependency-free (docs/ARCHITECTURE.md).
#pragma once

#include <cstdint>

namespace blockps {

/// The largest block (bsopts block=, a cluster file's [model] block): one iSER buffer, tgt's default buf_sz, so
/// that a block is one RDMA transfer.
inline constexpr std::uint64_t kMaxBlockBytes = std::uint64_t{512} * 1024;

/// The LU's sector: every blockps LU has 512-byte logical blocks (tgt's default; every block size tgt allows is a
/// multiple of it). Model sizes, blocks, the parts of a push and compressed blocks are whole sectors.
inline constexpr std::uint64_t kSectorBytes = 512;

/// The capacity of a status LU: the status page (JSON) NUL-padded to it. A worker reads at most this much.
inline constexpr std::uint64_t kStatusLuBytes = std::uint64_t{1} << 20;

}  // namespace blockps
