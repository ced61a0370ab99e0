// client/cli/status_field.cpp: which pointers `blockps status --field` accepts (the fields contract/status_page.h
// names, and the members of its latency objects and arrays), the list an unknown one's error gives, one field's
// value as scripts read it, and a status LU's NUL-padded text as a page. That the list names every pointer of the
// contract is checked in tests/integration/cli/test_cli.cpp.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "client/cli/status_field.h"
#include "contract/status_page.h"

namespace blockps::cli {
namespace {

namespace sp = status_page;

TEST(IsStatusPageField, TheContractsFieldsAndNothingElse) {
  for (const char* field : {sp::kFormatField, sp::kShard, sp::kShardSize, sp::kShardDtype, sp::kRoundsDegradedReason,
                            sp::kJobHolder, sp::kPlaceText, sp::kRefusalsRecent})
    EXPECT_TRUE(is_status_page_field(field)) << field;
  for (const char* other : {"", "/", "shard/size", "/shard/", "/shard/sizes", "/shard/size/x", "/counters", "/blockps",
                            "/SHARD/size", "/rounds/nope"})
    EXPECT_FALSE(is_status_page_field(other)) << other;
}

TEST(IsStatusPageField, TheKeysOfALatencyObject) {
  for (const char* latency : {sp::kAggregationLatency, sp::kRoundsRoundLatency, sp::kRoundsApplyLatency}) {
    const std::string base = latency;
    for (const char* key : {"count", "p50_ns", "p90_ns", "p99_ns", "max_ns", "total_count", "total_ns"})
      EXPECT_TRUE(is_status_page_field(base + "/" + key)) << base << "/" << key;
    EXPECT_FALSE(is_status_page_field(base + "/p95_ns"));
    EXPECT_FALSE(is_status_page_field(base + "/"));
    EXPECT_FALSE(is_status_page_field(base + "/0"));
    EXPECT_FALSE(is_status_page_field(base + "/p50_ns/x"));
  }
  // A pointer that only begins like a container's is not inside it.
  EXPECT_FALSE(is_status_page_field("/aggregation/latencyX/p50_ns"));
  EXPECT_FALSE(is_status_page_field("/aggregation/latencyp50_ns"));
}

TEST(IsStatusPageField, ElementsOfAnArrayAndTheirKeys) {
  EXPECT_TRUE(is_status_page_field("/rounds/live_workers/0"));
  EXPECT_TRUE(is_status_page_field("/rounds/live_workers/12/iqn"));
  EXPECT_TRUE(is_status_page_field("/rounds/live_workers/3/rounds_behind"));
  EXPECT_TRUE(is_status_page_field("/refusals/recent/15/reason"));
  EXPECT_TRUE(is_status_page_field("/refusals/recent/0/unix_ms"));
  EXPECT_FALSE(is_status_page_field("/rounds/live_workers/x"));       // not an index
  EXPECT_FALSE(is_status_page_field("/rounds/live_workers/0x"));      // an index with more after it
  EXPECT_FALSE(is_status_page_field("/rounds/live_workers/iqn"));     // a key without an element
  EXPECT_FALSE(is_status_page_field("/rounds/live_workers/0/nope"));  // not a live worker's key
  EXPECT_FALSE(is_status_page_field("/rounds/live_workers/0/"));
  EXPECT_FALSE(is_status_page_field("/rounds/live_workers//iqn"));  // a key where the index should be
  EXPECT_FALSE(is_status_page_field("/refusals/recent/1/iqn/x"));
  // The contract names no keys of a recent drop: any key of an element is accepted, an empty one is not.
  EXPECT_TRUE(is_status_page_field("/rounds/recent_drops/2"));
  EXPECT_TRUE(is_status_page_field("/rounds/recent_drops/2/whatever"));
  EXPECT_FALSE(is_status_page_field("/rounds/recent_drops/2/"));
  EXPECT_FALSE(is_status_page_field("/rounds/recent_drops/any"));
  EXPECT_FALSE(is_status_page_field("/rounds/recent_drops//any"));
}

TEST(StatusPageFields, ListsTheContractsPointersCommaSeparatedInItsOrder) {
  const std::string list = status_page_fields();
  EXPECT_EQ(list.rfind("/blockps/status_format, /shard, /shard/path, /shard/options, /shard/settings, /shard/size, ", 0), 0u) << list;
  EXPECT_TRUE(list.ends_with(", /place/text, /init, /init/state, /init/by, /refusals/recent")) << list;
  std::size_t count = 0;
  for (std::size_t from = 0, comma; from <= list.size(); from = comma + 2) {
    comma = list.find(", ", from);
    if (comma == std::string::npos) comma = list.size();
    const std::string field = list.substr(from, comma - from);
    EXPECT_TRUE(is_status_page_field(field)) << "'" << field << "'";
    ++count;
  }
  EXPECT_EQ(count, 74u);  // one per pointer of contract/status_page.h
}

const nlohmann::json kPage = nlohmann::json::parse(R"({
  "shard": {"size": 1048576, "dtype": "bf16", "lr": 0.05},
  "aggregation": {"latency": {"p50_ns": 1, "max_ns": 7}},
  "rounds": {"degraded": true, "degraded_reason": "", "live_workers": [{"iqn": "iqn.w0", "pushes": 3}]},
  "job": {"holder": null}
})");

TEST(StatusPageField, AStringAsItIsAnythingElseAsCompactJson) {
  const auto value = [](const std::string& pointer) {
    auto r = status_page_field(kPage, pointer, "c.toml");
    EXPECT_TRUE(r.ok()) << pointer << ": " << r.message();
    return r.ok() ? r.value() : "";
  };
  EXPECT_EQ(value("/shard/dtype"), "bf16");  // no quotes
  EXPECT_EQ(value("/shard/size"), "1048576");
  EXPECT_EQ(value("/shard/lr"), "0.05");
  EXPECT_EQ(value("/rounds/degraded"), "true");
  EXPECT_EQ(value("/rounds/degraded_reason"), "");
  EXPECT_EQ(value("/aggregation/latency"), R"({"max_ns":7,"p50_ns":1})");
  EXPECT_EQ(value("/rounds/live_workers/0/iqn"), "iqn.w0");
  EXPECT_EQ(value("/rounds/live_workers/0"), R"({"iqn":"iqn.w0","pushes":3})");
  EXPECT_EQ(value("/job/holder"), "null");
}

TEST(StatusPageField, AFieldThePageLacksIsAMismatchNamingTheSourceAndTheField) {
  for (const std::string pointer : {"/shard/mode", "/place/text", "/rounds/live_workers/1", "/rounds/live_workers/x",
                                    "/rounds/live_workers/0/session", "/shard/size/x", "shard/size", "/shard~"}) {
    auto r = status_page_field(kPage, pointer, "c.toml: shard 's1'");
    ASSERT_FALSE(r.ok()) << pointer;
    EXPECT_EQ(r.status().code(), StatusCode::mismatch) << pointer;
    EXPECT_EQ(r.message(), "c.toml: shard 's1': the status page has no " + pointer +
                               " (a field of another mode, or a module older than this command)");
  }
}

TEST(ParseStatusPage, TheJsonBeforeTheNulPadding) {
  std::string text = R"({"shard":{"size":4}})";
  text.append(4096 - text.size(), '\0');
  auto page = parse_status_page(text, "s0");
  ASSERT_TRUE(page.ok()) << page.message();
  EXPECT_EQ(page.value()["shard"]["size"], 4);

  // What follows the first NUL is padding, whatever it holds.
  auto after = parse_status_page(std::string(R"({"a":1})") + '\0' + "garbage", "s0");
  ASSERT_TRUE(after.ok()) << after.message();
  EXPECT_EQ(after.value(), nlohmann::json::parse(R"({"a":1})"));
}

TEST(ParseStatusPage, AnythingButAJsonObjectIsNotAStatusPage) {
  for (const std::string& text : {std::string(), std::string(512, '\0'), std::string("[1, 2]"), std::string("42"),
                                  std::string("{\"a\":"), std::string("not json"), std::string("\0{}", 3)}) {
    auto page = parse_status_page(text, "cluster.toml: shard 's2'");
    ASSERT_FALSE(page.ok()) << text;
    EXPECT_EQ(page.status().code(), StatusCode::mismatch);
    EXPECT_EQ(page.message(),
              "cluster.toml: shard 's2': not a status page (not a JSON object; is this a blockps status LU?)");
  }
}

}  // namespace
}  // namespace blockps::cli
