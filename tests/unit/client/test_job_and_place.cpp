// What a shard's status page says about its job and place, checked against what a worker asks (client/job_and_place.h):
// the kind, the place and its refusals in words, the control lines a worker writes, the status LUN a session reaches,
// and the sentences a refused command becomes. No shard: pages written here as the module writes them.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>

#include "client/job_and_place.h"
#include "contract/status_page.h"

namespace blockps {
namespace {

using json = nlohmann::json;

// A page with the job and place fields (contract/status_page.h), an unclaimed shard without a place.
json page(const std::string& opt = "sum") {
  json p;
  p["shard"] = {{"opt", opt}, {"size", 1024}};
  p["job"] = {{"holder", ""}, {"sessions", 0}, {"last_active_ms_ago", -1}, {"claim_idle_s", 600}, {"lapsed", false},
              {"refused", 0}, {"takeovers", 0}};
  p["place"] = {{"model", ""}, {"index", 0}, {"count", 0}, {"layout", ""}, {"text", ""}};
  p["refusals"] = {{"recent", json::array()}};
  return p;
}

void hold(json& p, const std::string& job, int sessions, double active_ms_ago) {
  p["job"]["holder"] = job;
  p["job"]["sessions"] = sessions;
  p["job"]["last_active_ms_ago"] = active_ms_ago;
}

void place(json& p, const std::string& text) { p["place"]["text"] = text; }

AskingWorker worker(const std::string& job) {
  return AskingWorker{.shard = "shard 'shard0'",
                      .initiator = "iqn.2026-11.io.blockps:worker-h-1",
                      .job = job,
                      .cluster_file = "c.toml",
                      .since_unix_ms = 1000};
}

TEST(JobAndPlace, ReadsTheJobAndThePlace) {
  json p = page("adam");
  hold(p, "A", 2, 300);
  place(p, "m-3f9a2c01d4e5b677 1/2 stripe");
  p["job"]["refused"] = 5;
  auto c = read_shard_claim(p);
  ASSERT_TRUE(c.ok()) << c.message();
  EXPECT_EQ(c->opt, "adam");
  EXPECT_EQ(c->holder, "A");
  EXPECT_EQ(c->sessions, 2u);
  ASSERT_TRUE(c->last_active_s_ago.has_value());
  EXPECT_DOUBLE_EQ(*c->last_active_s_ago, 0.3);
  EXPECT_EQ(c->refused, 5u);
  EXPECT_EQ(c->place, (Place{"m-3f9a2c01d4e5b677", 1, 2, PlaceLayout::stripe}));
  EXPECT_TRUE(c->held_against("B"));
  EXPECT_TRUE(c->held_against("")) << "a worker of no job may not write to a held shard";
  EXPECT_FALSE(c->held_against("A"));
  p["job"]["lapsed"] = true;
  EXPECT_FALSE(read_shard_claim(p)->held_against("B")) << "a lapsed claim is taken by the next job=";
}

TEST(JobAndPlace, AnUnclaimedShardWithoutAPlace) {
  auto c = read_shard_claim(page());
  ASSERT_TRUE(c.ok()) << c.message();
  EXPECT_EQ(c->holder, "");
  EXPECT_FALSE(c->last_active_s_ago.has_value()) << "-1 means unclaimed";
  EXPECT_TRUE(c->place.model.empty());
  EXPECT_FALSE(c->held_against("B"));
}

TEST(JobAndPlace, APageWithoutJobOrPlaceIsAnOlderModule) {
  json p = page();
  p.erase("job");
  auto c = read_shard_claim(p);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::mismatch);
  EXPECT_NE(c.message().find("older than jobs and places"), std::string::npos) << c.message();
  json q = page();
  place(q, "m-1 2/2 stripe");  // index >= count
  EXPECT_FALSE(read_shard_claim(q).ok());
}

TEST(JobAndPlace, TheKindOfShard) {
  EXPECT_EQ(kind_refusal(ShardKind::any, "average"), "");
  EXPECT_EQ(kind_refusal(ShardKind::averaging, "average"), "");
  EXPECT_EQ(kind_refusal(ShardKind::optimizer, "adam"), "");
  EXPECT_EQ(kind_refusal(ShardKind::averaging, "adam"),
            "runs opt=adam: it steps its optimizer on every push and a pull returns weights, but this worker expects "
            "an averaging shard (opt=average), whose READ after a push returns the round's average gradient; point "
            "the cluster file at averaging shards, or train through these shards' optimizer "
            "(blockps.torch.DistributedOptimizer)");
  EXPECT_EQ(kind_refusal(ShardKind::optimizer, "average").rfind("runs opt=average: it only averages", 0), 0u);
}

TEST(JobAndPlace, TheModelIsTheFilesNameElseTheShardsElseANewOne) {
  const Place none{};
  const Place a{"m-a", 0, 2, PlaceLayout::stripe}, b{"m-b", 1, 2, PlaceLayout::stripe};
  EXPECT_EQ(choose_model("named", {a, b}).model, "named");
  EXPECT_FALSE(choose_model("named", {a, b}).generated);
  EXPECT_EQ(choose_model("", {none, b}).model, "m-b");
  EXPECT_EQ(choose_model("", {a, b}).model, "m-a") << "a tie: file order";
  EXPECT_EQ(choose_model("", {b, a, Place{"m-a", 2, 3, PlaceLayout::stripe}}).model, "m-a") << "the most shards";
  const ModelChoice fresh = choose_model("", {none, none});
  EXPECT_TRUE(fresh.generated);
  ASSERT_EQ(fresh.model.size(), 18u) << fresh.model;
  EXPECT_EQ(fresh.model.rfind("m-", 0), 0u);
  EXPECT_TRUE(control::is_name(fresh.model));
  std::set<std::string> ids;
  for (int i = 0; i < 100; ++i) ids.insert(new_model_id());
  EXPECT_EQ(ids.size(), 100u) << "identities are drawn at random";
}

TEST(JobAndPlace, APlaceIsRefusedInWordsThatSayWhyAndTheFix) {
  const Place held{"m-3f9a2c01d4e5b677", 0, 2, PlaceLayout::stripe};
  EXPECT_EQ(place_refusal(Place{}, held, false), "") << "a shard without a place takes it";
  EXPECT_EQ(place_refusal(held, held, false), "");
  EXPECT_EQ(place_refusal(held, Place{held.model, 1, 2, PlaceLayout::stripe}, false),
            "holds model m-3f9a2c01d4e5b677 as shard 0 of 2 (stripe); this cluster file places it as shard 1 of 2 "
            "(stripe): the file lists the shards in another order than the one that initialised them; restore the "
            "order, or re-initialise with `blockps init --relayout`");
  EXPECT_EQ(place_refusal(held, Place{held.model, 0, 3, PlaceLayout::stripe}, false),
            "holds model m-3f9a2c01d4e5b677 as shard 0 of 2 (stripe); this cluster file places it as shard 0 of 3 "
            "(stripe): the file lists 3 shards, the model was initialised over 2; list the shards that initialised "
            "it, or re-initialise with `blockps init --relayout`");
  EXPECT_EQ(place_refusal(held, Place{held.model, 0, 2, PlaceLayout::range}, false),
            "holds model m-3f9a2c01d4e5b677 as shard 0 of 2 (stripe); this cluster file places it as shard 0 of 2 "
            "(range): the file's [layout] kind is \"range\", the model was initialised with \"stripe\"; set [layout] "
            "kind = \"stripe\", or re-initialise with `blockps init --relayout`");
  EXPECT_EQ(place_refusal(held, Place{"resnet", 0, 2, PlaceLayout::stripe}, true),
            "holds model m-3f9a2c01d4e5b677 as shard 0 of 2 (stripe); this cluster file places it as model resnet as "
            "shard 0 of 2 (stripe): the file's [model] name is 'resnet', and this shard holds another model; point "
            "the file at the shards of model resnet, or re-initialise with `blockps init --relayout`");
  EXPECT_NE(place_refusal(held, Place{"m-other", 0, 2, PlaceLayout::stripe}, false)
                .find("the other shards of this file hold model m-other, this shard another one"),
            std::string::npos);
}

TEST(JobAndPlace, TheControlLinesAWorkerWrites) {
  const Place none{}, p0{"m-1", 0, 2, PlaceLayout::stripe}, other{"m-1", 1, 2, PlaceLayout::stripe};
  EXPECT_EQ(open_control_lines("A", false, p0, p0, false), "job=A\n") << "a placed shard: the job only";
  EXPECT_EQ(open_control_lines("A", true, p0, p0, false), "job=A\ntakeover\n");
  EXPECT_EQ(open_control_lines("A", false, none, p0, false), "job=A\nplace=m-1 0/2 stripe\n") << "job first";
  EXPECT_EQ(open_control_lines("", false, none, p0, false), "place=m-1 0/2 stripe\n") << "no job: the place only";
  EXPECT_EQ(open_control_lines("", false, p0, p0, false), "") << "nothing to write";
  EXPECT_EQ(open_control_lines("A", false, other, p0, true), "job=A\nplace=m-1 0/2 stripe\nreplace-place\n");
  EXPECT_EQ(open_control_lines("A", false, none, p0, true), "job=A\nplace=m-1 0/2 stripe\n");
  EXPECT_EQ(join_line("torchrun:x"), "job=torchrun:x\n");
}

TEST(JobAndPlace, ASessionReachesTheStatusLuOfItsOwnTarget) {
  const LuAddress grad{LuAddress::Kind::iscsi_url, "iscsi://10.0.0.1:3260/iqn.2026-11.io.blockps:s0/1"};
  const LuAddress status{LuAddress::Kind::iscsi_url, "iscsi://10.0.0.1:3260/iqn.2026-11.io.blockps:s0/3"};
  EXPECT_EQ(status_lun_on_target_of(grad, status), 3);
  EXPECT_EQ(status_lun_on_target_of(status, status), 3);
  EXPECT_EQ(
      status_lun_on_target_of(grad, {LuAddress::Kind::iscsi_url, "iscsi://10.0.0.1:3260/iqn.2026-11.io.blockps:s1/3"}),
      std::nullopt)
      << "another target";
  EXPECT_EQ(
      status_lun_on_target_of(grad, {LuAddress::Kind::iscsi_url, "iscsi://10.0.0.2:3260/iqn.2026-11.io.blockps:s0/3"}),
      std::nullopt)
      << "another portal";
  EXPECT_EQ(status_lun_on_target_of(grad, {LuAddress::Kind::device_path, "/dev/sdc"}), std::nullopt);
  EXPECT_EQ(
      status_lun_on_target_of(grad, {LuAddress::Kind::iser_url, "iser://10.0.0.1:3260/iqn.2026-11.io.blockps:s0/3"}),
      std::nullopt);
}

TEST(JobAndPlace, AShardHeldByAnotherJobIsOneSentence) {
  json p = page();
  hold(p, "A", 2, 300);
  EXPECT_EQ(explain_answer(p, ShardAnswer::reservation_conflict, worker("B")),
            "shard 'shard0' is held by job 'A' (2 sessions, active 0.3 s ago); this job is 'B'. A shard serves one "
            "job at a time: stop job A, or take the shards over (`blockps release --cluster c.toml`, or "
            "takeover=True / --takeover)");
  EXPECT_EQ(explain_answer(p, ShardAnswer::reservation_conflict, worker("")),
            "shard 'shard0' is held by job 'A' (2 sessions, active 0.3 s ago); this worker names no job ([client] "
            "job, BLOCKPS_JOB, job=, --job). A shard serves one job at a time: stop job A, or take the shards over "
            "(`blockps release --cluster c.toml`, or takeover=True / --takeover)");
  EXPECT_NE(explain_answer(p, ShardAnswer::reservation_conflict, worker("A"))
                .find("is held by this job ('A', 2 sessions), but does not count this session among them"),
            std::string::npos);
  hold(p, "", 0, -1);
  EXPECT_NE(explain_answer(p, ShardAnswer::reservation_conflict, worker("B")).find("holds no claim now"),
            std::string::npos);
  // A refused job= names the holder too, whatever the refusal log says.
  hold(p, "A", 1, 1500);
  EXPECT_EQ(explain_answer(p, ShardAnswer::job_refused, worker("B"))
                .rfind("shard 'shard0' is held by job 'A' (1 session, active 1.5 s ago); this job is 'B'.", 0),
            0u);
}

TEST(JobAndPlace, OtherRefusalsAreTheShardsOwnWordsForThisInitiator) {
  json p = page();
  p["refusals"]["recent"] = json::array({{{"iqn", "iqn.2026-11.io.blockps:worker-h-1"},
                                          {"session", 3},
                                          {"lu", "grad"},
                                          {"reason", "old news"},
                                          {"unix_ms", 500}},
                                         {{"iqn", "iqn.2026-11.io.blockps:worker-h-1"},
                                          {"session", 3},
                                          {"lu", "grad"},
                                          {"reason", "membership full: 3 workers of workers=2"},
                                          {"unix_ms", 2000}},
                                         {{"iqn", "iqn.2026-11.io.blockps:someone-else"},
                                          {"session", 4},
                                          {"lu", "grad"},
                                          {"reason", "not mine"},
                                          {"unix_ms", 3000}}});
  EXPECT_EQ(explain_answer(p, ShardAnswer::not_ready, worker("B")),
            "shard 'shard0': membership full: 3 workers of workers=2");
  AskingWorker later = worker("B");
  later.since_unix_ms = 2500;  // the entry is older than the command: another command's
  EXPECT_EQ(explain_answer(p, ShardAnswer::not_ready, later), "");
  // Without an entry: what the page counts.
  p["rounds"] = {
      {"workers", 2}, {"min_workers", 2}, {"live_workers", json::array({json::object()})}, {"degraded_reason", ""}};
  EXPECT_EQ(explain_answer(p, ShardAnswer::not_ready, later),
            "shard 'shard0' counts 1 live workers of workers=2 (min_workers=2): each worker of a job is one session "
            "per shard, and the job must run workers= of them");
  p["rounds"]["degraded_reason"] = "the update of round 7 of block 3 failed";
  EXPECT_EQ(explain_answer(p, ShardAnswer::hardware_error, later),
            "shard 'shard0' is degraded: the update of round 7 of block 3 failed");
  hold(p, "A", 1, 10);
  EXPECT_EQ(explain_answer(p, ShardAnswer::control_refused, later),
            "shard 'shard0' is held by job 'A': only that job's sessions may write control lines other than "
            "checkpoint and release");
}

}  // namespace
}  // namespace blockps
