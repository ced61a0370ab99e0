// The exporter's rendering (client/cli/prometheus_metrics.h): names with units and _total, HELP/TYPE per family,
// label escaping, a shard that is down, sync-only families, summaries with _sum and _count.
#include <gtest/gtest.h>

#include <regex>
#include <sstream>

#include "client/cli/prometheus_metrics.h"

namespace blockps::cli {
namespace {

ShardReport async_shard() {
  ShardReport r;
  r.name = "shard0";
  r.page = nlohmann::json::parse(R"({
    "shard": {"size": 1048576, "dtype": "f32", "block": 262144, "opt": "sgd", "lr": 0.05, "mode": "async",
              "device": "cpu", "engine": "cpu", "started_unix": 1790000000},
    "counters": {"pushes": 12, "push_bytes": 12582912, "pulls": 7, "pull_bytes": 7340032, "weight_writes": 1,
                 "weight_write_bytes": 1048576, "io_errors": 0},
    "aggregation": {"latency": {"count": 12, "p50_ns": 150000, "p90_ns": 200000, "p99_ns": 250000, "max_ns": 260000,
                                "total_count": 12, "total_ns": 1800000}},
    "rounds": {"mode": "async"},
    "model": {"block_steps": 48},
    "checkpoint": {"count": 2, "errors": 0, "last_unix": 1790000100, "last_error": "", "block_steps": 40}})");
  return r;
}

ShardReport sync_shard() {
  ShardReport r = async_shard();
  r.name = "shard1";
  (*r.page)["shard"]["mode"] = "sync";
  (*r.page)["rounds"] = nlohmann::json::parse(R"({"mode": "sync", "workers": 2, "rounds_min": 4, "rounds_max": 5,
    "rounds_closed": 40, "live_workers": [{"iqn": "a"}, {"iqn": "b"}], "stragglers_dropped": 1, "workers_dropped": 0,
    "parked_commands": 3, "degraded": false, "degraded_reason": "", "apply_failures": 0,
    "round_latency": {"p50_ns": 2000000, "p90_ns": 3000000, "p99_ns": 4000000, "total_count": 40,
                      "total_ns": 90000000}})");
  return r;
}

std::string line_of(const std::string& text, const std::string& prefix) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(prefix, 0) == 0) return line;
  return "";
}

TEST(PrometheusMetrics, CountersGaugesAndSummariesOfAShard) {
  const std::string t = render_prometheus({async_shard()}, 0.25);
  EXPECT_EQ(line_of(t, "blockps_shard_up{"), "blockps_shard_up{shard=\"shard0\"} 1");
  EXPECT_EQ(line_of(t, "blockps_pushes_total{"), "blockps_pushes_total{shard=\"shard0\"} 12");
  EXPECT_EQ(line_of(t, "blockps_push_bytes_total{"), "blockps_push_bytes_total{shard=\"shard0\"} 12582912");
  EXPECT_EQ(line_of(t, "blockps_pulls_total{"), "blockps_pulls_total{shard=\"shard0\"} 7");
  EXPECT_EQ(line_of(t, "blockps_learning_rate{"), "blockps_learning_rate{shard=\"shard0\"} 0.050000000000000003");
  EXPECT_EQ(line_of(t, "blockps_aggregation_seconds{shard=\"shard0\",quantile=\"0.99\"}"),
            "blockps_aggregation_seconds{shard=\"shard0\",quantile=\"0.99\"} 0.00025000000000000001");
  EXPECT_EQ(line_of(t, "blockps_aggregation_seconds_count{"), "blockps_aggregation_seconds_count{shard=\"shard0\"} 12");
  EXPECT_EQ(line_of(t, "blockps_aggregation_seconds_sum{"), "blockps_aggregation_seconds_sum{shard=\"shard0\"} 0.0018");
  EXPECT_EQ(line_of(t, "blockps_last_checkpoint_timestamp_seconds{"),
            "blockps_last_checkpoint_timestamp_seconds{shard=\"shard0\"} 1790000100");
  EXPECT_EQ(line_of(t, "blockps_block_steps_total{"), "blockps_block_steps_total{shard=\"shard0\"} 48");
  EXPECT_EQ(line_of(t, "blockps_checkpoint_block_steps{"), "blockps_checkpoint_block_steps{shard=\"shard0\"} 40");
  EXPECT_EQ(
      line_of(t, "blockps_shard_info{"),
      "blockps_shard_info{shard=\"shard0\",dtype=\"f32\",opt=\"sgd\",mode=\"async\",device=\"cpu\",engine=\"cpu\"} 1");
  EXPECT_EQ(line_of(t, "# TYPE blockps_pushes_total"), "# TYPE blockps_pushes_total counter");
  EXPECT_EQ(line_of(t, "# TYPE blockps_aggregation_seconds"), "# TYPE blockps_aggregation_seconds summary");
  EXPECT_EQ(line_of(t, "blockps_exporter_scrape_duration_seconds "), "blockps_exporter_scrape_duration_seconds 0.25");
  // An async shard has no sync-round samples (the families are declared, empty).
  EXPECT_EQ(line_of(t, "blockps_parked_commands{"), "");
  EXPECT_EQ(line_of(t, "blockps_rounds_closed_total{"), "");
}

TEST(PrometheusMetrics, SyncShardsHaveTheirRounds) {
  const std::string t = render_prometheus({async_shard(), sync_shard()}, 0);
  EXPECT_EQ(line_of(t, "blockps_rounds_closed_total{"), "blockps_rounds_closed_total{shard=\"shard1\"} 40");
  EXPECT_EQ(line_of(t, "blockps_live_workers{"), "blockps_live_workers{shard=\"shard1\"} 2");
  EXPECT_EQ(line_of(t, "blockps_parked_commands{"), "blockps_parked_commands{shard=\"shard1\"} 3");
  EXPECT_EQ(line_of(t, "blockps_stragglers_dropped_total{"), "blockps_stragglers_dropped_total{shard=\"shard1\"} 1");
  EXPECT_EQ(line_of(t, "blockps_degraded{"), "blockps_degraded{shard=\"shard1\"} 0");
  EXPECT_EQ(line_of(t, "blockps_round_seconds_count{"), "blockps_round_seconds_count{shard=\"shard1\"} 40");
  EXPECT_EQ(line_of(t, "blockps_round_seconds{shard=\"shard1\",quantile=\"0.5\"}"),
            "blockps_round_seconds{shard=\"shard1\",quantile=\"0.5\"} 0.002");
}

TEST(PrometheusMetrics, ADegradedShardSaysWhyAndCountsItsFailedUpdates) {
  ShardReport failed = sync_shard();
  failed.name = "shard2";
  (*failed.page)["rounds"]["degraded"] = true;
  (*failed.page)["rounds"]["degraded_reason"] = "sync: round 2 of block 0 not applied: \"device\" fault";
  (*failed.page)["rounds"]["apply_failures"] = 3;
  const std::string t = render_prometheus({sync_shard(), failed}, 0);
  EXPECT_NE(t.find("blockps_degraded{shard=\"shard2\"} 1\n"), std::string::npos) << t;
  EXPECT_NE(t.find("blockps_shard_degraded{shard=\"shard2\",reason=\"sync: round 2 of block 0 not applied: "
                   "\\\"device\\\" fault\"} 1\n"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("blockps_shard_degraded{shard=\"shard1\",reason=\"\"} 0\n"), std::string::npos) << t;
  EXPECT_NE(t.find("blockps_apply_failures_total{shard=\"shard2\"} 3\n"), std::string::npos) << t;
}

TEST(PrometheusMetrics, AShardThatIsDownIsUpZeroAndNothingElse) {
  ShardReport down;
  down.name = "shard2";
  down.error = "login refused";
  const std::string t = render_prometheus({async_shard(), down}, 0);
  EXPECT_NE(t.find("blockps_shard_up{shard=\"shard2\"} 0\n"), std::string::npos);
  EXPECT_EQ(t.find("shard2\"} 1"), std::string::npos);
  std::size_t shard2_lines = 0;
  for (std::size_t at = 0; (at = t.find("\"shard2\"", at)) != std::string::npos; ++at) ++shard2_lines;
  EXPECT_EQ(shard2_lines, 1u);
}

TEST(PrometheusMetrics, LabelValuesAreEscapedAndEveryLineIsWellFormed) {
  EXPECT_EQ(escape_label_value("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
  ShardReport odd = async_shard();
  odd.name = "shard \"x\"\n";
  const std::string t = render_prometheus({odd, sync_shard()}, 0.1);
  EXPECT_NE(t.find("blockps_shard_up{shard=\"shard \\\"x\\\"\\n\"} 1"), std::string::npos) << t;
  // Every line is a comment, or NAME{LABELS} VALUE / NAME VALUE with a Prometheus metric name.
  const std::regex sample(
      R"re(^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\]|\\.)*",?)*\})? -?[0-9.e+-]+$)re");
  std::istringstream in(t);
  std::size_t families = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("# TYPE ", 0) == 0) ++families;
    if (line.rfind("# ", 0) == 0) continue;
    EXPECT_TRUE(std::regex_match(line, sample)) << line;
  }
  EXPECT_GT(families, 20u);
}

}  // namespace
}  // namespace blockps::cli
