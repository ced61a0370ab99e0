// Every shard's status page as Prometheus's text exposition format (version 0.0.4), what `blockps exporter`
// serves at /metrics. A pure function of the pages, so the unit tests pin every name and value; docs/OPTIONS.md
// ("blockps exporter") lists the metrics.
#pragma once

#include <string>
#include <vector>

#include "client/cli/status_reports.h"

namespace blockps::cli {

// The exposition text: one HELP and TYPE line per family, then a sample per shard (label shard="NAME"). A
// shard without a page gives only blockps_shard_up 0; the sync-round families have samples only for sync
// shards. `scrape_seconds`: how long reading the pages took (blockps_exporter_scrape_duration_seconds).
std::string render_prometheus(const std::vector<ShardReport>& shards, double scrape_seconds);

// A label value as the format quotes it: backslash, double quote and line feed escaped.
std::string escape_label_value(const std::string& value);

}  // namespace blockps::cli
