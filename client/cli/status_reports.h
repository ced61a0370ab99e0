// Every shard's status page (its fields: contract/status_page.h), as `blockps status` and `blockps
// exporter` read them: the cluster opened as a whole first (which also checks that the shards agree with the
// file); when that fails, e.g. one shard is down, each shard opened alone (as a one-shard cluster holding the bytes
// the layout gives it), so that the pages of the others are still read.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "blockps/cluster_file.h"

namespace blockps::cli {

// One shard's page, or why there is none.
struct ShardReport {
  std::string name;
  std::optional<nlohmann::json> page;
  std::string error;
};

struct StatusReports {
  std::vector<ShardReport> shards;  // in the cluster file's order
  std::string cluster_error;        // why the cluster could not be read as a whole ("" when it could)
};

// Reads every shard's page; never throws (an error is a shard's `error` or `cluster_error`).
StatusReports read_status_reports(const ClusterConfig& config);

}  // namespace blockps::cli
