// What a shard decides about whose it is: job lines, the place, takeover (with rounds), release, and the refusals it
// lists in words. The claim's fence on data commands is the admission gate's: test_admission_gate.cpp.
#include <gtest/gtest.h>

#include <vector>

#include "contract/scsi_codes.h"
#include "ps_backend/shard/admission_gate.h"
#include "ps_backend/shard/served_shard.h"
#include "tests/unit/ps_backend/test_support.h"

namespace blockps {
namespace {

using unit::make_shard;
using unit::TempDir;

const WorkerRef kA0{1, 10, "iqn.2024-01.test:a"}, kA1{1, 11, "iqn.2024-01.test:a"}, kB0{1, 20, "iqn.2024-01.test:b"};

// The parked commands an LU gets back when woken, and how each failed.
struct HandedBack {
  std::vector<const void*> resubmitted;
  std::vector<std::pair<const void*, LuOutcome>> failed;
  void from(ServedShard& shard, const void* owner, const std::function<bool(int, std::uint64_t)>& alive = nullptr) {
    shard.hand_back_parked(
        owner, alive ? alive : [](int, std::uint64_t) { return true; }, [](const void*) { return false; },
        [this](const void* h, bool, std::uint64_t) { resubmitted.push_back(h); },
        [this](const void* h, const LuOutcome& o) { failed.emplace_back(h, o); });
  }
};

TEST(ServedShard, AJobClaimsTheShardAndAnotherJobIsRefusedNamingIt) {
  TempDir dir;
  auto shard = make_shard(dir.file("m.ckpt"), "role=grad;size=4K");
  ASSERT_EQ(error_text(shard->control("job=run-a\n", &kA0)), "");
  ASSERT_EQ(error_text(shard->control("job=run-a\n", &kA1)), "");
  const Status refused = shard->control("job=run-b\n", &kB0);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.code(), StatusCode::invalid_argument);
  const std::string& m = refused.message();
  EXPECT_NE(m.find("control job=run-b: shard " + shard->path() +
                   " is held by another job: job run-a holds it (2 "
                   "sessions joined"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("take it over with job=run-b and takeover in one write (blockps --takeover), or release it"),
            std::string::npos)
      << m;
  const ClaimStatus c = shard->claim_status();
  EXPECT_EQ(c.holder, "run-a");
  EXPECT_EQ(c.sessions, 2u);
  EXPECT_EQ(c.refused, 1u);
  EXPECT_EQ(c.idle_s, 30u);
  const std::vector<RefusalEntry> recent = shard->recent_refusals();
  ASSERT_EQ(recent.size(), 1u);
  EXPECT_EQ(recent[0].iqn, kB0.iqn);
  EXPECT_EQ(recent[0].session, kB0.itn);
  EXPECT_EQ(recent[0].lu, LuRole::status);
  EXPECT_EQ(recent[0].reason.rfind("shard " + shard->path() + " refused a control write: control job=run-b", 0), 0u)
      << recent[0].reason;
}

// A refused job line refuses the whole write: nothing of it is applied.
TEST(ServedShard, ARefusedJobLineAppliesNothing) {
  TempDir dir;
  auto shard = make_shard(dir.file("m.ckpt"), "role=grad;size=4K;lr=0.25");
  ASSERT_EQ(error_text(shard->control("job=run-a\n", &kA0)), "");
  EXPECT_FALSE(shard->control("job=run-b\nlr=0.9\nplace=m 0/1 stripe\n", &kB0).ok());
  EXPECT_FLOAT_EQ(shard->config().optimizer.lr, 0.25f);
  EXPECT_FALSE(shard->place());
  EXPECT_EQ(shard->claim_status().holder, "run-a");
  EXPECT_EQ(shard->claim_status().sessions, 1u);
}

// While a job holds the shard, only its sessions change training (lr, reset-rounds, place); checkpoint and
// release are anyone's. A session that names the holder's job joins it.
TEST(ServedShard, ControlLinesOfSessionsOutsideTheHolderAreRefused) {
  TempDir dir;
  auto shard = make_shard(dir.file("m.ckpt"), "role=grad;size=4K;lr=0.25;mode=sync");
  ASSERT_EQ(error_text(shard->control("lr=0.3\n", &kB0)), "") << "unclaimed: everything as before claims";
  ASSERT_EQ(error_text(shard->control("job=run-a\n", &kA0)), "");
  for (const char* lines : {"lr=0.5\n", "reset-rounds\n", "place=m 0/1 stripe\n", "checkpoint\nlr=0.5\n"}) {
    const Status s = shard->control(lines, &kB0);
    ASSERT_FALSE(s.ok()) << lines;
    EXPECT_NE(s.message().find("shard " + shard->path() +
                               " is held by job run-a (1 session joined) and session 20 "
                               "of iqn.2024-01.test:b has not joined it: send job=run-a first"),
              std::string::npos)
        << s.message();
  }
  EXPECT_FALSE(shard->control("lr=0.5\n", nullptr).ok()) << "an unknown sender is no member";
  EXPECT_FLOAT_EQ(shard->config().optimizer.lr, 0.3f);
  EXPECT_EQ(shard->claim_status().refused, 5u);
  EXPECT_EQ(error_text(shard->control("checkpoint\n", &kB0)), "");
  EXPECT_EQ(error_text(shard->control("lr=0.5\n", &kA0)), "");
  EXPECT_FLOAT_EQ(shard->config().optimizer.lr, 0.5f);
  EXPECT_EQ(error_text(shard->control("job=run-a\nlr=0.75\n", &kB0)), "");  // B's session joins run-a
  EXPECT_FLOAT_EQ(shard->config().optimizer.lr, 0.75f);
  EXPECT_EQ(shard->claim_status().sessions, 2u);
  EXPECT_FALSE(shard->control("job=x\n", nullptr).ok()) << "a job needs a known session";
}

TEST(ServedShard, ReleaseLeavesTheShardUnclaimed) {
  TempDir dir;
  auto shard = make_shard(dir.file("m.ckpt"), "role=grad;size=4K");
  ASSERT_EQ(error_text(shard->control("job=run-a\n", &kA0)), "");
  int cmd = 0;
  AdmissionGate grad(LuRole::grad, *shard);
  EXPECT_EQ(grad.admit(nullptr, &cmd, scsi::kWrite16, 0, 512, kB0).what, Admission::conflict);
  EXPECT_EQ(error_text(shard->control("release\n", &kB0)), "") << "release is the operator's, from any session";
  EXPECT_EQ(shard->claim_status().holder, "");
  EXPECT_EQ(grad.admit(nullptr, &cmd, scsi::kWrite16, 0, 512, kB0).what, Admission::run);
  EXPECT_TRUE(shard->dirty()) << "the next checkpoint records that nobody holds it";
}

// Takeover on a shard with rounds: the old job's workers and open rounds go, its parked commands and every later
// command of its sessions are refused, and the new job forms its own rounds.
TEST(ServedShard, TakeoverResetsTheRoundsAndFencesTheOldJob) {
  TempDir dir;
  auto shard =
      make_shard(dir.file("m.ckpt"), "role=grad;size=4K;block=4K;mode=sync;workers=2;straggler_ms=600000;opt=sum");
  ASSERT_EQ(error_text(shard->control("job=run-a\n", &kA0)), "");
  ASSERT_EQ(error_text(shard->control("job=run-a\n", &kA1)), "");
  int owner = 0, push = 0, pull = 0, later = 0;
  const std::vector<std::byte> g(4096, std::byte{0x3f});
  AdmissionGate grad(LuRole::grad, *shard);
  ASSERT_EQ(grad.admit(&owner, &push, scsi::kWrite16, 0, 4096, kA0).what, Admission::run);
  ASSERT_EQ(shard->push(0, g, &push).status, scsi::kGood);
  ASSERT_EQ(grad.admit(&owner, &pull, scsi::kRead16, 0, 4096, kA0).what, Admission::park);

  EXPECT_FALSE(shard->control("job=run-b\n", &kB0).ok());
  ASSERT_EQ(error_text(shard->control("job=run-b\ntakeover\n", &kB0)), "");
  EXPECT_EQ(shard->claim_status().holder, "run-b");
  EXPECT_EQ(shard->claim_status().takeovers, 1u);
  EXPECT_EQ(shard->rounds()->live_workers(), 0u);
  HandedBack back;
  back.from(*shard, &owner);
  ASSERT_EQ(back.failed.size(), 1u);
  EXPECT_EQ(back.failed[0].first, &pull);
  EXPECT_EQ(back.failed[0].second.status, scsi::kReservationConflict);
  const std::string last_refusal = shard->recent_refusals().back().reason;
  EXPECT_NE(last_refusal.find("job run-b took shard " + shard->path() + " over from job run-a (takeover by session 20"),
            std::string::npos)
      << last_refusal;
  EXPECT_EQ(grad.admit(&owner, &later, scsi::kWrite16, 0, 4096, kA1).what, Admission::conflict);
  // The new job's first push opens a round that waits for its second worker, not for the old job's.
  ASSERT_EQ(grad.admit(&owner, &push, scsi::kWrite16, 0, 4096, kB0).what, Admission::run);
  ASSERT_EQ(shard->push(0, g, &push).status, scsi::kGood);
  EXPECT_EQ(shard->rounds()->live_workers(), 1u);
  EXPECT_EQ(grad.admit(&owner, &pull, scsi::kRead16, 0, 4096, kB0).what, Admission::park);
}

TEST(ServedShard, ThePlaceIsSetKeptAndReplacedOnlyDeliberately) {
  TempDir dir;
  auto shard = make_shard(dir.file("m.ckpt"), "role=grad;size=4K");
  EXPECT_FALSE(shard->place());
  ASSERT_EQ(error_text(shard->control("job=run-a\nplace=m-1 0/2 stripe\n", &kA0)), "");
  ASSERT_TRUE(shard->place());
  EXPECT_EQ(format_place(*shard->place()), "m-1 0/2 stripe");
  EXPECT_EQ(error_text(shard->control("place=m-1 0/2 stripe\n", &kA0)), "") << "the same place";
  for (const char* other : {"place=m-1 1/2 stripe\n", "place=m-1 0/2 range\n", "place=m-2 0/2 stripe\n"}) {
    const Status s = shard->control(other, &kA0);
    ASSERT_FALSE(s.ok()) << other;
    EXPECT_NE(s.message().find("shard " + shard->path() + " holds place m-1 0/2 stripe"), std::string::npos)
        << s.message();
    EXPECT_NE(s.message().find("replace-place"), std::string::npos) << s.message();
  }
  EXPECT_EQ(format_place(*shard->place()), "m-1 0/2 stripe");
  // A place refused refuses the job line beside it: the session did not join.
  EXPECT_FALSE(shard->control("job=run-a\nplace=m-2 0/2 stripe\n", &kA1).ok());
  EXPECT_EQ(shard->claim_status().sessions, 1u);
  ASSERT_EQ(error_text(shard->control("place=m-2 1/4 range\nreplace-place\n", &kA0)), "");
  EXPECT_EQ(format_place(*shard->place()), "m-2 1/4 range");
  EXPECT_EQ(shard->tenancy(), (ShardTenancy{"run-a", shard->claim_status().claimed_unix, shard->place()}));
}

// A grad-LU command the rounds refuse is answered with a sentence: the shard, what it counts, what to change.
TEST(ServedShard, ARoundsRefusalSaysWhatItCountsAndWhatToChange) {
  TempDir dir;
  auto shard = make_shard(dir.file("m.ckpt"),
                          "role=grad;size=8K;block=4K;mode=sync;workers=2;min_workers=2;straggler_ms=600000");
  int owner = 0, a = 0, b = 0, pull = 0;
  const std::vector<std::byte> g(4096, std::byte{0});
  AdmissionGate grad(LuRole::grad, *shard);
  ASSERT_EQ(grad.admit(&owner, &a, scsi::kWrite16, 0, 4096, kA0).what, Admission::run);
  ASSERT_EQ(shard->push(0, g, &a).status, scsi::kGood);
  ASSERT_EQ(grad.admit(&owner, &b, scsi::kWrite16, 4096, 4096, kB0).what, Admission::run);
  ASSERT_EQ(shard->push(4096, g, &b).status, scsi::kGood);
  HandedBack drop;  // B's session is gone: 1 live worker < min_workers=2
  drop.from(*shard, &owner, [](int, std::uint64_t itn) { return itn != kB0.itn; });
  ASSERT_EQ(grad.admit(&owner, &pull, scsi::kRead16, 0, 4096, kA0).what, Admission::not_ready);
  HandedBack back;
  back.from(*shard, &owner);
  ASSERT_EQ(back.failed.size(), 1u);
  EXPECT_EQ(back.failed[0].second.sense_key, scsi::kNotReady);
  const std::vector<RefusalEntry> recent = shard->recent_refusals();
  ASSERT_FALSE(recent.empty());
  const RefusalEntry& e = recent.back();
  EXPECT_EQ(e.iqn, kA0.iqn);
  EXPECT_EQ(e.lu, LuRole::grad);
  EXPECT_NE(e.reason.find(shard->path() + ": rounds: pull of iqn.2024-01.test:a at byte 0 failed: live workers 1 < "
                                          "min_workers=2"),
            std::string::npos)
      << e.reason;
  EXPECT_NE(e.reason.find("; 1 worker is live (workers=2, min_workers=2): start the missing workers again"),
            std::string::npos)
      << e.reason;
}

}  // namespace
}  // namespace blockps
