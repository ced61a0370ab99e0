// Which job holds a shard: claim, join, refusal, the lapse after claim_idle_s (an injected clock), takeover,
// release and a claim restored from a checkpoint.
#include <gtest/gtest.h>

#include "ps_backend/control/job_claim.h"
#include "tests/support/status_text.h"

namespace blockps {
namespace {

using Verdict = JobClaim::Verdict;
using Kind = JobClaim::Joined::Kind;

// A clock the test moves.
struct TestClock {
  JobClaim::Clock::time_point t = JobClaim::Clock::time_point(std::chrono::hours(1));
  JobClaim::Now now() {
    return [this] { return t; };
  }
};

const WorkerRef kA0{1, 10, "iqn.2024-01.test:host-a"}, kA1{1, 11, "iqn.2024-01.test:host-a"},
    kB0{1, 20, "iqn.2024-01.test:host-b"};

TEST(JobClaim, AnUnclaimedShardIsOpenToEverySession) {
  TestClock clock;
  JobClaim claim(600, clock.now());
  EXPECT_EQ(claim.check(kA0).verdict, Verdict::open);
  const ClaimStatus s = claim.status();
  EXPECT_EQ(s.holder, "");
  EXPECT_EQ(s.last_active_ms_ago, -1);
  EXPECT_EQ(s.claimed_unix, 0u);
  EXPECT_EQ(s.idle_s, 600u);
}

TEST(JobClaim, TheFirstJobClaimsItsSessionsJoinAndOthersAreRefused) {
  TestClock clock;
  JobClaim claim(600, clock.now());
  const Result<JobClaim::Joined> first = claim.join(kA0, "run-a", false);
  ASSERT_EQ(error_text(first), "");
  EXPECT_EQ(first->kind, Kind::claimed);
  const Result<JobClaim::Joined> second = claim.join(kA1, "run-a", false);
  ASSERT_EQ(error_text(second), "");
  EXPECT_EQ(second->kind, Kind::joined);
  EXPECT_EQ(claim.check(kA0).verdict, Verdict::member);
  EXPECT_EQ(claim.check(kA1).verdict, Verdict::member);

  // Another session, even of the same host (another nexus), is not a member until it joins.
  const WorkerRef stranger{1, 12, "iqn.2024-01.test:host-a"};
  const JobClaim::Check refused = claim.check(stranger);
  EXPECT_EQ(refused.verdict, Verdict::refused);
  EXPECT_TRUE(refused.first_refusal);
  EXPECT_EQ(refused.holder, "run-a");
  EXPECT_EQ(refused.sessions, 2u);
  EXPECT_FALSE(claim.check(stranger).first_refusal) << "logged once per session";
  // The same nexus number with another initiator name is another session.
  EXPECT_EQ(claim.check({1, 10, "iqn.2024-01.test:host-b"}).verdict, Verdict::refused);

  // A second job is refused, naming the holder, and nothing changes.
  clock.t += std::chrono::milliseconds(2500);
  const Result<JobClaim::Joined> other = claim.join(kB0, "run-b", false);
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.status().code(), StatusCode::invalid_argument);
  EXPECT_NE(other.message().find("job run-a holds it (2 sessions joined, its last command 2.5 s ago"),
            std::string::npos)
      << other.message();
  EXPECT_NE(other.message().find("claim_idle_s=600"), std::string::npos) << other.message();
  EXPECT_EQ(claim.holder(), "run-a");
  EXPECT_EQ(claim.check(kB0).verdict, Verdict::refused);
  const ClaimStatus s = claim.status();
  EXPECT_EQ(s.sessions, 2u);
  EXPECT_EQ(s.refused, 5u);  // the stranger's 2 commands, the other name's, B's job line and B's command
  EXPECT_EQ(s.last_active_ms_ago, 2500);
  EXPECT_FALSE(s.lapsed);
  EXPECT_GT(s.claimed_unix, 0u);
}

// A torchrun restart: new sessions of the same job join at once, while the killed ranks' sessions are still known.
TEST(JobClaim, ARestartOfTheSameJobJoinsAtOnce) {
  TestClock clock;
  JobClaim claim(600, clock.now());
  ASSERT_EQ(error_text(claim.join(kA0, "run-a", false)), "");
  const WorkerRef restarted{1, 30, "iqn.2024-01.test:host-a"};
  const Result<JobClaim::Joined> again = claim.join(restarted, "run-a", false);
  ASSERT_EQ(error_text(again), "");
  EXPECT_EQ(again->kind, Kind::joined);
  EXPECT_EQ(claim.check(restarted).verdict, Verdict::member);
  EXPECT_EQ(claim.status().takeovers, 0u);
}

const SessionProbe kAllGone = [](int, std::uint64_t) { return false; };
const SessionProbe kAllAlive = [](int, std::uint64_t) { return true; };

// claim_idle_s: a holder with no session left and silent that long may be replaced by another job's job= line
// without takeover; until then it may not, and every command of a member restarts the count.
TEST(JobClaim, AClaimLapsesAfterClaimIdleSWithoutACommand) {
  TestClock clock;
  JobClaim claim(600, clock.now());
  ASSERT_EQ(error_text(claim.join(kA0, "run-a", false)), "");
  claim.forget_gone_sessions(kAllAlive);
  clock.t += std::chrono::seconds(599);
  EXPECT_EQ(claim.check(kA0).verdict, Verdict::member);  // activity at 599 s
  clock.t += std::chrono::seconds(599);
  claim.forget_gone_sessions(kAllGone);  // run-a ended: tgt has none of its sessions any more
  EXPECT_FALSE(claim.status().lapsed);
  const Result<JobClaim::Joined> early = claim.join(kB0, "run-b", false);
  ASSERT_FALSE(early.ok());
  EXPECT_NE(early.message().find("none of its sessions is left"), std::string::npos) << early.message();
  // A lapsed claim still refuses other sessions' commands: only a job= line replaces the holder.
  clock.t += std::chrono::seconds(1);
  EXPECT_TRUE(claim.status().lapsed);
  EXPECT_EQ(claim.check(kB0).verdict, Verdict::refused);
  const Result<JobClaim::Joined> taken = claim.join(kB0, "run-b", false);
  ASSERT_EQ(error_text(taken), "");
  EXPECT_EQ(taken->kind, Kind::took_over);
  EXPECT_EQ(taken->previous, "run-a");
  EXPECT_TRUE(taken->lapsed);
  EXPECT_EQ(claim.holder(), "run-b");
  EXPECT_EQ(claim.check(kA0).verdict, Verdict::refused) << "the old job's sessions are out";
  EXPECT_FALSE(claim.check(kA0).first_refusal);
  const ClaimStatus s = claim.status();
  EXPECT_EQ(s.takeovers, 1u);
  EXPECT_EQ(s.sessions, 1u);
  EXPECT_FALSE(s.lapsed);
}

// A job whose sessions live keeps the shard however long it sends nothing (an evaluation pass): claim_idle_s
// counts only once tgt has none of them.
TEST(JobClaim, ALiveSessionKeepsTheClaimThroughAnyQuiet) {
  TestClock clock;
  JobClaim claim(30, clock.now());
  ASSERT_EQ(error_text(claim.join(kA0, "run-a", false)), "");
  ASSERT_EQ(error_text(claim.join(kA1, "run-a", false)), "");
  clock.t += std::chrono::hours(2);
  claim.forget_gone_sessions([](int, std::uint64_t itn) { return itn == kA1.itn; });  // kA0's rank died
  EXPECT_FALSE(claim.status().lapsed);
  EXPECT_EQ(claim.status().sessions, 1u);
  const Result<JobClaim::Joined> other = claim.join(kB0, "run-b", false);
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.message().find("1 session joined"), std::string::npos) << other.message();
  claim.forget_gone_sessions(kAllGone);
  EXPECT_TRUE(claim.status().lapsed) << "the last command was 2 h ago and no session is left";
}

TEST(JobClaim, ClaimIdleSZeroNeverLapses) {
  TestClock clock;
  JobClaim claim(0, clock.now());
  ASSERT_EQ(error_text(claim.join(kA0, "run-a", false)), "");
  clock.t += std::chrono::hours(24 * 365);
  EXPECT_FALSE(claim.status().lapsed);
  const Result<JobClaim::Joined> other = claim.join(kB0, "run-b", false);
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.message().find("never lapses"), std::string::npos) << other.message();
}

TEST(JobClaim, TakeoverMovesTheShardToTheNewJob) {
  TestClock clock;
  JobClaim claim(600, clock.now());
  ASSERT_EQ(error_text(claim.join(kA0, "run-a", false)), "");
  ASSERT_EQ(error_text(claim.join(kA1, "run-a", false)), "");
  EXPECT_EQ(claim.check(kB0).verdict, Verdict::refused);
  const Result<JobClaim::Joined> taken = claim.join(kB0, "run-b", true);
  ASSERT_EQ(error_text(taken), "");
  EXPECT_EQ(taken->kind, Kind::took_over);
  EXPECT_EQ(taken->previous, "run-a");
  EXPECT_FALSE(taken->lapsed);
  EXPECT_EQ(claim.check(kB0).verdict, Verdict::member);
  const JobClaim::Check old = claim.check(kA0);
  EXPECT_EQ(old.verdict, Verdict::refused);
  EXPECT_TRUE(old.first_refusal) << "a new holder logs each refused session once again";
  EXPECT_EQ(claim.check(kA1).verdict, Verdict::refused);
  EXPECT_EQ(claim.status().takeovers, 1u);
  // takeover by the holder itself is a join.
  const Result<JobClaim::Joined> same = claim.join({1, 21, "iqn.2024-01.test:host-b"}, "run-b", true);
  ASSERT_EQ(error_text(same), "");
  EXPECT_EQ(same->kind, Kind::joined);
  EXPECT_EQ(claim.status().takeovers, 1u);
}

TEST(JobClaim, ReleaseLeavesTheShardUnclaimed) {
  TestClock clock;
  JobClaim claim(600, clock.now());
  EXPECT_EQ(claim.release(), "");
  ASSERT_EQ(error_text(claim.join(kA0, "run-a", false)), "");
  EXPECT_EQ(claim.release(), "run-a");
  EXPECT_EQ(claim.holder(), "");
  EXPECT_EQ(claim.check(kB0).verdict, Verdict::open);
  EXPECT_EQ(claim.status().sessions, 0u);
  const Result<JobClaim::Joined> next = claim.join(kB0, "run-b", false);
  ASSERT_EQ(error_text(next), "");
  EXPECT_EQ(next->kind, Kind::claimed);
  EXPECT_EQ(claim.check(kA0).verdict, Verdict::refused);
}

// A shard restarted from its checkpoint: its job holds it with no session; the job's new sessions join, others
// are refused, and its idle clock starts at the restore.
TEST(JobClaim, ARestoredClaimHoldsTheShardForItsJob) {
  TestClock clock;
  JobClaim claim(600, clock.now());
  claim.restore("run-a", 1700000000);
  EXPECT_EQ(claim.status().claimed_unix, 1700000000u);
  EXPECT_EQ(claim.status().sessions, 0u);
  EXPECT_EQ(claim.check(kB0).verdict, Verdict::refused);
  EXPECT_FALSE(claim.join(kB0, "run-b", false).ok());
  const Result<JobClaim::Joined> back = claim.join(kA0, "run-a", false);
  ASSERT_EQ(error_text(back), "");
  EXPECT_EQ(back->kind, Kind::joined);
  clock.t += std::chrono::seconds(600);
  EXPECT_FALSE(claim.status().lapsed) << "its joined session lives";
  claim.forget_gone_sessions(kAllGone);
  EXPECT_TRUE(claim.status().lapsed);
}

}  // namespace
}  // namespace blockps
