// SyncRounds without tgt: rounds, averaging order, parking decisions, stragglers, membership. The tgtd
// integration of the same (parked commands over iSCSI, sessions that vanish) is tests/integration/test_sync.cpp.
#include "ps_backend/rounds.h"

#include <gtest/gtest.h>

#include <cstring>
#include <thread>

namespace blockps {
namespace {

using namespace std::chrono_literals;

constexpr std::uint64_t kBlockBytes = 1024, kShardBytes = 4 * kBlockBytes;  // f32: 256 elements per block

OptimizerParams sgd(float lr) {
  OptimizerParams p;
  p.kind = OptimizerKind::sgd;
  p.lr = lr;
  return p;
}

std::vector<std::byte> gradient(std::uint64_t bytes, float seed) {
  std::vector<std::byte> g(bytes);
  for (std::size_t i = 0; i < bytes / 4; ++i) {
    // Values whose f32 sum depends on the order of addition.
    const float v = seed * (1.0f + static_cast<float>(i) * 1e-3f) + (i % 2 ? 1e-7f : 3e7f);
    std::memcpy(g.data() + 4 * i, &v, 4);
  }
  return g;
}

std::vector<float> weights(const ModelShard& m) {
  std::vector<std::byte> raw(kShardBytes);
  m.read_weights(0, raw);
  std::vector<float> w(kShardBytes / 4);
  std::memcpy(w.data(), raw.data(), raw.size());
  return w;
}

struct Fixture {
  ModelShard model;
  SyncRounds rounds;
  explicit Fixture(RoundPolicy p, float lr = 1.0f)
      : model({kShardBytes, WireDtype::f32, kBlockBytes}, sgd(lr), nullptr), rounds(model, p, nullptr) {}
  Admission push(const WorkerRef& w, const std::vector<std::byte>& g, std::uint64_t offset = 0) {
    const Admission a = rounds.admit_push(&g, w, offset, g.size());
    if (a == Admission::run) {
      EXPECT_TRUE(rounds.land_push(&g, g));
    }
    return a;
  }
};

RoundPolicy sync_policy(std::uint32_t workers, std::uint32_t min_workers, std::uint32_t straggler_ms = 60000) {
  RoundPolicy p;
  p.mode = RoundPolicy::Mode::sync;
  p.workers = workers;
  p.min_workers = min_workers;
  p.straggler_ms = straggler_ms;
  return p;
}

const WorkerRef kA{1, 11, "iqn.w:a"}, kB{1, 12, "iqn.w:b"}, kC{1, 13, "iqn.w:c"};

TEST(SyncRounds, ThreeWorkersGiveTheAverageWhateverTheArrivalOrder) {
  const auto ga = gradient(kShardBytes, 1), gb = gradient(kShardBytes, -2), gc = gradient(kShardBytes, 5);
  // The reference: the f32 sum in IQN order, times 1/3, applied by the same optimizer.
  std::vector<float> expected(kShardBytes / 4);
  for (std::size_t i = 0; i < expected.size(); ++i) {
    float a, b, c;
    std::memcpy(&a, ga.data() + 4 * i, 4);
    std::memcpy(&b, gb.data() + 4 * i, 4);
    std::memcpy(&c, gc.data() + 4 * i, 4);
    expected[i] = -(((a + b) + c) * (1.0f / 3.0f));
  }
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
    EXPECT_EQ(f.rounds.status()["rounds_min"], 1);
  }
  EXPECT_EQ(results[0], expected);
  EXPECT_EQ(results[1], expected);
  EXPECT_EQ(results[2], expected);
}

TEST(SyncRounds, ReadParksUntilTheRoundOfItsPushIsApplied) {
  Fixture f(sync_policy(2, 2));
  const auto g = gradient(kShardBytes, 1);
  ASSERT_EQ(f.push(kA, g), Admission::run);
  EXPECT_EQ(f.rounds.admit_pull(kA.itn, 0, kShardBytes), Admission::park);
  EXPECT_EQ(f.rounds.admit_pull(kA.itn, kBlockBytes, 512), Admission::park);
  EXPECT_EQ(f.rounds.admit_pull(kC.itn, 0, kShardBytes), Admission::run) << "a reader that never pushed waits for nothing";
  ASSERT_EQ(f.push(kB, g), Admission::run);
  EXPECT_EQ(f.rounds.admit_pull(kA.itn, 0, kShardBytes), Admission::run);
  EXPECT_EQ(f.rounds.admit_pull(kB.itn, 0, kShardBytes), Admission::run);
}

TEST(SyncRounds, ASecondPushOfABlockWaitsButTwoHalvesMakeOnePush) {
  Fixture f(sync_policy(2, 2));
  const auto half = gradient(kBlockBytes / 2, 1);
  ASSERT_EQ(f.push(kA, half, 0), Admission::run);
  ASSERT_EQ(f.push(kA, half, kBlockBytes / 2), Admission::run) << "the other half of block 0 is the same push";
  EXPECT_EQ(f.rounds.admit_push(&half, kA, 0, half.size()), Admission::park) << "block 0 again in the same round";
  EXPECT_EQ(f.rounds.admit_push(&half, kA, 2 * kBlockBytes, half.size()), Admission::run) << "another block";
  EXPECT_TRUE(f.rounds.land_push(&half, half));
  const auto whole = gradient(kBlockBytes, 1);
  ASSERT_EQ(f.push(kB, whole, 0), Admission::run);
  EXPECT_EQ(f.rounds.status()["rounds_max"], 1) << "block 0 closed with A's two halves and B's whole block";
  EXPECT_EQ(f.rounds.admit_push(&half, kA, 0, half.size()), Admission::run) << "the next round of block 0";
}

TEST(SyncRounds, AStragglerRoundClosesAfterStragglerMsWithMinWorkers) {
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
  const auto s = f.rounds.status();
  EXPECT_EQ(s["rounds_min"], 1);
  EXPECT_EQ(s["stragglers_dropped"], 0) << "C never joined, so it is no straggler";
  // The next round of the same blocks, after the keeper has seen them closed: C joins with block 0 only, so
  // blocks 1-3 close by the straggler deadline again (the keeper must still watch them).
  std::this_thread::sleep_for(200ms);
  const std::vector<std::byte> block0(g.begin(), g.begin() + kBlockBytes);
  ASSERT_EQ(f.push(kC, block0), Admission::run);
  ASSERT_EQ(f.push(kA, g), Admission::run);
  ASSERT_EQ(f.push(kB, g), Admission::run);
  EXPECT_EQ(f.rounds.status()["rounds_min"], 1) << "blocks 1-3 wait for C until straggler_ms";
  const auto t1 = std::chrono::steady_clock::now();
  while (f.rounds.status()["rounds_min"] != 2) {
    ASSERT_LT(std::chrono::steady_clock::now() - t1, 5s) << "the second straggler round never closed";
    std::this_thread::sleep_for(5ms);
  }
}

TEST(SyncRounds, TheLateRestOfAStragglersHalfPushIsDroppedNotTakenForTheNextRound) {
  Fixture f(sync_policy(2, 1, 100));
  const auto a0 = gradient(kBlockBytes, 1), b0 = gradient(kBlockBytes, 7);
  const std::vector<std::byte> b0_head(b0.begin(), b0.begin() + kBlockBytes / 2),
      b0_tail(b0.begin() + kBlockBytes / 2, b0.end());
  ASSERT_EQ(f.push(kA, a0), Admission::run);
  ASSERT_EQ(f.push(kB, b0_head), Admission::run);  // B's round 0 of block 0, first half only
  const auto t0 = std::chrono::steady_clock::now();
  while (f.rounds.status()["rounds_max"] != 1) {
    ASSERT_LT(std::chrono::steady_clock::now() - t0, 5s) << "the straggler deadline never closed the round";
    std::this_thread::sleep_for(5ms);
  }
  // The rest of B's round-0 push arrives after its round closed without B.
  ASSERT_EQ(f.push(kB, b0_tail, kBlockBytes / 2), Admission::run);
  EXPECT_EQ(f.rounds.admit_pull(kB.itn, 0, kBlockBytes), Admission::run) << "B's late half is in no open round";
  const auto a1 = gradient(kBlockBytes, 3), b1 = gradient(kBlockBytes, -5);
  ASSERT_EQ(f.push(kA, a1), Admission::run);
  ASSERT_EQ(f.push(kB, b1), Admission::run) << "B's round 1 must not collide with its late round-0 half";
  EXPECT_EQ(f.rounds.status()["rounds_max"], 2);
  // Round 0: A alone; round 1: the average of A's and B's round-1 gradients (IQN order), nothing of b0.
  std::vector<float> expected(kBlockBytes / 4);
  for (std::size_t i = 0; i < expected.size(); ++i) {
    float x0, x1, y1;
    std::memcpy(&x0, a0.data() + 4 * i, 4);
    std::memcpy(&x1, a1.data() + 4 * i, 4);
    std::memcpy(&y1, b1.data() + 4 * i, 4);
    expected[i] = -x0 - (x1 + y1) * 0.5f;
  }
  const auto w = weights(f.model);
  EXPECT_EQ(std::vector<float>(w.begin(), w.begin() + kBlockBytes / 4), expected);
  EXPECT_EQ(f.rounds.status()["stragglers_dropped"], 1);
}

TEST(SyncRounds, BelowMinWorkersCommandsThatWouldWaitAreRefusedUntilAWorkerReturns) {
  Fixture f(sync_policy(2, 2));
  const auto g = gradient(kShardBytes, 1);
  ASSERT_EQ(f.push(kA, g), Admission::run);
  ASSERT_EQ(f.push(kB, g), Admission::run);  // round 1 closes: the cluster formed
  // B's session goes away: the glue's alive() says so when woken.
  int resubmitted = 0, failed = 0;
  f.rounds.process_parked(
      nullptr, [&](int, std::uint64_t itn) { return itn != kB.itn; }, [](const void*) { return false; },
      [&](const SyncRounds::Parked&) { ++resubmitted; }, [&](const SyncRounds::Parked&, bool, const std::string&) { ++failed; });
  EXPECT_EQ(f.rounds.status()["workers_dropped"], 1);
  ASSERT_EQ(f.push(kA, g), Admission::run) << "pushes are still taken";
  EXPECT_EQ(f.rounds.admit_pull(kA.itn, 0, kShardBytes), Admission::not_ready);
  EXPECT_NE(f.rounds.degraded_reason().find("live workers 1 < min_workers=2"), std::string::npos)
      << f.rounds.degraded_reason();
  EXPECT_TRUE(f.rounds.status()["degraded"].get<bool>());
  // A worker comes back (a new session) and pushes: the round closes with both.
  const WorkerRef b2{1, 21, "iqn.w:b"};
  ASSERT_EQ(f.push(b2, g), Admission::run);
  EXPECT_EQ(f.rounds.admit_pull(kA.itn, 0, kShardBytes), Admission::run);
  EXPECT_TRUE(f.rounds.degraded_reason().empty());
  EXPECT_EQ(f.rounds.status()["rounds_min"], 2);
}

TEST(SyncRounds, ParkedCommandsComeBackWhenTheirRoundClosesOrFailAtTheirDeadline) {
  RoundPolicy p = sync_policy(2, 2);
  p.worker_timeout_ms = 300;
  Fixture f(p);
  const auto g = gradient(kShardBytes, 1);
  int woken = 0;
  f.rounds.subscribe(&woken, [&] { ++woken; });
  ASSERT_EQ(f.push(kA, g), Admission::run);
  int pull = 0, second = 0;
  f.rounds.park(&woken, &pull, false, kA, 0, kShardBytes);
  std::vector<const void*> resubmitted;
  std::vector<std::string> failures;
  const auto process = [&] {
    f.rounds.process_parked(
        &woken, [](int, std::uint64_t) { return true; }, [](const void*) { return false; },
        [&](const SyncRounds::Parked& x) { resubmitted.push_back(x.handle); },
        [&](const SyncRounds::Parked&, bool, const std::string& why) { failures.push_back(why); });
  };
  process();
  EXPECT_TRUE(resubmitted.empty());
  ASSERT_EQ(f.push(kB, g), Admission::run);
  EXPECT_GT(woken, 0) << "closing a round wakes the glue";
  process();
  ASSERT_EQ(resubmitted.size(), 1u);
  EXPECT_EQ(resubmitted[0], &pull);
  // A READ whose round never closes (B stays away) fails at its deadline instead of pinning the session.
  ASSERT_EQ(f.push(kA, g), Admission::run);
  f.rounds.park(&woken, &second, false, kA, 0, kShardBytes);
  std::this_thread::sleep_for(350ms);
  process();
  ASSERT_EQ(failures.size(), 1u);
  f.rounds.unsubscribe(&woken);
}

TEST(SyncRounds, ResetDropsOpenRoundsAndRestartsTheCounters) {
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

}  // namespace
}  // namespace blockps

namespace blockps {
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
  EXPECT_EQ(f.push(kA, g), Admission::run);  // A joins level with B (1 push), then runs 1 ahead
  EXPECT_EQ(f.push(kA, g), Admission::run);  // 2 vs B's 1: within K=1
  EXPECT_EQ(f.rounds.admit_push(&g, kA, 0, g.size()), Admission::park) << "3 pushes vs 1: more than K ahead";
  EXPECT_EQ(f.rounds.admit_pull(kA.itn, 0, kShardBytes), Admission::run) << "ssp reads never wait";
  ASSERT_EQ(f.push(kB, g), Admission::run);
  EXPECT_EQ(f.push(kA, g), Admission::run) << "B caught up one push";
  const auto s = f.rounds.status();
  EXPECT_EQ(s["mode"], "ssp:1");
  EXPECT_EQ(s["rounds_min"], 2);
  EXPECT_EQ(s["rounds_max"], 4);
}

}  // namespace
}  // namespace blockps
