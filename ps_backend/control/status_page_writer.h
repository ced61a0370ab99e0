// The status page a shard's status LU serves: JSON whose fields the contract names
// (contract/status_page.h), NUL-padded to kStatusLuBytes by the LU.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ps_backend/shard/served_shard.h"

namespace blockps {

/// Set the page's field at `pointer` (one of contract/status_page.h's), making the sections on the way.
inline void set_field(nlohmann::json& page, const char* pointer, nlohmann::json value) {
  page[nlohmann::json::json_pointer(pointer)] = std::move(value);
}

/// The page as of now: the shard's config, counters, aggregation latency, rounds, checkpoints, the job that holds
/// it, its place and its latest refusals.
std::string render_status_page(const ServedShard& shard);

/// A latency object (contract/status_page.h, namespace latency).
nlohmann::json latency_object(const LatencySummary& s);
/// The page's "rounds" section for what the rounds report.
nlohmann::json rounds_section(const RoundsStatus& s);
/// The page's /refusals/recent array (contract/status_page.h, namespace refusal).
nlohmann::json refusals_array(const std::vector<RefusalEntry>& entries);

}  // namespace blockps
