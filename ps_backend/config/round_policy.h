// How pushes from several workers become optimizer steps: the rounds engine's policy, a plain struct of its own
// (the LU options parser, ps_backend/config/lu_options.h, fills it from mode=, workers=, min_workers=, ...).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "contract/compressed_wire.h"

namespace blockps {

/// docs/OPTIONS.md, "Synchronous rounds".
struct RoundPolicy {
  enum class Mode { async, sync, ssp } mode = Mode::async;
  std::uint32_t staleness = 0;              // ssp:K: how many pushes a worker may run ahead of the slowest
  std::uint32_t workers = 1;                // the starting size: the first rounds wait for this many workers
  // The most live workers (0: as many as workers=): a newcomer beyond it is refused. Above workers=, hosts may join a
  // running job (elastic membership, issue 51): each round waits for the members it had when it opened.
  std::uint32_t max_workers = 0;
  std::uint32_t min_workers = 1;            // fewer live workers: the grad LU fails commands instead of waiting
  std::uint32_t straggler_ms = 2000;        // a round closes without the missing workers after this long
  std::uint32_t worker_timeout_ms = 10000;  // no push for this long: dropped; also the longest a command parks
  // sync: a push that would open a block's round (no worker pushed that block yet) waits while its worker has
  // this many more blocks in open rounds than the member with the fewest (0: no limit). Keeps the workers' flows into a
  // shard level, so that rounds close at the pace of the pushes (docs/OPTIONS.md, "Synchronous rounds"). It holds a
  // worker across blocks and is safe in any order of pushes because the member with the fewest is never held and a
  // worker's WRITEs go out whatever its parked READs wait for (the library's stream, issue 48).
  std::uint32_t push_lead = 2;
  // compress= and compress_after= (issue 50; docs/OPTIONS.md, "Compressed blocks"): from round compress_after of a
  // block on (its rounds counted since the shard opened or its rounds were reset), each worker pushes the block as
  // one compressed block (contract/compressed_wire.h) at the start of the block's byte range on the grad LU; the
  // rounds before are the full-precision warm-up. nullopt: every round is full precision.
  std::optional<CompressedFormat> compress;
  std::uint64_t compress_after = 0;
  /// Whether round `round` of a block carries compressed pushes.
  bool compressed_round(std::uint64_t round) const { return compress.has_value() && round >= compress_after; }
  /// The most live workers a sync shard takes (max_workers=, or workers= when not given).
  std::uint32_t most_workers() const { return max_workers != 0 ? max_workers : workers; }
  bool operator==(const RoundPolicy&) const = default;
};
std::string_view to_string(RoundPolicy::Mode m);
std::string to_string(const RoundPolicy& p);  // "async", "sync", "ssp:K"

}  // namespace blockps
