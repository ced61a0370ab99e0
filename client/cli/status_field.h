// One field of a status page by its JSON pointer (contract/status_page.h), as `blockps status --field` prints
// it: what scripts read from a page instead of parsing its JSON themselves.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "contract/result.h"

namespace blockps::cli {

/// True when `pointer` is a field contract/status_page.h names ("/shard/size"), or lies inside one (a member of a
/// latency object, "/aggregation/latency/p50_ns"; an element of an array, "/rounds/live_workers/0/iqn").
bool is_status_page_field(std::string_view pointer);

/// The pointers contract/status_page.h names, comma-separated: what an unknown --field's error lists.
std::string status_page_fields();

/// The value at `pointer` of `page` as text: a string as it is (no quotes), anything else as compact JSON
/// (12, 0.05, true, {"p50_ns":1}). An error when the page does not have it (`source` names the page).
Result<std::string> status_page_field(const nlohmann::json& page, const std::string& pointer,
                                      const std::string& source);

/// A status page's text as its status LU reads (JSON, NUL-padded) -> the JSON object; an error naming `source`
/// when it is not one.
Result<nlohmann::json> parse_status_page(std::string_view text, const std::string& source);

}  // namespace blockps::cli
