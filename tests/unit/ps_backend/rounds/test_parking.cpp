// Parked commands: park, wake, come back, deadline, abort, refuse when their LU closes; alone and through the
// coordinator.
#include <gtest/gtest.h>

#include <thread>

#include "ps_backend/rounds/parking.h"
#include "tests/unit/ps_backend/rounds/rounds_fixture.h"

namespace blockps::unit {
namespace {

using namespace std::chrono_literals;

TEST(Parking, ParkedCommandsComeBackWhenTheirRoundClosesOrFailAtTheirDeadline) {
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
        [&](const ParkedCommand& x) { resubmitted.push_back(x.handle); },
        [&](const ParkedCommand&, Refusal, const std::string& why) { failures.push_back(why); });
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

// ParkingLot alone: what process() does with each command, given what the rounds would say now.
struct Outcomes {
  std::vector<const void*> resubmitted, readmitted;
  std::vector<std::pair<Refusal, std::string>> failed;  // (as what, why)
};

struct Lot {
  ParkingLot lot{50};
  Outcomes out;
  Admission now = Admission::park;  // what readmit answers
  std::string degraded;
  const void* aborted = nullptr;

  void process(const void* owner) {
    lot.process(
        owner, [&](const void* h) { return h == aborted; },
        [&](const ParkedCommand& p) {
          out.readmitted.push_back(p.handle);
          return now;
        },
        [&](const ParkedCommand& p) { out.resubmitted.push_back(p.handle); },
        [&](const ParkedCommand&, Refusal as, const std::string& why) { out.failed.emplace_back(as, why); },
        [&] { return degraded; });
  }
};

const int kOwner = 1, kOtherOwner = 2;  // distinct values: distinct addresses
const int kFirst = 3, kSecond = 4;

TEST(ParkingLot, ACommandStaysParkedUntilTheRoundsLetItRunThenComesBackOnce) {
  Lot t;
  t.lot.park(&kOwner, &kFirst, true, kA, 0, 512);
  EXPECT_EQ(t.lot.size(), 1u);
  t.process(&kOwner);
  EXPECT_TRUE(t.out.resubmitted.empty());
  EXPECT_EQ(t.lot.size(), 1u) << "parked again";
  t.now = Admission::run;
  t.process(&kOwner);
  EXPECT_EQ(t.out.resubmitted, std::vector<const void*>{&kFirst});
  EXPECT_TRUE(t.lot.empty());
  EXPECT_TRUE(t.out.failed.empty());
}

TEST(ParkingLot, OnlyTheOwnersCommandsAreProcessed) {
  Lot t;
  t.now = Admission::run;
  t.lot.park(&kOwner, &kFirst, false, kA, 0, 512);
  t.lot.park(&kOtherOwner, &kSecond, false, kB, 0, 512);
  t.process(&kOwner);
  EXPECT_EQ(t.out.resubmitted, std::vector<const void*>{&kFirst});
  EXPECT_EQ(t.lot.size(), 1u);
}

TEST(ParkingLot, ACommandStillWaitingAtItsDeadlineFailsAndSaysWhy) {
  Lot t;
  t.lot.park(&kOwner, &kFirst, false, kA, 0, 512);
  t.process(&kOwner);
  std::this_thread::sleep_for(60ms);  // the deadline is kept when it is parked again
  t.degraded = "live workers 1 < min_workers=2";
  t.process(&kOwner);
  ASSERT_EQ(t.out.failed.size(), 1u);
  EXPECT_EQ(t.out.failed[0].first, Refusal::not_ready);
  EXPECT_EQ(t.out.failed[0].second,
            "parked for worker_timeout_ms=50 without its round closing (live workers 1 < min_workers=2)");
  EXPECT_EQ(t.out.readmitted.size(), 1u) << "a command past its deadline is not admitted again";
  EXPECT_TRUE(t.lot.empty());
}

TEST(ParkingLot, AnAbortedCommandFailsAsAborted) {
  Lot t;
  t.now = Admission::run;
  t.lot.park(&kOwner, &kFirst, true, kA, 0, 512);
  t.aborted = &kFirst;
  t.process(&kOwner);
  ASSERT_EQ(t.out.failed.size(), 1u);
  EXPECT_EQ(t.out.failed[0].first, Refusal::aborted);
  EXPECT_EQ(t.out.failed[0].second, "aborted by the initiator");
  EXPECT_TRUE(t.out.resubmitted.empty());
}

TEST(ParkingLot, CommandsOfAClosingLuAreRefusedAtTheNextProcess) {
  Lot t;
  t.now = Admission::run;
  t.lot.park(&kOwner, &kFirst, true, kA, 0, 512);
  t.lot.park(&kOtherOwner, &kSecond, true, kB, 0, 512);
  t.lot.refuse(&kOwner, "its LU is closing");
  t.process(&kOwner);
  ASSERT_EQ(t.out.failed.size(), 1u);
  EXPECT_EQ(t.out.failed[0], std::make_pair(Refusal::not_ready, std::string("its LU is closing")));
  EXPECT_TRUE(t.out.readmitted.empty());
  t.process(&kOtherOwner);
  EXPECT_EQ(t.out.resubmitted, std::vector<const void*>{&kSecond}) << "another LU's command is not refused";
}

// Another job took the shard over: every parked command, of every LU, fails as a reservation conflict.
TEST(ParkingLot, RefuseAllRefusesTheCommandsOfEveryLu) {
  Lot t;
  t.now = Admission::run;
  t.lot.park(&kOwner, &kFirst, true, kA, 0, 512);
  t.lot.park(&kOtherOwner, &kSecond, false, kB, 0, 512);
  t.lot.refuse_all("job b took the shard over", Refusal::reservation_conflict);
  t.process(&kOwner);
  t.process(&kOtherOwner);
  ASSERT_EQ(t.out.failed.size(), 2u);
  for (const auto& failed : t.out.failed)
    EXPECT_EQ(failed, std::make_pair(Refusal::reservation_conflict, std::string("job b took the shard over")));
  EXPECT_TRUE(t.out.readmitted.empty());
  EXPECT_TRUE(t.lot.empty());
}

TEST(ParkingLot, ACommandParkedWithARefusalFailsWithIt) {
  Lot t;
  t.lot.park(&kOwner, &kFirst, false, kA, 0, 512, "live workers 1 < min_workers=2");
  t.process(&kOwner);
  ASSERT_EQ(t.out.failed.size(), 1u);
  EXPECT_EQ(t.out.failed[0].second, "live workers 1 < min_workers=2");
}

TEST(ParkingLot, ACommandTheRoundsRefuseNowFailsWithTheDegradedReason) {
  Lot t;
  t.now = Admission::not_ready;
  t.degraded = "live workers 1 < min_workers=2";
  t.lot.park(&kOwner, &kFirst, false, kA, 0, 512);
  t.process(&kOwner);
  ASSERT_EQ(t.out.failed.size(), 1u);
  EXPECT_EQ(t.out.failed[0], std::make_pair(Refusal::not_ready, t.degraded));
  EXPECT_TRUE(t.lot.empty());
}

// A shard that failed to apply an update: the command fails as failed (HARDWARE ERROR), not as not ready,
// whether the refusal came at its admission or when it came back.
TEST(ParkingLot, ACommandTheRoundsFailFailsAsFailedWithTheReason) {
  Lot t;
  t.now = Admission::failed;
  t.degraded = "sync: round 3 of block 1 not applied: device fault";
  t.lot.park(&kOwner, &kFirst, false, kA, 0, 512);
  t.lot.park(&kOwner, &kSecond, true, kA, 0, 512, "sync: round 3 of block 1 not applied", Refusal::failed);
  t.process(&kOwner);
  ASSERT_EQ(t.out.failed.size(), 2u);
  for (const auto& [as, why] : t.out.failed) {
    EXPECT_EQ(as, Refusal::failed) << why;
    EXPECT_NE(why.find("block 1 not applied"), std::string::npos) << why;
  }
  EXPECT_TRUE(t.lot.empty());
}

TEST(ParkingLot, SubscribersAreWokenAlwaysByWakeAllAndByWakeIfParkedOnlyWhenACommandWaits) {
  ParkingLot lot(1000);
  int woken = 0;
  lot.subscribe(&kOwner, [&] { ++woken; });
  lot.wake_if_parked();
  EXPECT_EQ(woken, 0);
  lot.wake_all();
  EXPECT_EQ(woken, 1);
  lot.park(&kOtherOwner, &kFirst, false, kA, 0, 512);
  lot.wake_if_parked();
  EXPECT_EQ(woken, 2) << "every subscriber: any LU's command may be waiting on this shard's rounds";
  lot.unsubscribe(&kOwner);
  lot.wake_all();
  EXPECT_EQ(woken, 2);
}

}  // namespace
}  // namespace blockps::unit
