// A throughput measurement on one LU through libiscsi, for benchmarks and tests: commands of one size at a queue
// depth, walking sequentially through a range of the LU, for a number of commands or a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "client/transport/iscsi_lun.h"

namespace blockps::testing {

// One run: commands of request_bytes each, queue_depth in flight, offsets walking sequentially through
// [range_offset, range_offset + range_bytes) and wrapping. Stops issuing when `requests` commands were issued or
// `seconds` passed, whichever comes first (at least one limit is required); in-flight commands are waited for
// and counted.
struct PipelineSpec {
  IoDirection direction = IoDirection::read;
  std::uint32_t request_bytes = 256 * 1024;  // multiple of the block size
  int queue_depth = 16;
  std::uint64_t range_offset = 0;  // bytes, block aligned
  std::uint64_t range_bytes = 0;   // 0: to the end of the LU; rounded down to whole requests
  std::uint64_t requests = 0;      // 0: no count limit
  double seconds = 0;              // 0: no time limit
  // Writes: the request at range-relative offset r sends write_source[r % size ...] (size must be a
  // non-zero multiple of request_bytes). Must stay valid until run_pipeline() returns.
  std::span<const std::byte> write_source;
};

struct PipelineResult {
  std::uint64_t requests = 0;  // completed with GOOD status
  std::uint64_t bytes = 0;     // payload bytes of those
  double seconds = 0;          // from first issue to last completion
  ScsiResult error;            // first failure; ok() when none
  bool ok() const { return error.ok(); }
  double megabytes_per_second() const { return seconds > 0 ? static_cast<double>(bytes) / seconds / 1e6 : 0; }
};

// Runs spec on lun and measures it. Errors (in PipelineResult::error): lun not connected, a spec that names no
// limit or no request in its range, and whatever IscsiLun::run_stream() reports (a request size or offset the
// block size does not divide, the target's sense of the first failed command, a transport failure).
PipelineResult run_pipeline(IscsiLun& lun, const PipelineSpec& spec);

}  // namespace blockps::testing
