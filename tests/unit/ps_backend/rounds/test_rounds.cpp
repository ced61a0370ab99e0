// The coordinator: reset, the status page's rounds object, pushes it does not claim. What each mode decides is
// in test_bsp_mode.cpp and test_ssp_mode.cpp; membership and parking in their own files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

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
  EXPECT_EQ(f.status()["rounds_max"], 0);
  ASSERT_EQ(f.push(kB, g), Admission::run);
  EXPECT_EQ(weights(f.model), before) << "A's dropped push must not count in B's round";
}

// workers=2 and 2 live: a third worker's push is refused (not ready) with the count and the members in words, until a
// member's session is gone (the probe tgt answers), when it takes that place at once.
TEST(Rounds, AWorkerBeyondWorkersIsRefusedUntilAMembersSessionIsGone) {
  Fixture f(sync_policy(2, 2));
  const auto g = gradient(kShardBytes, 1);
  ASSERT_EQ(f.push(kA, g), Admission::run);
  ASSERT_EQ(f.push(kB, g), Admission::run);
  EXPECT_EQ(f.rounds.admit_push(&g, kC, 0, g.size()), Admission::not_ready);
  const std::string why = f.rounds.refusal_reason(kC);
  EXPECT_NE(why.find("membership full: workers=2 and 2 workers are live (iqn.w:a (session 11), iqn.w:b (session 12))"),
            std::string::npos)
      << why;
  EXPECT_NE(why.find("iqn.w:c (session 13) would be one more"), std::string::npos) << why;
  EXPECT_EQ(f.rounds.refusal_reason(kA), "") << "a member is not refused";
  const auto all_alive = [](int, std::uint64_t) { return true; };
  EXPECT_EQ(f.rounds.admit_push(&g, kC, 0, g.size(), all_alive), Admission::not_ready);
  EXPECT_EQ(f.rounds.live_workers(), 2u);
  // A's process died (a torchrun restart): its session is gone, and C takes its place.
  EXPECT_EQ(f.rounds.admit_push(&g, kC, 0, g.size(), [](int, std::uint64_t itn) { return itn != kA.itn; }),
            Admission::run);
  ASSERT_TRUE(f.rounds.land_push(&g, g).ok());
  EXPECT_EQ(f.rounds.live_workers(), 2u);
}

// A takeover by another job: unlike reset-rounds, the old job's workers leave the membership (the next workers
// form anew, waiting for all `workers`), and its parked commands fail as reservation conflicts.
TEST(Rounds, RestartDropsTheMembersTheOpenRoundsAndTheParkedCommands) {
  Fixture f(sync_policy(2, 2));
  const auto g = gradient(kShardBytes, 1);
  EXPECT_TRUE(f.rounds.idle());
  ASSERT_EQ(f.push(kA, g), Admission::run);
  ASSERT_EQ(f.push(kB, g), Admission::run);  // formed; round 1 applied
  ASSERT_EQ(f.push(kA, g), Admission::run);  // round 2 open
  int owner = 0, pull = 0;
  f.rounds.park(&owner, &pull, false, kA, 0, kShardBytes);
  EXPECT_FALSE(f.rounds.idle());
  const auto before = weights(f.model);
  f.rounds.restart("job b took the shard over");
  EXPECT_EQ(f.rounds.live_workers(), 0u);
  EXPECT_TRUE(f.status()["live_workers"].empty());
  EXPECT_EQ(f.status()["workers_dropped"], 2);
  EXPECT_EQ(f.status()["open_rounds"], 0);
  EXPECT_FALSE(f.status()["degraded"].get<bool>()) << "no longer formed: too few workers is not degraded";
  std::vector<std::pair<Refusal, std::string>> failed;
  f.rounds.process_parked(
      &owner, [](int, std::uint64_t) { return true; }, [](const void*) { return false; },
      [](const ParkedCommand&) { ADD_FAILURE() << "resubmitted"; },
      [&](const ParkedCommand&, Refusal as, const std::string& why) { failed.emplace_back(as, why); });
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_EQ(failed[0], std::make_pair(Refusal::reservation_conflict, std::string("job b took the shard over")));
  EXPECT_TRUE(f.rounds.idle());
  // The new job's first worker alone does not close a round: it waits for `workers` again.
  const WorkerRef c{1, 21, "iqn.w:c"};
  ASSERT_EQ(f.push(c, g), Admission::run);
  EXPECT_EQ(weights(f.model), before) << "A's open round was dropped, and C's waits for a second worker";
  EXPECT_EQ(f.rounds.admit_pull(c.itn, 0, kShardBytes), Admission::park);
}

TEST(Rounds, APushTheDataPathRefusesRunsUnclaimed) {
  Fixture f(sync_policy(2, 2));
  const auto g = gradient(kShardBytes, 1);
  EXPECT_EQ(f.rounds.admit_push(&g, kA, 4, 512), Admission::run) << "not sector-aligned";
  EXPECT_EQ(f.rounds.admit_push(&g, kA, kShardBytes, 512), Admission::run) << "beyond the shard";
  EXPECT_FALSE(f.rounds.land_push(&g, g).ok()) << "nothing was admitted for it";
  EXPECT_TRUE(f.status()["live_workers"].empty()) << "and nobody joined";
}

TEST(Rounds, TheStatusPageHasEveryFieldForEitherMode) {
  for (const RoundPolicy& p : {sync_policy(2, 1, 1500), ssp_policy(3, 2)}) {
    Fixture f(p);
    ASSERT_EQ(f.push(kA, gradient(kShardBytes, 1)), Admission::run);
    const auto s = f.status();
    for (const char* key :
         {"mode", "workers", "max_workers", "min_workers", "straggler_ms", "worker_timeout_ms", "rounds_min", "rounds_max",
          "rounds_closed", "open_rounds", "live_workers", "stragglers_dropped", "workers_dropped", "recent_drops",
          "parked_commands", "degraded", "degraded_reason", "apply_failures", "round_latency"})
      EXPECT_TRUE(s.contains(key)) << s["mode"] << " lacks " << key;
    EXPECT_EQ(s.size(), 19u) << s.dump();
    EXPECT_EQ(s["workers"], 2);
    EXPECT_EQ(s["max_workers"], 2) << "max_workers=0 reads as workers=";
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
  // workers=1: A's restarted process (a new session) takes its place once A's session is gone.
  ASSERT_EQ(
      f.rounds.admit_push(&block, a2, kBlockBytes, block.size(), [](int, std::uint64_t itn) { return itn != kA.itn; }),
      Admission::run);
  ASSERT_TRUE(f.rounds.land_push(&block, block).ok());
  ASSERT_EQ(f.rounds.live_workers(), 1u);
  const auto s = f.status();
  EXPECT_EQ(s["rounds_max"], 2);
  EXPECT_EQ(s["rounds_min"], 0);
  for (const auto& w : s["live_workers"]) EXPECT_EQ(w["rounds_behind"], 2) << w.dump();
}

}  // namespace
}  // namespace blockps::unit

namespace blockps::unit {
namespace {

// Errors flow to the commands owed them: a round whose update fails is never answered GOOD over old weights.
// The store fails while a file exists (tests/support/faulty_store.h); reset() serves commands again.
TEST(Rounds, ARoundWhoseUpdateFailsFailsEveryGradCommandUntilReset) {
  const std::string trigger = ::testing::TempDir() + "rounds-fault-" + std::to_string(::getpid());
  std::remove(trigger.c_str());
  Fixture f(sync_policy(2, 1), 1.0f, trigger);
  const auto g = gradient(kBlockBytes, 1);
  ASSERT_EQ(f.push(kA, g), Admission::run);
  ASSERT_EQ(f.push(kB, g), Admission::run);  // round 1 of block 0 applied
  const std::vector<float> after_round_1 = weights(f.model);

  std::ofstream(trigger) << "fail\n";
  ASSERT_EQ(f.push(kA, g), Admission::run);
  const std::vector<std::byte> last = gradient(kBlockBytes, 2);
  ASSERT_EQ(f.rounds.admit_push(&last, kB, 0, last.size()), Admission::run);
  const Status closed = f.rounds.land_push(&last, last);
  ASSERT_FALSE(closed.ok()) << "the push that closed the failing round is owed the error";
  EXPECT_NE(closed.message().find("sync: round 2 of block 0 not applied: injected fault"), std::string::npos)
      << closed.message();
  EXPECT_EQ(weights(f.model), after_round_1) << "the failing store changed nothing";

  EXPECT_EQ(f.rounds.admit_pull(kA.itn, 0, kBlockBytes), Admission::failed);
  EXPECT_EQ(f.rounds.admit_pull(kB.itn, kBlockBytes, kBlockBytes), Admission::failed) << "another block too";
  EXPECT_EQ(f.rounds.admit_push(&g, kA, kBlockBytes, kBlockBytes), Admission::failed);
  const auto s = f.status();
  EXPECT_TRUE(s["degraded"].get<bool>());
  EXPECT_EQ(s["apply_failures"], 1);
  EXPECT_NE(s["degraded_reason"].get<std::string>().find("round 2 of block 0 not applied"), std::string::npos);
  EXPECT_NE(f.rounds.degraded_reason().find("until the control line reset-rounds"), std::string::npos);

  std::remove(trigger.c_str());
  f.rounds.reset();
  EXPECT_EQ(f.rounds.admit_pull(kA.itn, 0, kBlockBytes), Admission::run);
  EXPECT_FALSE(f.status()["degraded"].get<bool>());
  ASSERT_EQ(f.push(kA, g), Admission::run);
  ASSERT_EQ(f.push(kB, g), Admission::run);
  EXPECT_NE(weights(f.model), after_round_1) << "after the reset, rounds are applied again";
}

}  // namespace
}  // namespace blockps::unit
