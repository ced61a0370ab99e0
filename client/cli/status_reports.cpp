#include "client/cli/status_reports.h"

#include <thread>

#include "blockps/cluster.h"

namespace blockps::cli {
namespace {

// The status page text as JSON, or an error naming the shard.
void parse_page(const std::string& source, const ShardStatusPage& page, ShardReport& report) {
  report.name = page.shard;
  nlohmann::json j = nlohmann::json::parse(page.json, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    report.error = source + ": shard '" + page.shard + "': the status page is not a JSON object";
    return;
  }
  report.page = std::move(j);
}

// Each shard alone, in parallel (a login per shard; an unreachable one should not hold up the others).
void read_shards_one_by_one(const ClusterConfig& config, std::vector<ShardReport>& reports) {
  const auto layout =
      make_layout(config.layout, config.model.size_bytes, config.model.block_bytes, config.shards.size());
  std::vector<std::thread> readers;
  for (std::size_t i = 0; i < config.shards.size(); ++i) {
    readers.emplace_back([&, i] {
      ShardReport& report = reports[i];
      try {
        ClusterConfig alone = config;
        alone.shards = {config.shards[i]};
        alone.layout = LayoutKind::stripe;
        alone.model.size_bytes = layout->shard_bytes(i);
        auto cluster = Cluster::open(alone, OpenOptions::reading_status());
        if (!cluster.ok()) {
          report.error = cluster.message();
          return;
        }
        auto pages = cluster.value()->status_pages();
        if (!pages.ok()) {
          report.error = pages.message();
          return;
        }
        parse_page(config.source, pages.value().front(), report);
      } catch (const std::exception& e) {
        report.error = config.source + ": shard '" + config.shards[i].name + "': " + e.what();
      }
    });
  }
  for (std::thread& t : readers) t.join();
}

}  // namespace

StatusReports read_status_reports(const ClusterConfig& config) {
  StatusReports read;
  read.shards.resize(config.shards.size());
  for (std::size_t i = 0; i < read.shards.size(); ++i) read.shards[i].name = config.shards[i].name;
  try {
    if (auto cluster = Cluster::open(config, OpenOptions::reading_status()); !cluster.ok()) {
      read.cluster_error = cluster.message();
    } else if (auto pages = cluster.value()->status_pages(); !pages.ok()) {
      read.cluster_error = pages.message();
    } else {
      for (std::size_t i = 0; i < read.shards.size(); ++i) parse_page(config.source, pages.value()[i], read.shards[i]);
    }
  } catch (const std::exception& e) {
    read.cluster_error = config.source + ": " + e.what();
  }
  if (!read.cluster_error.empty()) read_shards_one_by_one(config, read.shards);
  return read;
}

}  // namespace blockps::cli
