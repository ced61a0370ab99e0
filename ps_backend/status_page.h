// The status page a shard's status LU serves: JSON whose fields the contract names
// (contract/status_page.h), NUL-padded to kStatusLuBytes by the LU.
#pragma once

#include <string>

#include "ps_backend/served_shard.h"

namespace blockps {

/// The page as of now: the shard's config, counters, aggregation latency, rounds and checkpoints.
std::string render_status_page(const ServedShard& shard);

}  // namespace blockps
