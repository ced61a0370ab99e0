#include "client/cli/prometheus_metrics.h"

#include <cstdio>
#include <functional>
#include <optional>

#include "contract/status_page.h"

namespace blockps::cli {
namespace {

using nlohmann::json;

// A number at a JSON pointer of a page, or nothing (a page of another version may lack it).
std::optional<double> number(const json& page, const char* pointer) {
  const json::json_pointer p(pointer);
  if (!page.contains(p) || !page[p].is_number()) return std::nullopt;
  return page[p].get<double>();
}

std::string format_value(double v) {
  char text[40];
  std::snprintf(text, sizeof text, "%.17g", v);
  return text;
}

// One metric family: its HELP and TYPE, then one line per sample.
class Family {
 public:
  Family(std::string& out, const std::string& name, const char* type, const char* help) : out_(out), name_(name) {
    out_ += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  }
  // name{shard="S"[,extra]} value, or name_suffix{...} for a summary's _sum and _count.
  void sample(const std::string& shard, double value, const std::string& extra_labels = {}, const char* suffix = "") {
    out_ += name_ + suffix + "{shard=\"" + escape_label_value(shard) + "\"" +
            (extra_labels.empty() ? "" : "," + extra_labels) + "} " + format_value(value) + "\n";
  }

 private:
  std::string& out_;
  std::string name_;
};

// A counter or gauge read from every page that has the number at `pointer`, scaled (ns -> s).
void from_pages(std::string& out, const std::vector<ShardReport>& shards, const std::string& name, const char* type,
                const char* help, const char* pointer, double scale = 1, bool sync_only = false) {
  Family f(out, name, type, help);
  for (const ShardReport& r : shards) {
    if (!r.page || (sync_only && !r.page->contains(json::json_pointer(status_page::kRoundsClosed)))) continue;
    if (const auto v = number(*r.page, pointer)) f.sample(r.name, *v * scale);
  }
}

// A summary from a latency object of the page ({p50_ns, p90_ns, p99_ns, total_count, total_ns}): the quantiles
// are over the shard's recent samples, _sum and _count since it started.
void summary(std::string& out, const std::vector<ShardReport>& shards, const std::string& name, const char* help,
             const char* pointer) {
  Family f(out, name, "summary", help);
  for (const ShardReport& r : shards) {
    if (!r.page) continue;
    const json::json_pointer p(pointer);
    if (!r.page->contains(p) || !(*r.page)[p].is_object()) continue;
    const json& l = (*r.page)[p];
    namespace latency = status_page::latency;
    for (const auto& [q, key] :
         {std::pair{"0.5", latency::kP50Ns}, {"0.9", latency::kP90Ns}, {"0.99", latency::kP99Ns}})
      if (l.contains(key) && l[key].is_number())
        f.sample(r.name, l[key].get<double>() / 1e9, "quantile=\"" + std::string(q) + "\"");
    if (l.contains(latency::kTotalNs) && l[latency::kTotalNs].is_number())
      f.sample(r.name, l[latency::kTotalNs].get<double>() / 1e9, {}, "_sum");
    if (l.contains(latency::kTotalCount) && l[latency::kTotalCount].is_number())
      f.sample(r.name, l[latency::kTotalCount].get<double>(), {}, "_count");
  }
}

std::string text(const json& page, const char* pointer) {
  const json::json_pointer p(pointer);
  return page.contains(p) && page[p].is_string() ? page[p].get<std::string>() : "";
}

// A family whose sample is one number of each page, as from_pages writes it.
struct PageNumber {
  const char* name;
  const char* type;
  const char* help;
  const char* pointer;
  double scale = 1;
  bool sync_only = false;
};

template <std::size_t N>
void write_numbers(std::string& out, const std::vector<ShardReport>& shards, const PageNumber (&families)[N]) {
  for (const PageNumber& f : families) from_pages(out, shards, f.name, f.type, f.help, f.pointer, f.scale, f.sync_only);
}

// What the shard is: its size, block, learning rate and start.
const PageNumber kShardShape[] = {
    {"blockps_shard_size_bytes", "gauge", "the shard's size in wire bytes", status_page::kShardSize},
    {"blockps_shard_block_bytes", "gauge", "the shard's aggregation block in wire bytes", status_page::kShardBlock},
    {"blockps_learning_rate", "gauge", "the shard's current learning rate", status_page::kShardLr},
    {"blockps_shard_start_time_seconds", "gauge", "when the shard was created or loaded (Unix time)",
     status_page::kShardStartedUnix},
};

// What the workers sent and read.
const PageNumber kTraffic[] = {
    {"blockps_pushes_total", "counter", "gradient pushes (WRITEs of the grad LU)", status_page::kPushes},
    {"blockps_push_bytes_total", "counter", "bytes of gradients pushed", status_page::kPushBytes},
    {"blockps_pulls_total", "counter", "weight pulls (READs of the grad and weights LUs)", status_page::kPulls},
    {"blockps_pull_bytes_total", "counter", "bytes of weights pulled", status_page::kPullBytes},
    {"blockps_weight_writes_total", "counter", "WRITEs of the weights LU (assignments)", status_page::kWeightWrites},
    {"blockps_weight_write_bytes_total", "counter", "bytes written to the weights LU", status_page::kWeightWriteBytes},
    {"blockps_io_errors_total", "counter", "commands the shard failed", status_page::kIoErrors},
};

// The checkpoints, and the steps a crash now would lose (block_steps_total minus checkpoint_block_steps).
const PageNumber kCheckpoints[] = {
    {"blockps_checkpoints_total", "counter", "checkpoints written", status_page::kCheckpointCount},
    {"blockps_checkpoint_errors_total", "counter", "checkpoint writes that failed", status_page::kCheckpointErrors},
    {"blockps_last_checkpoint_timestamp_seconds", "gauge",
     "when the last checkpoint was written (Unix time; 0: none yet)", status_page::kCheckpointLastUnix},
    {"blockps_block_steps_total", "counter",
     "optimizer steps applied, summed over the shard's blocks (back to the checkpoint's after a restart)",
     status_page::kModelBlockSteps},
    {"blockps_checkpoint_block_steps", "gauge",
     "optimizer steps summed over the blocks of the checkpoint written or loaded last",
     status_page::kCheckpointBlockSteps},
};

// Sync (BSP) shards' rounds, before and after the live-worker count.
const PageNumber kRoundPositions[] = {
    {"blockps_rounds_closed_total", "counter", "rounds closed and applied (sync)", status_page::kRoundsClosed, 1, true},
    {"blockps_round_min", "gauge", "the lowest round a block of the shard is in (sync)", status_page::kRoundsMin, 1,
     true},
    {"blockps_round_max", "gauge", "the highest round a block of the shard is in (sync)", status_page::kRoundsMax, 1,
     true},
};
const PageNumber kRoundWorkers[] = {
    {"blockps_expected_workers", "gauge", "the workers= a round waits for (sync)", status_page::kRoundsWorkers, 1,
     true},
    {"blockps_parked_commands", "gauge", "READs and WRITEs waiting for a round (sync)",
     status_page::kRoundsParkedCommands, 1, true},
    {"blockps_stragglers_dropped_total", "counter",
     "rounds closed without a worker that was late (straggler_ms) (sync)", status_page::kRoundsStragglersDropped, 1,
     true},
    {"blockps_workers_dropped_total", "counter",
     "workers dropped from the rounds (session gone or worker_timeout_ms) (sync)", status_page::kRoundsWorkersDropped,
     1, true},
};
const PageNumber kApplyFailures[] = {
    {"blockps_apply_failures_total", "counter",
     "updates the shard failed to apply (a GPU fault...): its grad LU fails commands until reset-rounds",
     status_page::kRoundsApplyFailures, 1, true},
};

// Whether each shard answered this scrape, and its configuration as labels.
void write_availability(std::string& out, const std::vector<ShardReport>& shards) {
  {
    Family up(out, "blockps_shard_up", "gauge", "1 when the shard's status page was read in this scrape, else 0");
    for (const ShardReport& r : shards) up.sample(r.name, r.page ? 1 : 0);
  }
  Family info(out, "blockps_shard_info", "gauge",
              "the shard's configuration as labels (dtype, opt, mode, device, engine); always 1");
  for (const ShardReport& r : shards) {
    if (!r.page) continue;
    std::string labels;
    for (const auto& [label, pointer] : {std::pair{"dtype", status_page::kShardDtype},
                                         {"opt", status_page::kShardOpt},
                                         {"mode", status_page::kShardMode},
                                         {"device", status_page::kShardDevice},
                                         {"engine", status_page::kShardEngine}})
      labels +=
          std::string(labels.empty() ? "" : ",") + label + "=\"" + escape_label_value(text(*r.page, pointer)) + "\"";
    info.sample(r.name, 1, labels);
  }
}

void write_live_workers(std::string& out, const std::vector<ShardReport>& shards) {
  Family live(out, "blockps_live_workers", "gauge", "workers the shard counts in its rounds now (sync)");
  const json::json_pointer p(status_page::kRoundsLiveWorkers);
  for (const ShardReport& r : shards)
    if (r.page && r.page->contains(p) && (*r.page)[p].is_array())
      live.sample(r.name, static_cast<double>((*r.page)[p].size()));
}

// Degraded twice: as 0/1, and with the reason as a label so that an alert can say why without reading the page.
void write_degraded(std::string& out, const std::vector<ShardReport>& shards) {
  Family degraded(out, "blockps_degraded", "gauge",
                  "1 when the shard fails its grad LU's commands (fewer live workers than min_workers, or an "
                  "update it failed to apply) (sync/ssp)");
  Family shard_degraded(out, "blockps_shard_degraded", "gauge",
                        "1 with the reason while the shard fails its grad LU's commands (sync/ssp)");
  const json::json_pointer p(status_page::kRoundsDegraded);
  for (const ShardReport& r : shards) {
    if (!r.page || !r.page->contains(p) || !(*r.page)[p].is_boolean()) continue;
    const bool is_degraded = (*r.page)[p].get<bool>();
    degraded.sample(r.name, is_degraded ? 1 : 0);
    shard_degraded.sample(r.name, is_degraded ? 1 : 0,
                          "reason=\"" + escape_label_value(text(*r.page, status_page::kRoundsDegradedReason)) + "\"");
  }
}

void write_sync_rounds(std::string& out, const std::vector<ShardReport>& shards) {
  write_numbers(out, shards, kRoundPositions);
  write_live_workers(out, shards);
  write_numbers(out, shards, kRoundWorkers);
  write_degraded(out, shards);
  write_numbers(out, shards, kApplyFailures);
  summary(out, shards, "blockps_round_seconds", "time from a round's first push to its close (sync)",
          status_page::kRoundsRoundLatency);
}

// The exporter's own gauge: a family without the shard label.
void write_scrape_duration(std::string& out, double scrape_seconds) {
  out +=
      "# HELP blockps_exporter_scrape_duration_seconds time this scrape took to read every shard's status page\n"
      "# TYPE blockps_exporter_scrape_duration_seconds gauge\nblockps_exporter_scrape_duration_seconds " +
      format_value(scrape_seconds) + "\n";
}

}  // namespace

std::string escape_label_value(const std::string& value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

std::string render_prometheus(const std::vector<ShardReport>& shards, double scrape_seconds) {
  std::string out;
  write_availability(out, shards);
  write_numbers(out, shards, kShardShape);
  write_numbers(out, shards, kTraffic);
  summary(out, shards, "blockps_aggregation_seconds",
          "time of one optimizer step over a pushed range (async) or a closed round's block (sync)",
          status_page::kAggregationLatency);
  write_numbers(out, shards, kCheckpoints);
  write_sync_rounds(out, shards);
  write_scrape_duration(out, scrape_seconds);
  return out;
}

}  // namespace blockps::cli
