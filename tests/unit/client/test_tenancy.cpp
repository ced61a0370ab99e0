// The tenancy's pure decisions (client/tenancy.h): which job a worker belongs to, from which source, and which
// names are refused before anything is sent; and that read_claims refuses a shard of the wrong kind, naming it. The
// claim itself (control lines on a real shard) is tested against tgtd: tests/integration/jobs/test_job_claim.cpp and
// test_torch_jobs.cpp.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "client/tenancy.h"

namespace blockps {
namespace {

// choose_job of the sources given, in its order (asked, [client] job, $BLOCKPS_JOB, the caller's default, why none).
Result<std::string> choose(std::optional<std::string> asked, std::string file = "", const char* environment = nullptr,
                           std::optional<std::string> fallback = std::nullopt, std::string no_fallback_because = "") {
  JobSources sources;
  sources.asked = std::move(asked);
  sources.file = std::move(file);
  sources.environment = environment;
  sources.fallback = std::move(fallback);
  sources.no_fallback_because = std::move(no_fallback_because);
  return choose_job(sources);
}
constexpr std::nullopt_t kNotAsked = std::nullopt;

TEST(ChooseJob, TheCallersNameComesFirstAndEmptyMeansNoJob) {
  EXPECT_EQ(*choose("mine", "files", "envs", "torchrun:a"), "mine");
  EXPECT_EQ(*choose("", "files", "envs", "torchrun:a"), "");
}

TEST(ChooseJob, ThenTheFileThenTheEnvironmentThenTheCallersDefault) {
  EXPECT_EQ(*choose(kNotAsked, "files", "envs", "torchrun:a"), "files");
  EXPECT_EQ(*choose(kNotAsked, "", "envs", "torchrun:a"), "envs");
  EXPECT_EQ(*choose(kNotAsked, "", "", "torchrun:a"), "torchrun:a");
  EXPECT_EQ(*choose(kNotAsked), "");
}

TEST(ChooseJob, NoNameWhereTheCallerNeedsOneIsRefusedWithItsReason) {
  const Result<std::string> none = choose(kNotAsked, "", nullptr, std::nullopt, "give torchrun --rdzv_id NAME");
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::invalid_argument);
  EXPECT_NE(none.message().find("give torchrun --rdzv_id NAME (or set BLOCKPS_JOB"), std::string::npos)
      << none.message();
  // A reason is no refusal where a source names the job.
  EXPECT_EQ(*choose(kNotAsked, "", "envs", std::nullopt, "needs one"), "envs");
}

TEST(ChooseJob, ANameThatIsNotOneIsRefusedNamingItsSource) {
  const Result<std::string> asked = choose("two words");
  ASSERT_FALSE(asked.ok());
  EXPECT_EQ(asked.status().code(), StatusCode::invalid_argument);
  EXPECT_EQ(asked.message().rfind("job = \"two words\": must be", 0), 0u) << asked.message();
  const Result<std::string> env = choose(kNotAsked, "", "a;b");
  ASSERT_FALSE(env.ok());
  EXPECT_EQ(env.status().code(), StatusCode::config);
  EXPECT_EQ(env.message().rfind("BLOCKPS_JOB = \"a;b\"", 0), 0u) << env.message();
  const Result<std::string> file = choose(kNotAsked, std::string(200, 'x'));
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.message().rfind("[client] job = ", 0), 0u) << file.message();
}

ClusterConfig two_shards() {
  ClusterConfig config;
  config.source = "c.toml";
  for (const char* name : {"s0", "s1"}) {
    ShardSpec spec;
    spec.name = name;
    spec.status.text = std::string("iscsi://h/iqn.x:") + name + "/3";
    config.shards.push_back(spec);
  }
  return config;
}

nlohmann::json page_of(const std::string& opt) {
  nlohmann::json p;
  p["shard"] = {{"opt", opt}, {"size", 1024}};
  p["job"] = {{"holder", ""}, {"sessions", 0}, {"last_active_ms_ago", -1}, {"claim_idle_s", 600}, {"lapsed", false},
              {"refused", 0}, {"takeovers", 0}};
  p["place"] = {{"model", ""}, {"index", 0}, {"count", 0}, {"layout", ""}, {"text", ""}};
  return p;
}

TEST(ReadClaims, AShardOfAnotherKindIsRefusedByName) {
  const ClusterConfig config = two_shards();
  const std::vector<nlohmann::json> pages{page_of("average"), page_of("adam")};
  EXPECT_TRUE(read_claims(config, pages, ShardKind::any).ok());
  const auto refused = read_claims(config, pages, ShardKind::averaging);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::mismatch);
  EXPECT_EQ(refused.message().rfind("c.toml: shard 's1' (iscsi://h/iqn.x:s1/3) runs opt=adam", 0), 0u)
      << refused.message();
  const auto claims = read_claims(config, {page_of("sgd"), page_of("adam")}, ShardKind::optimizer);
  ASSERT_TRUE(claims.ok()) << claims.message();
  EXPECT_EQ(claims->at(1).opt, "adam");
}

TEST(ReadClaims, APageWithoutJobFieldsIsAnOlderModuleNamedByShard) {
  nlohmann::json old = page_of("sgd");
  old.erase("job");
  old.erase("place");
  const auto refused = read_claims(two_shards(), {page_of("sgd"), old}, ShardKind::any);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.message().rfind("c.toml: shard 's1' ", 0), 0u) << refused.message();
}

}  // namespace
}  // namespace blockps
