// `blockps status`: every shard's status page (its fields: contract/status_page.h) as a table or JSON: the
// shard's counters, the job that holds it and its place, and the rounds of a sync shard.
// The pages are read as client/cli/status_reports.h says; when a shard's cannot be, the others are still shown
// and the run exits kExitFailed. With --field, only the values at those pointers (client/cli/status_field.h), of
// each shard or of one page read from a file (--page).
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "blockps/cluster.h"
#include "client/cli/commands.h"
#include "client/cli/status_field.h"
#include "client/cli/status_reports.h"
#include "client/cli/table.h"
#include "client/job_and_place.h"
#include "contract/status_page.h"

namespace blockps::cli {
namespace {

std::uint64_t number_at(const nlohmann::json& page, const char* pointer) {
  const nlohmann::json::json_pointer p(pointer);
  if (!page.contains(p) || !page[p].is_number_unsigned()) return 0;
  return page[p].get<std::uint64_t>();
}
// The page's live workers (an empty array when it has none or is not a sync shard's).
const nlohmann::json& live_workers(const nlohmann::json& page) {
  static const nlohmann::json none = nlohmann::json::array();
  const nlohmann::json::json_pointer p(status_page::kRoundsLiveWorkers);
  return page.contains(p) && page[p].is_array() ? page[p] : none;
}
// A latency object's field, as a pointer.
std::string latency_field(const char* latency, const char* key) { return std::string(latency) + "/" + key; }
const std::string round_latency_p50 = latency_field(status_page::kRoundsRoundLatency, status_page::latency::kP50Ns);
const std::string round_latency_p99 = latency_field(status_page::kRoundsRoundLatency, status_page::latency::kP99Ns);

std::string text_at(const nlohmann::json& page, const char* pointer) {
  const nlohmann::json::json_pointer p(pointer);
  if (!page.contains(p)) return "?";
  const nlohmann::json& v = page[p];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_float()) {
    char text[32];
    std::snprintf(text, sizeof text, "%g", v.get<double>());
    return text;
  }
  return v.dump();
}

void print_rounds(const std::vector<ShardReport>& reports);
void print_jobs(const std::vector<ShardReport>& reports);

void print_table(const std::vector<ShardReport>& reports) {
  using A = TextTable::Align;
  TextTable table({{"shard", A::left},
                   {"size"},
                   {"dtype", A::left},
                   {"block"},
                   {"opt", A::left},
                   {"lr"},
                   {"pushes"},
                   {"pulls"},
                   {"push bytes"},
                   {"pull bytes"},
                   {"mean agg us"},
                   {"checkpoints"},
                   {"last checkpoint error", A::left}});
  std::uint64_t size = 0, pushes = 0, pulls = 0, push_bytes = 0, pull_bytes = 0, aggregation_ns = 0, checkpoints = 0;
  for (const ShardReport& r : reports) {
    if (!r.page) {
      table.add_row({r.name, "-", "-", "-", "-", "-", "-", "-", "-", "-", "-", "-", "(no status page: see the error)"});
      continue;
    }
    const nlohmann::json& p = *r.page;
    std::string last_error = text_at(p, status_page::kCheckpointLastError);
    for (char& c : last_error)
      if (c == '\n') c = ' ';
    table.add_row({r.name, format_bytes(number_at(p, status_page::kShardSize)), text_at(p, status_page::kShardDtype),
                   format_bytes(number_at(p, status_page::kShardBlock)), text_at(p, status_page::kShardOpt),
                   text_at(p, status_page::kShardLr), std::to_string(number_at(p, status_page::kPushes)),
                   std::to_string(number_at(p, status_page::kPulls)),
                   format_bytes(number_at(p, status_page::kPushBytes)),
                   format_bytes(number_at(p, status_page::kPullBytes)),
                   format_fixed(static_cast<double>(number_at(p, status_page::kAggregationMeanNs)) / 1e3, 1),
                   std::to_string(number_at(p, status_page::kCheckpointCount)), last_error.empty() ? "-" : last_error});
    size += number_at(p, status_page::kShardSize);
    pushes += number_at(p, status_page::kPushes);
    pulls += number_at(p, status_page::kPulls);
    push_bytes += number_at(p, status_page::kPushBytes);
    pull_bytes += number_at(p, status_page::kPullBytes);
    aggregation_ns += number_at(p, status_page::kAggregationTotalNs);
    checkpoints += number_at(p, status_page::kCheckpointCount);
  }
  table.add_rule();
  const double mean_us = pushes ? static_cast<double>(aggregation_ns) / static_cast<double>(pushes) / 1e3 : 0.0;
  table.add_row({"total", format_bytes(size), "", "", "", "", std::to_string(pushes), std::to_string(pulls),
                 format_bytes(push_bytes), format_bytes(pull_bytes), format_fixed(mean_us, 1),
                 std::to_string(checkpoints), ""});
  table.print(std::cout);
  print_jobs(reports);
  print_rounds(reports);
}

// Which job holds each shard and which place it holds (client/job_and_place.h reads the page's /job and /place).
void print_jobs(const std::vector<ShardReport>& reports) {
  using A = TextTable::Align;
  TextTable jobs({{"shard", A::left},
                  {"job", A::left},
                  {"sessions"},
                  {"active s ago"},
                  {"refused"},
                  {"takeovers"},
                  {"place", A::left}});
  bool any = false;
  for (const ShardReport& r : reports) {
    if (!r.page) continue;
    auto claim = read_shard_claim(*r.page);
    if (!claim.ok()) {
      jobs.add_row({r.name, "?", "-", "-", "-", "-", "(the page has no job or place: an older module)"});
      any = true;
      continue;
    }
    any = true;
    std::string holder = claim->holder.empty() ? "-" : claim->holder;
    if (claim->lapsed) holder += " (lapsed)";
    jobs.add_row({r.name, holder, claim->holder.empty() ? "-" : std::to_string(claim->sessions),
                  claim->last_active_s_ago ? format_fixed(*claim->last_active_s_ago, 1) : "-",
                  std::to_string(claim->refused), std::to_string(number_at(*r.page, status_page::kJobTakeovers)),
                  claim->place.model.empty() ? "-" : format_place(claim->place)});
  }
  if (!any) return;
  std::cout << "\njobs and places\n";
  jobs.print(std::cout);
}

// mode=sync and ssp:K shards: their rounds, and one line per live worker (the status page's "rounds" object).
void print_rounds(const std::vector<ShardReport>& reports) {
  using A = TextTable::Align;
  TextTable rounds({{"shard", A::left},
                    {"rounds"},
                    {"live/expected"},
                    {"min"},
                    {"parked"},
                    {"stragglers"},
                    {"dropped"},
                    {"round p50 ms"},
                    {"round p99 ms"},
                    {"state", A::left}});
  TextTable workers(
      {{"shard", A::left}, {"worker", A::left}, {"session"}, {"pushes"}, {"last push ms"}, {"rounds behind"}});
  bool any = false, any_worker = false;
  const auto ms = [](std::uint64_t ns) { return format_fixed(static_cast<double>(ns) / 1e6, 1); };
  for (const ShardReport& r : reports) {
    if (!r.page) continue;
    const std::string mode = text_at(*r.page, status_page::kRoundsMode);
    if (mode != "sync" && !mode.starts_with("ssp")) continue;
    any = true;
    const nlohmann::json& p = *r.page;
    const std::string reason = text_at(p, status_page::kRoundsDegradedReason);
    rounds.add_row(
        {r.name,
         std::to_string(number_at(p, status_page::kRoundsMin)) + "-" +
             std::to_string(number_at(p, status_page::kRoundsMax)),
         std::to_string(live_workers(p).size()) + "/" + std::to_string(number_at(p, status_page::kRoundsWorkers)),
         std::to_string(number_at(p, status_page::kRoundsMinWorkers)),
         std::to_string(number_at(p, status_page::kRoundsParkedCommands)),
         std::to_string(number_at(p, status_page::kRoundsStragglersDropped)),
         std::to_string(number_at(p, status_page::kRoundsWorkersDropped)), ms(number_at(p, round_latency_p50.c_str())),
         ms(number_at(p, round_latency_p99.c_str())), reason.empty() || reason == "-" ? "ok" : "DEGRADED: " + reason});
    for (const auto& w : live_workers(p)) {
      namespace worker = status_page::live_worker;
      any_worker = true;
      workers.add_row({r.name, w.value(worker::kIqn, "?"), std::to_string(w.value(worker::kSession, 0ULL)),
                       std::to_string(w.value(worker::kPushes, 0ULL)),
                       std::to_string(w.value(worker::kLastPushMsAgo, 0ULL)),
                       std::to_string(w.value(worker::kRoundsBehind, 0ULL))});
    }
  }
  if (!any) return;
  std::cout << "\nsync rounds\n";
  rounds.print(std::cout);
  if (any_worker) {
    std::cout << "\nlive workers\n";
    workers.print(std::cout);
  }
}

void print_json(const std::vector<ShardReport>& reports) {
  nlohmann::json shards = nlohmann::json::array();
  for (const ShardReport& r : reports) {
    nlohmann::json entry = r.page ? *r.page : nlohmann::json::object();
    entry["name"] = r.name;
    if (!r.page) entry["error"] = r.error;
    shards.push_back(std::move(entry));
  }
  std::cout << nlohmann::json{{"shards", std::move(shards)}}.dump(2) << "\n";
}

// --field: one line of values per page ("" when it lacks one: said on stderr).
std::string field_line(const nlohmann::json& page, const std::vector<std::string>& fields, const std::string& source) {
  std::string line;
  for (const std::string& field : fields) {
    const Result<std::string> value = status_page_field(page, field, source);
    if (!value.ok()) {
      print_error(value.message());
      return "";
    }
    line += (line.empty() ? "" : "\t") + *value;
  }
  return line + "\n";
}

// --page FILE: one page from a file or stdin, no cluster.
int print_page_fields(const std::string& file, const std::vector<std::string>& fields) {
  const std::string source = file == "-" ? "stdin" : file;
  const Result<std::string> text = read_input(file, "status page");
  if (!text.ok()) {
    print_error(text.message());
    return kExitFailed;
  }
  const Result<nlohmann::json> page = parse_status_page(*text, source);
  if (!page.ok()) {
    print_error(page.message());
    return kExitFailed;
  }
  const std::string line = field_line(*page, fields, source);
  std::cout << line;
  return line.empty() ? kExitFailed : kExitOk;
}

// --field with the cluster: "NAME\tVALUE..." per shard whose page was read and has every field.
int print_shard_fields(const ClusterConfig& config, const std::vector<std::string>& fields) {
  const StatusReports read = read_status_reports(config);
  bool failed = false;
  for (const ShardReport& r : read.shards) {
    if (!r.page) {
      print_error(r.error);
      failed = true;
      continue;
    }
    const std::string line = field_line(*r.page, fields, config.source + ": shard '" + r.name + "'");
    if (line.empty())
      failed = true;
    else
      std::cout << r.name << "\t" << line;
  }
  return failed ? kExitFailed : kExitOk;
}

}  // namespace

int run_status(const std::string& cluster_file, const StatusOptions& options) {
  if (options.page) return print_page_fields(*options.page, options.fields);
  auto config = load_cluster_file(cluster_file);
  if (!config.ok()) {
    print_error(config.message());
    return kExitFailed;
  }
  if (!options.fields.empty()) return print_shard_fields(config.value(), options.fields);
  StatusReports read = read_status_reports(config.value());
  const std::vector<ShardReport>& reports = read.shards;
  const std::string& cluster_error = read.cluster_error;
  if (!cluster_error.empty()) print_error(cluster_error);

  // Each message once: a shard that failed alone usually failed the whole cluster with the same words.
  std::set<std::string> told{cluster_error};
  bool failed = !cluster_error.empty();
  for (const ShardReport& r : reports) {
    if (r.page) continue;
    failed = true;
    if (told.insert(r.error).second) print_error(r.error);
  }
  if (options.json)
    print_json(reports);
  else
    print_table(reports);
  return failed ? kExitFailed : kExitOk;
}

}  // namespace blockps::cli
