// The coordinator: reset, the status page's rounds object, pushes it does not claim. What each mode decides is
// in test_bsp_mode.cpp and test_ssp_mode.cpp; membership and parking in their own files.
#include <gtest/gtest.h>

#include "ps_backend/rounds/rounds.h"
#include "tests/unit/ps_backend/rounds/rounds_fixture.h"

namespace blockps::unit {
namespace {

TEST(Rounds, ResetDropsOpenRoundsAndRestartsTheCounters) {
  Fixture f(sync_policy(2, 2));
  const auto g = gradient(kShardBytes, 1);
  ASSERT_EQ(f.push(kA, g), Admission::run);
  ASSERT_EQ(f.push(kB, g), Admission::run);
  ASSERT_EQ(f.push(kA, g), Admission::run);
  const auto before = weights(f.model);
  f.rounds.reset();
  EXPECT_EQ(f.rounds.admit_pull(kA.itn, 0, kShardBytes), Admission::run);
  EXPECT_EQ(f.rounds.status()["rounds_max"], 0);
  ASSERT_EQ(f.push(kB, g), Admission::run);
  EXPECT_EQ(weights(f.model), before) << "A's dropped push must not count in B's round";
}

TEST(Rounds, APushTheDataPathRefusesRunsUnclaimed) {
  Fixture f(sync_policy(2, 2));
  const auto g = gradient(kShardBytes, 1);
  EXPECT_EQ(f.rounds.admit_push(&g, kA, 4, 512), Admission::run) << "not sector-aligned";
  EXPECT_EQ(f.rounds.admit_push(&g, kA, kShardBytes, 512), Admission::run) << "beyond the shard";
  EXPECT_FALSE(f.rounds.land_push(&g, g)) << "nothing was admitted for it";
  EXPECT_TRUE(f.rounds.status()["live_workers"].empty()) << "and nobody joined";
}

TEST(Rounds, TheStatusPageHasEveryFieldForEitherMode) {
  for (const RoundPolicy& p : {sync_policy(2, 1, 1500), ssp_policy(3, 2)}) {
    Fixture f(p);
    ASSERT_EQ(f.push(kA, gradient(kShardBytes, 1)), Admission::run);
    const auto s = f.rounds.status();
    for (const char* key :
         {"mode", "workers", "min_workers", "straggler_ms", "worker_timeout_ms", "rounds_min", "rounds_max",
          "rounds_closed", "open_rounds", "live_workers", "stragglers_dropped", "workers_dropped", "recent_drops",
          "parked_commands", "degraded", "degraded_reason", "round_latency"})
      EXPECT_TRUE(s.contains(key)) << s["mode"] << " lacks " << key;
    EXPECT_EQ(s.size(), 17u) << s.dump();
    EXPECT_EQ(s["workers"], 2);
    ASSERT_EQ(s["live_workers"].size(), 1u);
    const auto& a = s["live_workers"][0];
    EXPECT_EQ(a["iqn"], kA.iqn);
    EXPECT_EQ(a["session"], kA.itn);
    EXPECT_EQ(a["pushes"], 1);
    EXPECT_EQ(a["rounds_behind"], 0);
  }
}

TEST(Rounds, AWorkerBehindTheFurthestBlockSaysByHowMuch) {
  Fixture f(sync_policy(1, 1));
  const auto block = gradient(kBlockBytes, 1);
  const WorkerRef a2{1, 31, "iqn.w:a2"};
  ASSERT_EQ(f.push(kA, block), Admission::run);  // block 0, round 1 (one expected worker)
  ASSERT_EQ(f.push(kA, block), Admission::run);  // round 2
  ASSERT_EQ(f.push(a2, block, kBlockBytes), Admission::run);
  const auto s = f.rounds.status();
  EXPECT_EQ(s["rounds_max"], 2);
  EXPECT_EQ(s["rounds_min"], 0);
  for (const auto& w : s["live_workers"]) EXPECT_EQ(w["rounds_behind"], 2) << w.dump();
}

}  // namespace
}  // namespace blockps::unit
