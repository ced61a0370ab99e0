// Every shard's status page as Prometheus's text exposition format (version 0.0.4), what `blockps exporter`
// serves at /metrics. A pure function of the pages, so the unit tests pin every name and value; docs/OPTIONS.md
// ("blockps exporter") lists the metrics.
//
// Written here rather than with Debian's prometheus-cpp (1.0.1; tried, issue 40), because it cannot give this
// output: its Summary computes quantiles from its own observations, while ours are the shard's (p50_ns... of the
// page); its registry sorts a metric's labels by name (shard_info{device=...,shard=...}, not shard first) and
// groups families by type; its TextSerializer prints 16 significant digits, so 0.30000000000000004 becomes 0.3 and
// a value no longer reads back as the double the page held (tests/unit/client/cli/test_prometheus_metrics.cpp pins
// %.17g), always writes a summary's _sum and _count (a page may lack them), and leaves HELP unescaped. Its
// exposer (civetweb) would replace cpp-httplib for no gain: each scrape reads the pages afresh either way.
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
