// mode=ssp:K: pushes apply at once and a worker waits while more than K pushes ahead of the slowest, through the
// coordinator and SspMode alone.
#include <gtest/gtest.h>

#include "ps_backend/rounds/ssp_mode.h"
#include "tests/unit/ps_backend/rounds/rounds_fixture.h"

namespace blockps::unit {
namespace {

TEST(SspRounds, PushesApplyAtOnceAndAWorkerWaitsWhenMoreThanKAheadOfTheSlowest) {
  RoundPolicy p;
  p.mode = RoundPolicy::Mode::ssp;
  p.staleness = 1;
  p.workers = 2;
  Fixture f(p, 1.0f);
  const auto g = gradient(kShardBytes, 1);
  ASSERT_EQ(f.push(kB, g), Admission::run);
  EXPECT_NE(weights(f.model), std::vector<float>(kShardBytes / 4, 0.0f)) << "ssp applies every push at once";
  EXPECT_EQ(f.push(kA, g), Admission::run);  // A joins one behind B, and is level with it after this push
  EXPECT_EQ(f.push(kA, g), Admission::run);  // from 1 vs B's 1
  EXPECT_EQ(f.push(kA, g), Admission::run);  // from 2 vs B's 1: within K=1
  EXPECT_EQ(f.rounds.admit_push(&g, kA, 0, g.size()), Admission::park) << "from 3 pushes vs 1: more than K ahead";
  EXPECT_EQ(f.rounds.admit_pull(kA.itn, 0, kShardBytes), Admission::run) << "ssp reads never wait";
  ASSERT_EQ(f.push(kB, g), Admission::run);
  EXPECT_EQ(f.push(kA, g), Admission::run) << "B caught up one push";
  const auto s = f.status();
  EXPECT_EQ(s["mode"], "ssp:1");
  EXPECT_EQ(s["rounds_min"], 2);
  EXPECT_EQ(s["rounds_max"], 4);
}

TEST(SspMode, APushIsAppliedAsItLandsAndMovesTheWorkersClock) {
  ModeBench bench(ssp_policy(0, 1));
  SspMode ssp(bench.ctx);
  const auto g = gradient(kShardBytes, 2);
  ASSERT_EQ(bench.push(ssp, kA, g), Admission::run);
  std::vector<float> expected(kShardBytes / 4);
  for (std::size_t i = 0; i < expected.size(); ++i) expected[i] = -f32_at(g, i);
  EXPECT_EQ(weights(bench.model), expected);
  EXPECT_EQ(ssp.rounds_pushed(kA.itn), 1u);
  const RoundProgress p = bench.progress(ssp);
  EXPECT_EQ(p.rounds_min, 1u);
  EXPECT_EQ(p.rounds_max, 1u);
  EXPECT_EQ(p.open_rounds, 0u);
  EXPECT_EQ(bench.ctx.rounds_closed, 0u) << "ssp closes no rounds";
}

TEST(SspMode, TwoHalvesMakeOnePushAndPushingTheSameSectorsAgainEndsAHalfPush) {
  ModeBench bench(ssp_policy(5, 1));
  SspMode ssp(bench.ctx);
  const auto half = gradient(kBlockBytes / 2, 1);
  ASSERT_EQ(bench.push(ssp, kA, half, 0), Admission::run);
  EXPECT_EQ(bench.progress(ssp).open_rounds, 1u) << "block 0's push is half done";
  ASSERT_EQ(bench.push(ssp, kA, half, kBlockBytes / 2), Admission::run);
  EXPECT_EQ(bench.progress(ssp).rounds_max, 1u);
  EXPECT_EQ(bench.progress(ssp).open_rounds, 0u);
  ASSERT_EQ(bench.push(ssp, kA, half, 0), Admission::run);
  ASSERT_EQ(bench.push(ssp, kA, half, 0), Admission::run) << "the same sectors again: the half push is over";
  EXPECT_EQ(bench.progress(ssp).rounds_max, 2u);
  EXPECT_EQ(bench.progress(ssp).open_rounds, 1u);
}

TEST(SspMode, AnAdmittedPushWhoseDataHasNotLandedMakesTheNextOfTheSameSectorsWait) {
  ModeBench bench(ssp_policy(5, 1));
  SspMode ssp(bench.ctx);
  const auto g = gradient(kBlockBytes, 1);
  Ticket first, second;
  ASSERT_EQ(bench.admit(ssp, kA, 0, kBlockBytes, first), Admission::run);
  EXPECT_EQ(bench.admit(ssp, kA, 0, kBlockBytes, second), Admission::park);
  bench.land(ssp, first, g);
  EXPECT_EQ(bench.admit(ssp, kA, 0, kBlockBytes, second), Admission::run);
}

TEST(SspMode, ADroppedWorkerHoldsNobodyBack) {
  ModeBench bench(ssp_policy(0, 2));
  SspMode ssp(bench.ctx);
  const auto g = gradient(kShardBytes, 1);
  ASSERT_EQ(bench.push(ssp, kB, g), Admission::run);
  ASSERT_EQ(bench.push(ssp, kA, g), Admission::run);  // level with B
  ASSERT_EQ(bench.push(ssp, kA, g), Admission::run) << "level with B: K=0 lets it take the next step";
  Ticket ticket;
  EXPECT_EQ(bench.admit(ssp, kA, 0, kShardBytes, ticket), Admission::park) << "1 ahead of B with K=0";
  bench.drop(ssp, kB);
  EXPECT_EQ(bench.admit(ssp, kA, 0, kShardBytes, ticket), Admission::run);
}

// The others may run K + 1 pushes ahead of a worker that came a moment after the first push of a block, and
// not one more: it joins one push behind the slowest and is level once its own first push lands, not credited
// with a push it never made (which let the SSP staleness test see K + 2 under load).
TEST(SspMode, AWorkerLateToItsFirstPushGetsNoCreditForPushesItNeverMade) {
  ModeBench bench(ssp_policy(1, 2));
  SspMode ssp(bench.ctx);
  const auto g = gradient(kShardBytes, 1);
  ASSERT_EQ(bench.push(ssp, kB, g), Admission::run);
  ASSERT_EQ(bench.push(ssp, kA, g), Admission::run) << "A's first push, after B's";
  EXPECT_EQ(ssp.rounds_pushed(kA.itn), 1u) << "A made one push";
  ASSERT_EQ(bench.push(ssp, kB, g), Admission::run) << "from 1 vs A's 1";
  ASSERT_EQ(bench.push(ssp, kB, g), Admission::run) << "from 2 vs A's 1: within K=1";
  Ticket ticket;
  EXPECT_EQ(bench.admit(ssp, kB, 0, kShardBytes, ticket), Admission::park) << "from 3 vs A's 1: K + 1 ahead already";
}

// A worker that joins mid-training holds nobody back for longer than its own first push.
TEST(SspMode, AWorkerJoiningMidTrainingIsLevelAfterItsFirstPush) {
  ModeBench bench(ssp_policy(0, 2));
  SspMode ssp(bench.ctx);
  const auto g = gradient(kShardBytes, 1);
  for (int i = 0; i < 5; ++i) ASSERT_EQ(bench.push(ssp, kB, g), Admission::run) << "B alone, push " << i;
  ASSERT_EQ(bench.push(ssp, kA, g), Admission::run) << "A joins and pushes at once";
  EXPECT_EQ(ssp.rounds_pushed(kA.itn), 5u) << "level with B";
  ASSERT_EQ(bench.push(ssp, kB, g), Admission::run) << "B waits for nobody: K=0 and both at 5";
  Ticket ticket;
  EXPECT_EQ(bench.admit(ssp, kB, 0, kShardBytes, ticket), Admission::park) << "6 vs A's 5 with K=0";
}

TEST(SspMode, BelowMinWorkersAPushThatWouldWaitIsNotReady) {
  ModeBench bench(ssp_policy(0, 3, 3));
  SspMode ssp(bench.ctx);
  const auto g = gradient(kShardBytes, 1);
  for (const WorkerRef* w : {&kA, &kB, &kC}) ASSERT_EQ(bench.push(ssp, *w, g), Admission::run);
  bench.drop(ssp, kC);
  // Each pushed once: level.
  ASSERT_EQ(bench.push(ssp, kA, g), Admission::run) << "level with B";
  Ticket ticket;
  EXPECT_EQ(bench.admit(ssp, kA, 0, kShardBytes, ticket), Admission::not_ready);
  EXPECT_EQ(bench.pull(ssp, kA, 0, 3), Admission::run) << "reads never wait";
}

}  // namespace
}  // namespace blockps::unit
