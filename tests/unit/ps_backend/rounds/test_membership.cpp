// The workers of a shard with rounds: joining, timeouts, drops and the drop log, and min_workers (degraded),
// alone and through the coordinator.
#include <gtest/gtest.h>

#include <thread>

#include "ps_backend/rounds/membership.h"
#include "tests/unit/ps_backend/rounds/rounds_fixture.h"

namespace blockps::unit {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

TEST(Membership, BelowMinWorkersCommandsThatWouldWaitAreRefusedUntilAWorkerReturns) {
  Fixture f(sync_policy(2, 2));
  const auto g = gradient(kShardBytes, 1);
  ASSERT_EQ(f.push(kA, g), Admission::run);
  ASSERT_EQ(f.push(kB, g), Admission::run);  // round 1 closes: the cluster formed
  // B's session goes away: the glue's alive() says so when woken.
  int resubmitted = 0, failed = 0;
  f.rounds.process_parked(
      nullptr, [&](int, std::uint64_t itn) { return itn != kB.itn; }, [](const void*) { return false; },
      [&](const ParkedCommand&) { ++resubmitted; },
      [&](const ParkedCommand&, Refusal, const std::string&) { ++failed; });
  EXPECT_EQ(f.status()["workers_dropped"], 1);
  ASSERT_EQ(f.push(kA, g), Admission::run) << "pushes are still taken";
  EXPECT_EQ(f.rounds.admit_pull(kA.itn, 0, kShardBytes), Admission::not_ready);
  EXPECT_NE(f.rounds.degraded_reason().find("live workers 1 < min_workers=2"), std::string::npos)
      << f.rounds.degraded_reason();
  EXPECT_TRUE(f.status()["degraded"].get<bool>());
  // A worker comes back (a new session) and pushes: the round closes with both.
  const WorkerRef b2{1, 21, "iqn.w:b"};
  ASSERT_EQ(f.push(b2, g), Admission::run);
  EXPECT_EQ(f.rounds.admit_pull(kA.itn, 0, kShardBytes), Admission::run);
  EXPECT_TRUE(f.rounds.degraded_reason().empty());
  EXPECT_EQ(f.status()["rounds_min"], 2);
}

TEST(Membership, AWorkerSilentForWorkerTimeoutMsIsDroppedByTheKeeper) {
  RoundPolicy p = sync_policy(2, 1);
  p.worker_timeout_ms = 100;
  Fixture f(p);
  ASSERT_EQ(f.push(kA, gradient(kBlockBytes, 1)), Admission::run);
  const auto t0 = Clock::now();
  while (f.status()["workers_dropped"] != 1) {
    ASSERT_LT(Clock::now() - t0, 5s) << "the keeper never dropped the silent worker";
    std::this_thread::sleep_for(5ms);
  }
  const auto s = f.status();
  EXPECT_TRUE(s["live_workers"].empty());
  EXPECT_EQ(s["recent_drops"][0], "iqn.w:a (session 11): no push for worker_timeout_ms=100");
}

TEST(Membership, TheFirstPushJoinsAndTheClusterFormsWithTheExpectedWorkers) {
  Membership m(sync_policy(2, 1));
  const auto t0 = Clock::now();
  m.admitted_push(kA, t0);
  EXPECT_TRUE(m.contains(kA.itn));
  EXPECT_FALSE(m.formed());
  EXPECT_EQ(m.quorum(), 2u) << "until formed, a round waits for every expected worker";
  m.admitted_push(kA, t0 + 1s);
  EXPECT_EQ(m.size(), 1u);
  EXPECT_EQ(m.members().at(kA.itn).joined, t0);
  EXPECT_EQ(m.members().at(kA.itn).last_push, t0 + 1s);
  m.admitted_push(kB, t0);
  EXPECT_TRUE(m.formed());
  EXPECT_EQ(m.quorum(), 1u) << "formed: min_workers";
  m.landed_push(kB.itn, t0);
  m.landed_push(kC.itn, t0);  // no member: nothing happens
  EXPECT_EQ(m.members().at(kB.itn).pushes, 1u);
  EXPECT_FALSE(m.contains(kC.itn));
}

TEST(Membership, OnceEveryMemberIsDroppedTheNextWorkersFormAnew) {
  Membership m(sync_policy(2, 1));
  m.admitted_push(kA, Clock::now());
  m.admitted_push(kB, Clock::now());
  ASSERT_TRUE(m.formed());
  ASSERT_TRUE(m.drop(kA.itn, "its session is gone"));
  EXPECT_TRUE(m.formed()) << "one worker left of two: still the same job";
  EXPECT_EQ(m.quorum(), 1u);
  ASSERT_TRUE(m.drop(kB.itn, "its session is gone"));
  EXPECT_FALSE(m.formed()) << "every worker is gone: the next ones are a new formation";
  EXPECT_FALSE(m.degraded());
  m.admitted_push(kC, Clock::now());
  EXPECT_EQ(m.quorum(), 2u) << "a new first worker must not close rounds alone";
}

// Elastic membership (issue 51): with max_workers above workers, a host joins the running job; the rounds open when
// it joined close without it (the average divides by the contributions they got), the rounds opened after wait for
// it, and a worker beyond max_workers is refused naming the bound.
TEST(Membership, AHostJoiningAFormedShardIsInTheRoundsItEntersAndTheOpenOnesDoNotWaitForIt) {
  RoundPolicy p = sync_policy(2, 1);
  p.max_workers = 3;
  Fixture f(p);
  const auto whole = gradient(kShardBytes, 1);
  ASSERT_EQ(f.push(kA, whole), Admission::run);
  ASSERT_EQ(f.push(kB, whole), Admission::run);  // round 0 of every block closes: formed with A and B
  ASSERT_EQ(f.model.block_step(0), 1u);
  const auto a = gradient(kBlockBytes, 2), b = gradient(kBlockBytes, 3), c = gradient(kBlockBytes, 4);
  ASSERT_EQ(f.push(kA, a, 0), Admission::run);  // opens block 0's round 1
  ASSERT_EQ(f.push(kC, c, kBlockBytes), Admission::run) << "below max_workers: C joins (opening block 1's round)";
  EXPECT_EQ(f.rounds.live_workers(), 3u);
  const auto before = weights(f.model);
  ASSERT_EQ(f.push(kB, b, 0), Admission::run);
  EXPECT_EQ(f.model.block_step(0), 2u) << "block 0's round opened before C joined: it does not wait for C";
  const auto after = weights(f.model);
  for (std::size_t i = 0; i < kBlockBytes / 4; i += 37)  // sgd lr 1: minus the average of A's and B's
    EXPECT_FLOAT_EQ(after[i], before[i] - (f32_at(a, i) + f32_at(b, i)) / 2) << "element " << i;
  // Block 1's round, opened by C, waits for the members that formed the shard; block 2's, opened after C joined,
  // waits for C too.
  ASSERT_EQ(f.push(kA, a, kBlockBytes), Admission::run);
  EXPECT_EQ(f.model.block_step(1), 1u) << "B has not pushed block 1";
  ASSERT_EQ(f.push(kB, b, kBlockBytes), Admission::run);
  EXPECT_EQ(f.model.block_step(1), 2u);
  ASSERT_EQ(f.push(kA, a, 2 * kBlockBytes), Admission::run);
  ASSERT_EQ(f.push(kB, b, 2 * kBlockBytes), Admission::run);
  EXPECT_EQ(f.model.block_step(2), 1u) << "C was a member when block 2's round opened";
  ASSERT_EQ(f.push(kC, c, 2 * kBlockBytes), Admission::run);
  EXPECT_EQ(f.model.block_step(2), 2u);
  // A fourth worker is one beyond max_workers=3.
  const WorkerRef d{1, 14, "iqn.w:d"};
  EXPECT_EQ(f.rounds.admit_push(&a, d, 0, a.size()), Admission::not_ready);
  const std::string why = f.rounds.refusal_reason(d);
  EXPECT_NE(why.find("membership full: max_workers=3 and 3 workers are live"), std::string::npos) << why;
}

TEST(Membership, SilentMembersAreThoseWithNoPushForWorkerTimeoutMs) {
  RoundPolicy p = sync_policy(2, 1);
  p.worker_timeout_ms = 1000;
  Membership m(p);
  const auto t0 = Clock::now();
  m.admitted_push(kA, t0);
  m.admitted_push(kB, t0 + 500ms);
  EXPECT_TRUE(m.silent(t0 + 1000ms).empty());
  EXPECT_EQ(m.silent(t0 + 1001ms), std::vector<std::uint64_t>{kA.itn});
  m.landed_push(kA.itn, t0 + 900ms);
  EXPECT_EQ(m.silent(t0 + 1600ms), std::vector<std::uint64_t>{kB.itn});
}

TEST(Membership, DropsAreCountedAndTheDropLogKeepsTheLastEight) {
  Membership m(sync_policy(1, 1));
  EXPECT_FALSE(m.drop(kA.itn, "no member")) << "dropping a stranger";
  for (std::uint64_t i = 0; i < 10; ++i) {
    m.admitted_push({1, 100 + i, "iqn.w:" + std::to_string(i)}, Clock::now());
    EXPECT_TRUE(m.drop(100 + i, "why " + std::to_string(i)));
  }
  EXPECT_EQ(m.dropped(), 10u);
  ASSERT_EQ(m.recent_drops().size(), 8u);
  EXPECT_EQ(m.recent_drops().front(), "iqn.w:2 (session 102): why 2");
  EXPECT_EQ(m.recent_drops().back(), "iqn.w:9 (session 109): why 9");
  EXPECT_EQ(m.size(), 0u);
}

TEST(Membership, DegradedOnlyOnceFormedAndBelowMinWorkers) {
  Membership m(sync_policy(3, 2));
  m.admitted_push(kA, Clock::now());
  EXPECT_FALSE(m.degraded()) << "1 < min_workers, but the cluster never formed";
  EXPECT_EQ(m.degraded_reason(), "");
  m.admitted_push(kB, Clock::now());
  m.admitted_push(kC, Clock::now());
  ASSERT_TRUE(m.formed());
  ASSERT_TRUE(m.drop(kB.itn, "its session is gone"));
  EXPECT_FALSE(m.degraded()) << "2 live = min_workers";
  ASSERT_TRUE(m.drop(kC.itn, "its session is gone"));
  EXPECT_TRUE(m.degraded());
  EXPECT_EQ(m.degraded_reason(),
            "live workers 1 < min_workers=2; last drop: iqn.w:c (session 13): its session is gone");
  m.reform();
  EXPECT_FALSE(m.formed()) << "after a reset, formed again only with the expected workers";
  EXPECT_FALSE(m.degraded());
}

}  // namespace
}  // namespace blockps::unit
