// mode=sync rounds: the averaging order, what waits for a round, stragglers and their late halves, through the
// coordinator (with its keeper thread) and BspMode alone. The tgtd integration of the same (parked commands over
// iSCSI, sessions that vanish) is tests/integration/sync/test_sync.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <thread>

#include "ps_backend/rounds/bsp_mode.h"
#include "tests/unit/ps_backend/rounds/rounds_fixture.h"

namespace blockps::unit {
namespace {

using namespace std::chrono_literals;

TEST(BspRounds, ThreeWorkersGiveTheAverageWhateverTheArrivalOrder) {
  const auto ga = gradient(kShardBytes, 1), gb = gradient(kShardBytes, -2), gc = gradient(kShardBytes, 5);
  // The reference: the f32 sum in IQN order, times 1/3, applied by the same optimizer.
  std::vector<float> expected(kShardBytes / 4);
  for (std::size_t i = 0; i < expected.size(); ++i)
    expected[i] = -(((f32_at(ga, i) + f32_at(gb, i)) + f32_at(gc, i)) * (1.0f / 3.0f));
  std::vector<std::vector<float>> results;
  for (const auto& order : std::vector<std::vector<int>>{{0, 1, 2}, {2, 0, 1}, {1, 2, 0}}) {
    Fixture f(sync_policy(3, 3));
    const WorkerRef* who[] = {&kA, &kB, &kC};
    const std::vector<std::byte>* what[] = {&ga, &gb, &gc};
    for (int k = 0; k < 3; ++k) {
      EXPECT_EQ(weights(f.model), std::vector<float>(kShardBytes / 4, 0.0f)) << "applied before all pushed";
      ASSERT_EQ(f.push(*who[order[k]], *what[order[k]]), Admission::run);
    }
    results.push_back(weights(f.model));
    EXPECT_EQ(f.status()["rounds_min"], 1);
  }
  EXPECT_EQ(results[0], expected);
  EXPECT_EQ(results[1], expected);
  EXPECT_EQ(results[2], expected);
}

TEST(BspRounds, ReadParksUntilTheRoundOfItsPushIsApplied) {
  Fixture f(sync_policy(2, 2));
  const auto g = gradient(kShardBytes, 1);
  ASSERT_EQ(f.push(kA, g), Admission::run);
  EXPECT_EQ(f.rounds.admit_pull(kA.itn, 0, kShardBytes), Admission::park);
  EXPECT_EQ(f.rounds.admit_pull(kA.itn, kBlockBytes, 512), Admission::park);
  EXPECT_EQ(f.rounds.admit_pull(kC.itn, 0, kShardBytes), Admission::run)
      << "a reader that never pushed waits for nothing";
  ASSERT_EQ(f.push(kB, g), Admission::run);
  EXPECT_EQ(f.rounds.admit_pull(kA.itn, 0, kShardBytes), Admission::run);
  EXPECT_EQ(f.rounds.admit_pull(kB.itn, 0, kShardBytes), Admission::run);
}

TEST(BspRounds, ASecondPushOfABlockWaitsButTwoHalvesMakeOnePush) {
  Fixture f(sync_policy(2, 2));
  const auto half = gradient(kBlockBytes / 2, 1);
  ASSERT_EQ(f.push(kA, half, 0), Admission::run);
  ASSERT_EQ(f.push(kA, half, kBlockBytes / 2), Admission::run) << "the other half of block 0 is the same push";
  EXPECT_EQ(f.rounds.admit_push(&half, kA, 0, half.size()), Admission::park) << "block 0 again in the same round";
  EXPECT_EQ(f.rounds.admit_push(&half, kA, 2 * kBlockBytes, half.size()), Admission::run) << "another block";
  EXPECT_TRUE(f.rounds.land_push(&half, half).ok());
  const auto whole = gradient(kBlockBytes, 1);
  ASSERT_EQ(f.push(kB, whole, 0), Admission::run);
  EXPECT_EQ(f.status()["rounds_max"], 1) << "block 0 closed with A's two halves and B's whole block";
  EXPECT_EQ(f.rounds.admit_push(&half, kA, 0, half.size()), Admission::run) << "the next round of block 0";
}

TEST(BspRounds, AStragglerRoundClosesAfterStragglerMsWithMinWorkers) {
  Fixture f(sync_policy(3, 2, 150));
  const auto g = gradient(kShardBytes, 1);
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(f.push(kA, g), Admission::run);
  ASSERT_EQ(f.push(kB, g), Admission::run);
  EXPECT_EQ(f.rounds.admit_pull(kA.itn, 0, kShardBytes), Admission::park);
  while (f.rounds.admit_pull(kA.itn, 0, kShardBytes) == Admission::park) {
    ASSERT_LT(std::chrono::steady_clock::now() - t0, 5s) << "the straggler deadline never closed the round";
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 150ms);
  const auto s = f.status();
  EXPECT_EQ(s["rounds_min"], 1);
  EXPECT_EQ(s["stragglers_dropped"], 0) << "C never joined, so it is no straggler";
  // The next round of the same blocks, after the keeper has seen them closed: C joins with block 0 only, so
  // blocks 1-3 close by the straggler deadline again (the keeper must still watch them).
  std::this_thread::sleep_for(200ms);
  const std::vector<std::byte> block0(g.begin(), g.begin() + kBlockBytes);
  ASSERT_EQ(f.push(kC, block0), Admission::run);
  ASSERT_EQ(f.push(kA, g), Admission::run);
  ASSERT_EQ(f.push(kB, g), Admission::run);
  EXPECT_EQ(f.status()["rounds_min"], 1) << "blocks 1-3 wait for C until straggler_ms";
  const auto t1 = std::chrono::steady_clock::now();
  while (f.status()["rounds_min"] != 2) {
    ASSERT_LT(std::chrono::steady_clock::now() - t1, 5s) << "the second straggler round never closed";
    std::this_thread::sleep_for(5ms);
  }
}

TEST(BspRounds, TheLateRestOfAStragglersHalfPushIsDroppedNotTakenForTheNextRound) {
  Fixture f(sync_policy(2, 1, 100));
  const auto a0 = gradient(kBlockBytes, 1), b0 = gradient(kBlockBytes, 7);
  const std::vector<std::byte> b0_head(b0.begin(), b0.begin() + kBlockBytes / 2),
      b0_tail(b0.begin() + kBlockBytes / 2, b0.end());
  ASSERT_EQ(f.push(kA, a0), Admission::run);
  ASSERT_EQ(f.push(kB, b0_head), Admission::run);  // B's round 0 of block 0, first half only
  const auto t0 = std::chrono::steady_clock::now();
  while (f.status()["rounds_max"] != 1) {
    ASSERT_LT(std::chrono::steady_clock::now() - t0, 5s) << "the straggler deadline never closed the round";
    std::this_thread::sleep_for(5ms);
  }
  // The rest of B's round-0 push arrives after its round closed without B.
  ASSERT_EQ(f.push(kB, b0_tail, kBlockBytes / 2), Admission::run);
  EXPECT_EQ(f.rounds.admit_pull(kB.itn, 0, kBlockBytes), Admission::run) << "B's late half is in no open round";
  const auto a1 = gradient(kBlockBytes, 3), b1 = gradient(kBlockBytes, -5);
  ASSERT_EQ(f.push(kA, a1), Admission::run);
  ASSERT_EQ(f.push(kB, b1), Admission::run) << "B's round 1 must not collide with its late round-0 half";
  EXPECT_EQ(f.status()["rounds_max"], 2);
  // Round 0: A alone; round 1: the average of A's and B's round-1 gradients (IQN order), nothing of b0.
  std::vector<float> expected(kBlockBytes / 4);
  for (std::size_t i = 0; i < expected.size(); ++i)
    expected[i] = -f32_at(a0, i) - (f32_at(a1, i) + f32_at(b1, i)) * 0.5f;
  const auto w = weights(f.model);
  EXPECT_EQ(std::vector<float>(w.begin(), w.begin() + kBlockBytes / 4), expected);
  EXPECT_EQ(f.status()["stragglers_dropped"], 1);
}

// BspMode alone: no keeper, so a straggler deadline passes only when the test ticks.

TEST(BspMode, ARoundClosesOnceEveryExpectedWorkerPushedTheBlock) {
  ModeBench bench(sync_policy(2, 2));
  BspMode bsp(bench.ctx);
  const auto ga = gradient(kShardBytes, 1), gb = gradient(kShardBytes, 3);
  ASSERT_EQ(bench.push(bsp, kA, ga), Admission::run);
  EXPECT_EQ(bench.progress(bsp).rounds_max, 0u);
  EXPECT_EQ(bench.progress(bsp).open_rounds, 4u);
  EXPECT_EQ(bench.pull(bsp, kA, 0, 3), Admission::park) << "A's round is not applied yet";
  ASSERT_EQ(bench.push(bsp, kB, gb), Admission::run);
  const RoundProgress p = bench.progress(bsp);
  EXPECT_EQ(p.rounds_min, 1u);
  EXPECT_EQ(p.rounds_max, 1u);
  EXPECT_EQ(p.open_rounds, 0u);
  EXPECT_EQ(bench.pull(bsp, kA, 0, 3), Admission::run);
  EXPECT_EQ(bench.ctx.rounds_closed, 4u);
  std::vector<float> expected(kShardBytes / 4);
  for (std::size_t i = 0; i < expected.size(); ++i) expected[i] = -(f32_at(ga, i) + f32_at(gb, i)) * 0.5f;
  EXPECT_EQ(weights(bench.model), expected);
}

TEST(BspMode, AStragglersRoundClosesOnlyWhenATickFindsItsDeadlinePast) {
  ModeBench bench(sync_policy(2, 1, 50));
  BspMode bsp(bench.ctx);
  const auto a = gradient(kBlockBytes, 1), b = gradient(kBlockBytes / 2, 2);
  ASSERT_EQ(bench.push(bsp, kA, a), Admission::run);
  ASSERT_EQ(bench.push(bsp, kB, b), Admission::run);  // half of B's block 0
  bsp.tick();
  EXPECT_EQ(bench.progress(bsp).rounds_max, 0u) << "before straggler_ms";
  std::this_thread::sleep_for(60ms);
  bsp.tick();
  EXPECT_EQ(bench.progress(bsp).rounds_max, 1u);
  EXPECT_EQ(bench.ctx.stragglers_dropped, 1u);
  ASSERT_EQ(bench.push(bsp, kB, b, kBlockBytes / 2), Admission::run) << "the late rest of B's half push";
  EXPECT_EQ(bench.pull(bsp, kB, 0, 0), Admission::run) << "it joined no round";
  EXPECT_EQ(bench.progress(bsp).open_rounds, 0u);
  std::vector<float> expected(kBlockBytes / 4);
  for (std::size_t i = 0; i < expected.size(); ++i) expected[i] = -f32_at(a, i);
  const auto w = weights(bench.model);
  EXPECT_EQ(std::vector<float>(w.begin(), w.begin() + kBlockBytes / 4), expected);
}

TEST(BspMode, AWorkerDroppedWithAHalfPushHoldsNoRoundBack) {
  ModeBench bench(sync_policy(2, 1));
  BspMode bsp(bench.ctx);
  ASSERT_EQ(bench.push(bsp, kA, gradient(kBlockBytes, 1)), Admission::run);
  ASSERT_EQ(bench.push(bsp, kB, gradient(kBlockBytes / 2, 2)), Admission::run);
  bsp.tick();
  EXPECT_EQ(bench.progress(bsp).rounds_max, 0u) << "B is still expected";
  bench.drop(bsp, kB);
  bsp.tick();
  EXPECT_EQ(bench.progress(bsp).rounds_max, 1u) << "A is every member now";
  EXPECT_EQ(bench.ctx.stragglers_dropped, 0u);
}

TEST(BspMode, BelowMinWorkersAReadThatWouldWaitIsNotReady) {
  ModeBench bench(sync_policy(2, 2));
  BspMode bsp(bench.ctx);
  const auto g = gradient(kShardBytes, 1);
  ASSERT_EQ(bench.push(bsp, kA, g), Admission::run);
  ASSERT_EQ(bench.push(bsp, kB, g), Admission::run);
  ASSERT_EQ(bench.push(bsp, kA, g), Admission::run);
  bench.drop(bsp, kB);
  EXPECT_EQ(bench.pull(bsp, kA, 0, 0), Admission::not_ready);
}

TEST(BspMode, RoundsStartAtTheBlocksStepCountsAndResetRestartsThemAtZero) {
  ModeBench bench(sync_policy(1, 1));
  ASSERT_TRUE(bench.model.push_gradient(kBlockBytes, gradient(kBlockBytes, 1)).ok());  // block 1: step 1
  BspMode bsp(bench.ctx);
  EXPECT_EQ(bench.progress(bsp).rounds_min, 0u);
  EXPECT_EQ(bench.progress(bsp).rounds_max, 1u);
  Ticket ticket;
  ASSERT_EQ(bench.admit(bsp, kA, 0, kBlockBytes, ticket), Admission::run);  // admitted, its data not landed
  {
    std::lock_guard lock(bench.ctx.lock);
    bsp.reset();
  }
  EXPECT_EQ(bench.progress(bsp).rounds_max, 0u);
  EXPECT_EQ(bench.progress(bsp).open_rounds, 0u);
  EXPECT_EQ(bench.pull(bsp, kA, 0, 3), Admission::run) << "nothing of A's is in a round now";
}

// An averaging shard (opt=average): a round's average is what the block holds, each round from nothing.

TEST(BspModeAverage, EachRoundLeavesItsAverageNotASumOfRoundsAndAStragglerRoundAveragesWhoPushed) {
  OptimizerParams average;
  average.kind = OptimizerKind::average;
  ModeBench bench(sync_policy(2, 1, 50), average);
  BspMode bsp(bench.ctx);
  const auto expect_average = [&](const std::vector<std::vector<std::byte>>& grads, const char* what) {
    std::vector<float> expected(kShardBytes / 4);
    for (std::size_t i = 0; i < expected.size(); ++i) {
      float sum = 0;
      for (const auto& g : grads) sum += f32_at(g, i);  // the fixed order: IQN a, then b
      expected[i] = sum * (1.0f / static_cast<float>(grads.size()));
    }
    EXPECT_EQ(weights(bench.model), expected) << what;
  };
  const auto a1 = gradient(kShardBytes, 1), b1 = gradient(kShardBytes, 3);
  ASSERT_EQ(bench.push(bsp, kB, b1), Admission::run);
  ASSERT_EQ(bench.push(bsp, kA, a1), Admission::run);
  EXPECT_EQ(bench.progress(bsp).rounds_min, 1u);
  expect_average({a1, b1}, "round 1");
  const auto a2 = gradient(kShardBytes, -2), b2 = gradient(kShardBytes, 5);
  ASSERT_EQ(bench.push(bsp, kA, a2), Admission::run);
  ASSERT_EQ(bench.push(bsp, kB, b2), Admission::run);
  expect_average({a2, b2}, "round 2: its own average, nothing of round 1");
  const auto a3 = gradient(kShardBytes, 7);
  ASSERT_EQ(bench.push(bsp, kA, a3), Admission::run);  // B never pushes round 3
  std::this_thread::sleep_for(60ms);
  bsp.tick();
  EXPECT_EQ(bench.progress(bsp).rounds_min, 3u);
  expect_average({a3}, "round 3, closed without B: A's alone, divided by 1");
}

// Rounds synchronise per block only (push_lead=0: BspModeLead below has the pace's holds): workers push the blocks of
// every step in their own random permutation, interleaved at random, one worker running a whole step ahead of the
// others at times. Every push of a round is admitted at once, every round closes, and the weights are bit for bit
// those of one fixed order (the fixed summation order makes the arrival order irrelevant).
TEST(BspRounds, PushesInAnyOrderAreAdmittedAtOnceAndGiveTheFixedOrdersWeights) {
  constexpr int kSteps = 3;
  constexpr std::uint64_t kBlocks = kShardBytes / kBlockBytes;
  const WorkerRef* workers[] = {&kA, &kB, &kC};
  // Worker w's gradient of block b in step t.
  const auto grad = [](int t, int w, std::uint64_t b) {
    return gradient(kBlockBytes, static_cast<float>(1 + t * 7 + w * 3) + static_cast<float>(b) * 0.25f);
  };
  const auto run = [&](std::mt19937* shuffle) {
    RoundPolicy policy = sync_policy(3, 3);
    policy.push_lead = 0;
    Fixture f(policy);
    for (int t = 0; t < kSteps; ++t) {
      // Each worker's order of the blocks, and the interleaving of the workers' pushes.
      std::vector<std::vector<std::uint64_t>> order(3);
      std::vector<int> turns;
      for (int w = 0; w < 3; ++w) {
        for (std::uint64_t b = 0; b < kBlocks; ++b) order[w].push_back(b);
        if (shuffle != nullptr) std::shuffle(order[w].begin(), order[w].end(), *shuffle);
        turns.insert(turns.end(), kBlocks, w);
      }
      if (shuffle != nullptr && (*shuffle)() % 3 == 0) {
        std::sort(turns.begin(), turns.end());  // worker A pushes its whole step first, then B, then C
      } else if (shuffle != nullptr) {
        std::shuffle(turns.begin(), turns.end(), *shuffle);
      }
      std::vector<std::size_t> next(3, 0);
      for (int w : turns) {
        const std::uint64_t b = order[w][next[w]++];
        const Admission a = f.push(*workers[w], grad(t, w, b), b * kBlockBytes);
        if (a != Admission::run) {
          ADD_FAILURE() << "step " << t << ": worker " << w << "'s push of block " << b << " was held";
          return std::vector<float>{};
        }
      }
      const auto s = f.status();
      EXPECT_EQ(s["rounds_min"], t + 1) << "every round of step " << t << " closed";
      EXPECT_EQ(s["open_rounds"], 0);
    }
    return weights(f.model);
  };
  const std::vector<float> fixed = run(nullptr);
  ASSERT_FALSE(fixed.empty());
  for (unsigned seed = 1; seed <= 40; ++seed) {
    std::mt19937 random(seed);
    EXPECT_EQ(run(&random), fixed) << "seed " << seed;
  }
}

// The pace of the flows (RoundPolicy::push_lead): a worker's push that would open a block's round waits while it
// has push_lead more blocks in open rounds than the member with the fewest among those that pushed since it got
// ahead.

RoundPolicy sync_policy_with_lead(std::uint32_t workers, std::uint32_t lead, std::uint32_t straggler_ms = 60000) {
  RoundPolicy p = sync_policy(workers, 1, straggler_ms);
  p.push_lead = lead;
  return p;
}

TEST(BspModeLead, AWorkerPushLeadBlocksAheadWaitsUntilTheSlowestClosesARound) {
  ModeBench bench(sync_policy_with_lead(2, 2));
  BspMode bsp(bench.ctx);
  const auto g = gradient(kBlockBytes, 1);
  ASSERT_EQ(bench.push(bsp, kA, g, 0), Admission::run);
  ASSERT_EQ(bench.push(bsp, kA, g, kBlockBytes), Admission::run);  // A: 2 open (B is no member yet)
  ASSERT_EQ(bench.push(bsp, kB, g, 0), Admission::run);            // closes block 0's round: A 1 open, B none
  EXPECT_EQ(bench.ctx.rounds_closed, 1u);
  ASSERT_EQ(bench.push(bsp, kA, g, 2 * kBlockBytes), Admission::run);  // A: 2 open
  ASSERT_EQ(bench.push(bsp, kA, g, 3 * kBlockBytes), Admission::park) << "A would lead B by 3 blocks";
  ASSERT_EQ(bench.push(bsp, kB, g, kBlockBytes), Admission::run);  // closes block 1's round: A 1 open
  EXPECT_EQ(bench.ctx.rounds_closed, 2u);
  ASSERT_EQ(bench.push(bsp, kA, g, 3 * kBlockBytes), Admission::run) << "A leads by 1 now";
}

TEST(BspModeLead, TheWorkerWithTheFewestIsNeverHeldSoPushesInOtherOrdersGoOn) {
  ModeBench bench(sync_policy_with_lead(2, 1));
  BspMode bsp(bench.ctx);
  const auto g = gradient(kBlockBytes, 1);
  // A pushes blocks from the front, B from the back: each waits for the other's blocks.
  ASSERT_EQ(bench.push(bsp, kA, g, 0), Admission::run);
  ASSERT_EQ(bench.push(bsp, kB, g, 3 * kBlockBytes), Admission::run);
  ASSERT_EQ(bench.push(bsp, kA, g, kBlockBytes), Admission::run) << "A has 1 open, as many as B";
  ASSERT_EQ(bench.push(bsp, kA, g, 2 * kBlockBytes), Admission::park) << "A would have 3 open, B has 1";
  ASSERT_EQ(bench.push(bsp, kB, g, 2 * kBlockBytes), Admission::run) << "B has the fewest";
  ASSERT_EQ(bench.push(bsp, kB, g, kBlockBytes), Admission::run) << "completes A's round of block 1";
  ASSERT_EQ(bench.push(bsp, kB, g, 0), Admission::run);
  ASSERT_EQ(bench.push(bsp, kA, g, 2 * kBlockBytes), Admission::run) << "a round B opened: never held";
  ASSERT_EQ(bench.push(bsp, kA, g, 3 * kBlockBytes), Admission::run);
  const RoundProgress p = bench.progress(bsp);
  EXPECT_EQ(p.rounds_min, 1u);
  EXPECT_EQ(p.open_rounds, 0u);
}

TEST(BspModeLead, TheRestOfABlockAlreadyStartedIsNeverHeld) {
  ModeBench bench(sync_policy_with_lead(2, 1));
  BspMode bsp(bench.ctx);
  const auto half = gradient(kBlockBytes / 2, 1);
  ASSERT_EQ(bench.push(bsp, kB, half, 3 * kBlockBytes), Admission::run);
  ASSERT_EQ(bench.push(bsp, kA, half, 0), Admission::run);
  ASSERT_EQ(bench.push(bsp, kB, half, 3 * kBlockBytes + kBlockBytes / 2), Admission::run);  // B: 1 open, pushing
  ASSERT_EQ(bench.push(bsp, kA, half, kBlockBytes), Admission::run);                        // A: 2 open
  ASSERT_EQ(bench.push(bsp, kA, half, 2 * kBlockBytes), Admission::park) << "a block A has not started";
  EXPECT_EQ(bench.push(bsp, kA, half, kBlockBytes / 2), Admission::run) << "the second half of A's block 0";
}

TEST(BspModeLead, ZeroHoldsNoPush) {
  ModeBench bench(sync_policy_with_lead(2, 0));
  BspMode bsp(bench.ctx);
  const auto g = gradient(kBlockBytes, 1);
  ASSERT_EQ(bench.push(bsp, kA, g, 0), Admission::run);
  ASSERT_EQ(bench.push(bsp, kB, g, 3 * kBlockBytes), Admission::run);
  for (std::uint64_t b = 1; b < 3; ++b) EXPECT_EQ(bench.push(bsp, kA, g, b * kBlockBytes), Admission::run) << b;
}

// push_lead holds a worker across blocks, and is still safe in any order of pushes, given what the library's stream
// guarantees (client/transport/command_order.h): a worker's WRITEs go out whatever its parked READs wait for, up to
// its window of WRITEs in flight (held ones included). The member with the fewest blocks in open rounds is never
// held, so its pushes go on, and each one that joins a round another worker opened closes rounds and releases the
// held. Simulated: three workers, each pushing every step's blocks in its own random permutation through a window of
// two WRITEs (a held WRITE stays in the window until the shard admits it), one WRITE a turn, the turns at random; a
// worker starts its next step once every round of its step closed (its pulls). Every round closes, and the weights
// are bit for bit those of one fixed order.
TEST(BspModeLead, HeldPushesInAnyOrderNeverDeadlockAWorkerWhoseWritesGoOn) {
  constexpr int kSteps = 3;
  constexpr std::size_t kWindow = 2;
  constexpr std::uint64_t kBlocks = kShardBytes / kBlockBytes;
  const WorkerRef* workers[] = {&kA, &kB, &kC};
  const auto grad = [](int t, int w, std::uint64_t b) {
    return gradient(kBlockBytes, static_cast<float>(1 + t * 7 + w * 3) + static_cast<float>(b) * 0.25f);
  };
  bool held_any = false;  // a run held some push (else push_lead had nothing to do)
  struct Worker {
    int step = 0;
    std::vector<std::uint64_t> order;  // this step's blocks, in its order
    std::size_t next = 0;              // of `order`, the next to send
    std::vector<std::uint64_t> held;   // sent, not admitted yet (in the window)
  };
  const auto run = [&](std::uint32_t lead, std::mt19937* random) {
    ModeBench bench(sync_policy_with_lead(3, lead));
    BspMode bsp(bench.ctx);
    std::vector<Worker> ws(3);
    const auto new_step = [&](Worker& w) {
      w.order.clear();
      for (std::uint64_t b = 0; b < kBlocks; ++b) w.order.push_back(b);
      if (random != nullptr) std::shuffle(w.order.begin(), w.order.end(), *random);
      w.next = 0;
    };
    for (Worker& w : ws) new_step(w);
    int idle_turns = 0;
    held_any = false;
    for (;;) {
      bool all_done = true;
      for (const Worker& w : ws) all_done = all_done && w.step == kSteps;
      if (all_done) break;
      if (++idle_turns > 200) {
        ADD_FAILURE() << "push_lead=" << lead << ": no push was admitted for 200 turns: the workers deadlocked";
        return std::vector<float>{};
      }
      const int i = random != nullptr ? static_cast<int>((*random)() % 3) : (idle_turns - 1) % 3;
      Worker& w = ws[static_cast<std::size_t>(i)];
      if (w.step == kSteps) continue;
      const auto send = [&](std::uint64_t b) {
        const bool admitted = bench.push(bsp, *workers[i], grad(w.step, i, b), b * kBlockBytes) == Admission::run;
        if (admitted) idle_turns = 0;
        held_any = held_any || !admitted;
        return admitted;
      };
      std::erase_if(w.held, send);                               // the shard admits held pushes as rounds close
      if (w.held.size() < kWindow && w.next < w.order.size()) {  // one more WRITE a turn: the flows interleave
        const std::uint64_t b = w.order[w.next++];
        if (!send(b)) w.held.push_back(b);
      }
      // Its pulls: every block's round of this step closed.
      if (w.next == w.order.size() && w.held.empty() &&
          bench.pull(bsp, *workers[i], 0, kBlocks - 1) == Admission::run) {
        ++w.step;
        if (w.step < kSteps) new_step(w);
        idle_turns = 0;
      }
    }
    EXPECT_EQ(bench.progress(bsp).rounds_min, static_cast<std::uint64_t>(kSteps));
    return weights(bench.model);
  };
  const std::vector<float> fixed = run(0, nullptr);
  ASSERT_FALSE(fixed.empty());
  for (std::uint32_t lead : {1u, 2u}) {
    bool ever_held = false;
    for (unsigned seed = 1; seed <= 40; ++seed) {
      std::mt19937 random(seed);
      EXPECT_EQ(run(lead, &random), fixed) << "push_lead=" << lead << ", seed " << seed;
      ever_held = ever_held || held_any;
    }
    EXPECT_TRUE(ever_held) << "push_lead=" << lead << " never held a push: the test proves nothing";
  }
}

TEST(BspModeLead, AStragglerDeadlineReleasesTheHoldAndAMemberThatStoppedPushingSetsNoPace) {
  ModeBench bench(sync_policy_with_lead(2, 1, 50));
  BspMode bsp(bench.ctx);
  const auto g = gradient(kBlockBytes, 1);
  ASSERT_EQ(bench.push(bsp, kA, g, 0), Admission::run);
  ASSERT_EQ(bench.push(bsp, kB, g, 3 * kBlockBytes), Admission::run);  // B pushes once more, then no more
  ASSERT_EQ(bench.push(bsp, kA, g, kBlockBytes), Admission::run);      // A: 2 open, B 1
  ASSERT_EQ(bench.push(bsp, kA, g, 2 * kBlockBytes), Admission::park);
  std::this_thread::sleep_for(60ms);
  bsp.tick();  // every open round closes without the missing worker
  EXPECT_EQ(bench.progress(bsp).open_rounds, 0u);
  EXPECT_EQ(bench.ctx.rounds_closed, 3u);
  ASSERT_EQ(bench.push(bsp, kA, g, 2 * kBlockBytes), Admission::run) << "after the straggler deadline";
  EXPECT_EQ(bench.push(bsp, kA, g, 0), Admission::run) << "B, which stopped pushing (computing, or dead), holds nobody";
  EXPECT_EQ(bench.push(bsp, kA, g, kBlockBytes), Admission::run);
}

// Elastic membership (issue 51): two workers train, a third joins at a random moment of their steps (its first push a
// late member's) and later one of the first two leaves; each worker sends its blocks in descending order with at most
// two WRITEs in flight (the library's exchange_writes: a WRITE the shard parks stays in flight) and pulls each block
// after its WRITE landed (a parked READ holds no WRITE), in every interleaving a seeded scheduler picks. No
// interleaving may leave every worker waiting on the others (only the straggler rule, a minute away here, would
// break it): rounds close at the pace of the pushes.
TEST(BspModeElastic, AHostJoiningOrLeavingInAnyInterleavingNeverLeavesEveryWorkerWaiting) {
  constexpr std::uint64_t kBlocks = kShardBytes / kBlockBytes;
  constexpr std::size_t kWindow = 2;
  const WorkerRef* workers[] = {&kA, &kB, &kC};
  struct Worker {
    bool live = false, gone = false;
    int step = 0;
    std::vector<std::uint64_t> unsent;  // this step's blocks not sent yet, in its order
    std::vector<std::uint64_t> parked;  // WRITEs sent and parked by the shard (in flight)
    std::vector<std::uint64_t> unread;  // landed blocks whose READ has not run yet
  };
  for (unsigned seed = 1; seed <= 300; ++seed) {
    std::mt19937 random(seed);
    RoundPolicy p = sync_policy_with_lead(2, 2);
    p.max_workers = 3;
    ModeBench bench(p);
    BspMode bsp(bench.ctx);
    std::vector<Worker> ws(3);
    const auto new_step = [&](Worker& w) {
      w.unsent.clear();
      for (std::uint64_t b = kBlocks; b-- > 0;) w.unsent.push_back(b);
    };
    ws[0].live = ws[1].live = true;
    new_step(ws[0]);
    new_step(ws[1]);
    const int join_at = static_cast<int>(random() % 60), leave_at = join_at + 20 + static_cast<int>(random() % 60);
    std::string trace;
    const auto note = [&trace](int worker, char what, long n) {  // "Aw3": A's WRITE of block 3 ran
      trace.push_back(' ');
      trace.push_back(static_cast<char>('A' + worker));
      trace.push_back(what);
      trace.append(std::to_string(n));
    };
    int idle = 0, turn = 0;
    while (ws[0].step + ws[1].step + ws[2].step < 30) {
      ++turn;
      if (turn == join_at) {
        ws[2].live = true;
        new_step(ws[2]);
        trace += " [C joins]";
      }
      if (turn == leave_at) {  // B leaves between two steps: it finishes the one it is in first
        ws[1].gone = true;
        trace += " [B leaves after its step]";
      }
      bsp.tick();
      const int i = static_cast<int>(random() % 3);
      Worker& w = ws[static_cast<std::size_t>(i)];
      if (!w.live) {
        ++idle;
      } else {
        bool moved = false;
        const auto push = [&](std::uint64_t b) {
          return bench.push(bsp, *workers[i], gradient(kBlockBytes, 1.0f + static_cast<float>(w.step)),
                            b * kBlockBytes) == Admission::run;
        };
        // A parked WRITE the shard now takes; a READ of a landed block, if its round closed; the next WRITE, if fewer
        // than the window are in flight.
        for (auto it = w.parked.begin(); !moved && it != w.parked.end(); ++it) {
          if (!push(*it)) continue;
          note(i, 'w', static_cast<long>(*it));
          w.unread.push_back(*it);
          w.parked.erase(it);
          moved = true;
        }
        for (auto it = w.unread.begin(); !moved && it != w.unread.end(); ++it) {
          if (bench.pull(bsp, *workers[i], *it, *it) != Admission::run) continue;
          note(i, 'r', static_cast<long>(*it));
          w.unread.erase(it);
          moved = true;
        }
        if (!moved && !w.unsent.empty() && w.parked.size() < kWindow) {
          const std::uint64_t b = w.unsent.front();
          w.unsent.erase(w.unsent.begin());
          if (push(b)) {
            note(i, 'w', static_cast<long>(b));
            w.unread.push_back(b);
          } else {
            note(i, 'p', static_cast<long>(b));
            w.parked.push_back(b);
          }
          moved = true;
        }
        if (w.unsent.empty() && w.parked.empty() && w.unread.empty()) {  // the step's pulls are in: the next step
          ++w.step;
          note(i, '#', w.step);
          if (w.gone) {
            w.live = false;
            bench.drop(bsp, *workers[i]);  // its sessions close: the shard drops it
          } else {
            new_step(w);
          }
          moved = true;
        }
        idle = moved ? 0 : idle + 1;
      }
      if (idle > 300) {
        ADD_FAILURE() << "seed " << seed << ": every worker waits on the others (C joined at turn " << join_at
                      << ", B left after turn " << leave_at
                      << "); the last moves:" << trace.substr(trace.size() > 600 ? trace.size() - 600 : 0);
        break;
      }
    }
  }
}

}  // namespace
}  // namespace blockps::unit
