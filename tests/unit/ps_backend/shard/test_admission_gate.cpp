// Admission (ps_backend/shard/admission_gate.h): each decision of the one gate every command an admission concerns
// passes (the claim, admins=, the rounds), in that order, and where a refusal is answered.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "contract/log.h"
#include "contract/scsi_codes.h"
#include "ps_backend/shard/admission_gate.h"
#include "ps_backend/shard/served_shard.h"
#include "tests/support/faulty_store.h"
#include "tests/unit/ps_backend/test_support.h"

namespace blockps {
namespace {

using namespace scsi;
using unit::make_shard;
using unit::TempDir;

const WorkerRef kA0{1, 10, "iqn.2024-01.test:a"}, kA1{1, 11, "iqn.2024-01.test:a"}, kB0{1, 20, "iqn.2024-01.test:b"};
// Two workers per round; rounds close only when both pushed (no straggler deadline within a test).
const char* const kSync = "role=grad;size=8K;block=4K;mode=sync;workers=2;straggler_ms=600000;worker_timeout_ms=600000";

// The core's log lines while a test runs.
class LogLines {
 public:
  LogLines() {
    lines().clear();
    set_log_sink([](const char* line) {
      std::lock_guard lock(mutex());
      lines().emplace_back(line);
    });
  }
  ~LogLines() { set_log_sink(nullptr); }
  int count(const std::string& needle) const {
    std::lock_guard lock(mutex());
    int n = 0;
    for (const std::string& l : lines()) n += l.find(needle) != std::string::npos;
    return n;
  }

 private:
  static std::vector<std::string>& lines() {
    static std::vector<std::string> l;
    return l;
  }
  static std::mutex& mutex() {
    static std::mutex m;
    return m;
  }
};

// What the LU `owner` gets back when woken: the commands resubmitted, and those failed with their answers.
struct HandedBack {
  std::vector<const void*> resubmitted;
  std::vector<std::pair<const void*, LuOutcome>> failed;
  explicit HandedBack(ServedShard& shard, const void* owner) {
    shard.hand_back_parked(
        owner, [](int, std::uint64_t) { return true; }, [](const void*) { return false; },
        [this](const void* h, bool, std::uint64_t) { resubmitted.push_back(h); },
        [this](const void* h, const LuOutcome& o) { failed.emplace_back(h, o); });
  }
};

// A mode=sync shard of one worker (each push closes its round) whose store fails every update while `fault` exists
// (tests/support/faulty_store.h).
std::shared_ptr<ServedShard> one_worker_shard_failing_on(const TempDir& dir, const std::string& fault) {
  auto created = ServedShard::create(
      dir.file("m.ckpt"), unit::options("role=grad;size=8K;block=4K;mode=sync;workers=1;straggler_ms=600000"),
      [fault](std::unique_ptr<ShardStore> s) { return make_faulty_store(std::move(s), fault); });
  EXPECT_TRUE(created.ok()) << created.message();
  return created.ok() ? std::move(created).value() : nullptr;
}

void expect_answer(const AdmissionVerdict& v, std::uint8_t status, std::uint8_t key, std::uint16_t asc) {
  const std::optional<LuOutcome> a = v.answer();
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->status, status);
  EXPECT_EQ(a->sense_key, key);
  EXPECT_EQ(a->asc, asc);
}

// What the glue asks the gate about before it queues (blockps_lu_admit asks this first): what a job's claim fences,
// control writes, and status READs (the claim forgets its gone sessions first); never a weights READ (a snapshot) or
// a SYNCHRONIZE CACHE.
TEST(AdmissionGate, ConcernsWhatAClaimFencesControlWritesAndStatusReads) {
  for (std::uint8_t op : {kRead10, kRead16, kWrite10, kWrite16}) EXPECT_TRUE(AdmissionGate::concerns(LuRole::grad, op));
  for (std::uint8_t op : {kWrite6, kWrite16, kWriteVerify16, kWriteSame10, kWriteSame16, kOrWrite16})
    EXPECT_TRUE(AdmissionGate::concerns(LuRole::weights, op)) << int(op);
  for (std::uint8_t op : {kWrite10, kWriteVerify16, kRead16}) EXPECT_TRUE(AdmissionGate::concerns(LuRole::status, op));
  for (std::uint8_t op : {kRead10, kRead16, kVerify16, kSynchronizeCache10, kPreFetch16})
    EXPECT_FALSE(AdmissionGate::concerns(LuRole::weights, op)) << int(op);
  EXPECT_FALSE(AdmissionGate::concerns(LuRole::status, kSynchronizeCache16));
  for (std::uint8_t op : {kSynchronizeCache10, kVerify16, kPreFetch10})
    EXPECT_FALSE(AdmissionGate::concerns(LuRole::grad, op));
}

// A verdict's answer when the command runs with it: nothing for run and park, each refusal's own SCSI answer.
TEST(AdmissionGate, EachRefusalHasItsAnswer) {
  EXPECT_FALSE(AdmissionVerdict{}.answer().has_value());
  EXPECT_FALSE((AdmissionVerdict{Admission::park, true, {}}.answer().has_value()));
  expect_answer({Admission::conflict, false, {}}, kReservationConflict, kNoSense, kAscNone);
  expect_answer({Admission::denied, false, {}}, kCheckCondition, kIllegalRequest, kAscAccessDeniedNoAccessRights);
  expect_answer({Admission::not_ready, true, {}}, kCheckCondition, kNotReady, kAscNotReadyManualIntervention);
  expect_answer({Admission::failed, true, {}}, kCheckCondition, kHardwareError, kAscInternalTargetFailure);
}

// No job holds the shard: every session's commands run, and nothing is counted as refused.
TEST(AdmissionGate, AnUnclaimedShardRunsEverySessionsCommands) {
  TempDir dir;
  auto shard = make_shard(dir.file("m.ckpt"), "role=grad;size=8K;block=4K");
  AdmissionGate grad(LuRole::grad, *shard), weights(LuRole::weights, *shard);
  int cmd = 0;
  for (const WorkerRef& who : {kA0, kB0}) {
    for (std::uint8_t op : {kWrite16, kRead16}) {
      const AdmissionVerdict v = grad.admit(nullptr, &cmd, op, 0, 4096, who);
      EXPECT_EQ(v.what, Admission::run);
      EXPECT_FALSE(v.held);
      EXPECT_EQ(v.sender.iqn, who.iqn) << "the verdict names its sender";
    }
    EXPECT_EQ(weights.admit(nullptr, &cmd, kWrite16, 0, 4096, who).what, Admission::run);
  }
  EXPECT_EQ(shard->claim_status().refused, 0u);
  EXPECT_TRUE(shard->recent_refusals().empty());
}

// The holder's sessions run; the claim counts their commands as its job's activity.
TEST(AdmissionGate, TheHoldersSessionsRun) {
  TempDir dir;
  auto shard = make_shard(dir.file("m.ckpt"), kSync);
  ASSERT_EQ(error_text(shard->control("job=run-a\n", &kA0)), "");
  ASSERT_EQ(error_text(shard->control("job=run-a\n", &kA1)), "");
  AdmissionGate grad(LuRole::grad, *shard), weights(LuRole::weights, *shard);
  int owner = 0, push = 0, assign = 0;
  EXPECT_EQ(grad.admit(&owner, &push, kWrite16, 0, 4096, kA1).what, Admission::run);
  EXPECT_EQ(shard->rounds()->live_workers(), 1u) << "a member's push reaches the rounds";
  EXPECT_EQ(weights.admit(&owner, &assign, kWrite16, 0, 4096, kA0).what, Admission::run);
  EXPECT_EQ(shard->claim_status().refused, 0u);
  EXPECT_EQ(shard->claim_status().sessions, 2u);
}

// Another job holds the shard: a grad READ/WRITE or weights write of a session outside it is refused (conflict)
// before the rounds see it. An LU that cannot hold commands lets it run, to be answered RESERVATION CONFLICT when it
// executes; a grad LU with rounds holds it and fails it at the next hand-back. Each refusal is counted and listed in
// words; the log names each refused session once.
TEST(AdmissionGate, AnotherJobsSessionIsRefusedBeforeTheRounds) {
  LogLines log;
  TempDir dir;
  auto shard = make_shard(dir.file("m.ckpt"), kSync);
  ASSERT_EQ(error_text(shard->control("job=run-a\n", &kA0)), "");
  AdmissionGate grad(LuRole::grad, *shard), weights(LuRole::weights, *shard);
  int owner = 0, push = 0, pull = 0, assign = 0;
  const AdmissionVerdict w = weights.admit(&owner, &assign, kWrite16, 0, 4096, kB0);
  EXPECT_EQ(w.what, Admission::conflict);
  EXPECT_FALSE(w.held) << "answered when it executes";
  expect_answer(w, kReservationConflict, kNoSense, kAscNone);
  for (const auto& [handle, op] : {std::pair<const void*, std::uint8_t>{&push, kWrite16}, {&pull, kRead16}}) {
    const AdmissionVerdict v = grad.admit(&owner, handle, op, 0, 4096, kB0);
    EXPECT_EQ(v.what, Admission::conflict);
    EXPECT_TRUE(v.held) << "held by the grad LU until its hand-back";
  }
  EXPECT_EQ(shard->rounds()->live_workers(), 0u) << "the refused push did not join the rounds";
  EXPECT_EQ(log.count("session 20 of iqn.2024-01.test:b has not joined it"), 1) << "logged once per session";
  const HandedBack back(*shard, &owner);
  EXPECT_TRUE(back.resubmitted.empty());
  ASSERT_EQ(back.failed.size(), 2u);
  for (const auto& [handle, outcome] : back.failed) {
    EXPECT_EQ(outcome.status, kReservationConflict);
    EXPECT_EQ(outcome.sense_key, kNoSense);
  }
  EXPECT_EQ(shard->claim_status().refused, 3u);
  const std::vector<RefusalEntry> recent = shard->recent_refusals();
  ASSERT_EQ(recent.size(), 3u);  // the weights write at once, the grad write and read when handed back
  EXPECT_EQ(recent[0].lu, LuRole::weights);
  EXPECT_NE(recent[1].reason.find("shard " + shard->path() +
                                  " is held by job run-a (1 session joined); session 20 "
                                  "of iqn.2024-01.test:b has not joined it, so its grad-LU write is refused "
                                  "(RESERVATION CONFLICT): join job run-a (job=run-a), take the shard over"),
            std::string::npos)
      << recent[1].reason;
  // The holder's session goes to the rounds as before.
  EXPECT_EQ(grad.admit(&owner, &push, kWrite16, 0, 4096, kA0).what, Admission::run);
  EXPECT_EQ(shard->rounds()->live_workers(), 1u);
}

// The same refusal on an LU without rounds: never held, answered when it executes.
TEST(AdmissionGate, WithoutRoundsAnotherJobsCommandRunsToBeAnsweredConflict) {
  TempDir dir;
  auto shard = make_shard(dir.file("m.ckpt"), "role=grad;size=8K;block=4K");
  ASSERT_EQ(error_text(shard->control("job=run-a\n", &kA0)), "");
  AdmissionGate grad(LuRole::grad, *shard);
  int cmd = 0;
  for (std::uint8_t op : {kWrite16, kRead16}) {
    const AdmissionVerdict v = grad.admit(nullptr, &cmd, op, 0, 4096, kB0);
    EXPECT_EQ(v.what, Admission::conflict);
    EXPECT_FALSE(v.held);
  }
  EXPECT_EQ(shard->recent_refusals().size(), 2u) << "listed at admission";
}

// admins= on the status LU: a control write of an initiator it does not name is denied (never held: the status LU
// holds nothing; execution answers ACCESS DENIED), logged and listed; names compare without regard to case; READs of
// the page run for anyone; without admins= every initiator's control writes run. The claim does not fence control
// writes at admission: their lines are checked when applied (ShardControl), so a job= line of a new session runs.
TEST(AdmissionGate, AControlWriteOfAnInitiatorAdminsDoesNotNameIsDenied) {
  LogLines log;
  TempDir dir;
  auto shard = make_shard(dir.file("m.ckpt"), "role=grad;size=8K");
  ASSERT_EQ(error_text(shard->control("job=run-a\n", &kA0)), "");
  AdmissionGate status(LuRole::status, *shard, {"iqn.2024-01.test:a"});
  ASSERT_TRUE(status.checks_writers());
  int cmd = 0;
  const AdmissionVerdict denied = status.admit(&status, &cmd, kWrite16, 0, 512, kB0);
  EXPECT_EQ(denied.what, Admission::denied);
  EXPECT_FALSE(denied.held);
  expect_answer(denied, kCheckCondition, kIllegalRequest, kAscAccessDeniedNoAccessRights);
  EXPECT_EQ(log.count("control write from iqn.2024-01.test:b refused: not an administrator of this shard "
                      "(admins=iqn.2024-01.test:a on its status LU)"),
            1);
  ASSERT_EQ(shard->recent_refusals().size(), 1u);
  EXPECT_EQ(shard->recent_refusals()[0].lu, LuRole::status);
  EXPECT_EQ(status.admit(&status, &cmd, kRead16, 0, 4096, kB0).what, Admission::run) << "the page is anyone's";
  EXPECT_EQ(status.admit(&status, &cmd, kWriteVerify16, 0, 512, {1, 12, "IQN.2024-01.TEST:A"}).what, Admission::run);
  EXPECT_EQ(shard->claim_status().refused, 0u) << "the claim saw none of them";

  AdmissionGate open(LuRole::status, *shard);
  EXPECT_FALSE(open.checks_writers());
  EXPECT_EQ(open.admit(&open, &cmd, kWrite16, 0, 512, kB0).what, Admission::run);
}

// A status-LU command first lets the claim forget the sessions tgt no longer has (`alive`): the page then counts the
// live ones, and a job= line finds a claim whose sessions all left ready to lapse.
TEST(AdmissionGate, AStatusCommandForgetsGoneSessionsFirst) {
  TempDir dir;
  auto shard = make_shard(dir.file("m.ckpt"), "role=grad;size=8K");
  ASSERT_EQ(error_text(shard->control("job=run-a\n", &kA0)), "");
  ASSERT_EQ(error_text(shard->control("job=run-a\n", &kA1)), "");
  AdmissionGate status(LuRole::status, *shard), grad(LuRole::grad, *shard);
  const SessionProbe a1_gone = [](int, std::uint64_t itn) { return itn != kA1.itn; };
  int cmd = 0;
  EXPECT_EQ(grad.admit(nullptr, &cmd, kRead16, 0, 512, kA0, a1_gone).what, Admission::run);
  EXPECT_EQ(shard->claim_status().sessions, 2u) << "a data command does not ask";
  EXPECT_EQ(status.admit(nullptr, &cmd, kRead16, 0, 512, kB0, a1_gone).what, Admission::run);
  EXPECT_EQ(shard->claim_status().sessions, 1u);
  EXPECT_EQ(status.admit(nullptr, &cmd, kWrite16, 0, 512, kB0, [](int, std::uint64_t) { return false; }).what,
            Admission::run);
  EXPECT_EQ(shard->claim_status().sessions, 0u);
}

// A grad-LU command of a shard with rounds gets the rounds' answer: it runs, or waits (park, held for the LU that
// hands it back when its round closes).
TEST(AdmissionGate, TheRoundsRunOrParkAGradCommand) {
  TempDir dir;
  auto shard = make_shard(dir.file("m.ckpt"), kSync);
  AdmissionGate grad(LuRole::grad, *shard), weights(LuRole::weights, *shard);
  int owner = 0, a = 0, b = 0, pull = 0, assign = 0;
  const std::vector<std::byte> g(4096, std::byte{0});
  ASSERT_EQ(grad.admit(&owner, &a, kWrite16, 0, 4096, kA0).what, Admission::run);
  ASSERT_EQ(shard->push(0, g, &a).status, kGood);
  const AdmissionVerdict waits = grad.admit(&owner, &pull, kRead16, 0, 4096, kA0);
  EXPECT_EQ(waits.what, Admission::park);
  EXPECT_TRUE(waits.held);
  EXPECT_FALSE(waits.answer().has_value()) << "a parked command that comes back runs";
  EXPECT_EQ(weights.admit(&owner, &assign, kWrite16, 0, 4096, kA0).what, Admission::run) << "no rounds there";
  EXPECT_TRUE(HandedBack(*shard, &owner).resubmitted.empty()) << "its round is open";
  ASSERT_EQ(grad.admit(&owner, &b, kWrite16, 0, 4096, kB0).what, Admission::run);
  ASSERT_EQ(shard->push(0, g, &b).status, kGood);  // closes the round
  const HandedBack back(*shard, &owner);
  ASSERT_EQ(back.resubmitted.size(), 1u);
  EXPECT_EQ(back.resubmitted[0], &pull);
}

// Below min_workers a command that would wait is refused not_ready: held, and failed NOT READY at the hand-back.
TEST(AdmissionGate, TheRoundsRefuseNotReadyBelowMinWorkers) {
  TempDir dir;
  auto shard = make_shard(dir.file("m.ckpt"), std::string(kSync) + ";min_workers=2");
  AdmissionGate grad(LuRole::grad, *shard);
  int owner = 0, a = 0, b = 0, pull = 0;
  const std::vector<std::byte> g(4096, std::byte{0});
  ASSERT_EQ(grad.admit(&owner, &a, kWrite16, 0, 4096, kA0).what, Admission::run);
  ASSERT_EQ(shard->push(0, g, &a).status, kGood);
  ASSERT_EQ(grad.admit(&owner, &b, kWrite16, 4096, 4096, kB0).what, Admission::run);
  ASSERT_EQ(shard->push(4096, g, &b).status, kGood);
  shard->hand_back_parked(  // B's session is gone: 1 live worker < min_workers=2
      &owner, [](int, std::uint64_t itn) { return itn != kB0.itn; }, [](const void*) { return false; },
      [](const void*, bool, std::uint64_t) {}, [](const void*, const LuOutcome&) {});
  const AdmissionVerdict v = grad.admit(&owner, &pull, kRead16, 0, 4096, kA0);
  EXPECT_EQ(v.what, Admission::not_ready);
  EXPECT_TRUE(v.held);
  const HandedBack back(*shard, &owner);
  ASSERT_EQ(back.failed.size(), 1u);
  EXPECT_EQ(back.failed[0].second.sense_key, kNotReady);
  EXPECT_EQ(back.failed[0].second.asc, kAscNotReadyManualIntervention);
}

// A round whose update failed refuses every later grad-LU command as failed: held, and failed HARDWARE ERROR at the
// hand-back (never GOOD over weights the round did not reach).
TEST(AdmissionGate, AFailedRoundRefusesLaterGradCommandsAsFailed) {
  TempDir dir;
  const std::string fault = dir.file("fault");
  const std::shared_ptr<ServedShard> shard = one_worker_shard_failing_on(dir, fault);
  ASSERT_TRUE(shard);
  AdmissionGate grad(LuRole::grad, *shard);
  std::ofstream(fault) << "fail\n";
  int owner = 0, push = 0, pull = 0;
  const std::vector<std::byte> g(4096, std::byte{0});
  ASSERT_EQ(grad.admit(&owner, &push, kWrite16, 0, 4096, kA0).what, Admission::run);
  EXPECT_EQ(shard->push(0, g, &push).status, kCheckCondition) << "its round's update failed";
  for (std::uint8_t op : {kRead16, kWrite16}) {
    const AdmissionVerdict v = grad.admit(&owner, &pull, op, 4096, 4096, kA0);
    EXPECT_EQ(v.what, Admission::failed) << int(op);
    EXPECT_TRUE(v.held);
  }
  const HandedBack back(*shard, &owner);
  ASSERT_EQ(back.failed.size(), 2u);
  for (const auto& [handle, outcome] : back.failed) {
    EXPECT_EQ(outcome.sense_key, kHardwareError);
    EXPECT_EQ(outcome.asc, kAscInternalTargetFailure);
  }
}

// The order: the claim answers before the rounds. A session outside the job gets RESERVATION CONFLICT even where the
// rounds would refuse or park its command, and a refused push never joins the rounds' membership.
TEST(AdmissionGate, TheClaimAnswersBeforeTheRounds) {
  TempDir dir;
  const std::string fault = dir.file("fault");
  const std::shared_ptr<ServedShard> shard = one_worker_shard_failing_on(dir, fault);
  ASSERT_TRUE(shard);
  ASSERT_EQ(error_text(shard->control("job=run-a\n", &kA0)), "");
  AdmissionGate grad(LuRole::grad, *shard);
  int owner = 0, push = 0, refused = 0;
  const std::vector<std::byte> g(4096, std::byte{0});
  // workers=1 and A is its member: the rounds would refuse B's push (membership full).
  ASSERT_EQ(grad.admit(&owner, &push, kWrite16, 0, 4096, kA0).what, Admission::run);
  ASSERT_EQ(shard->push(0, g, &push).status, kGood);
  EXPECT_EQ(grad.admit(&owner, &refused, kWrite16, 0, 4096, kB0).what, Admission::conflict);
  EXPECT_EQ(shard->rounds()->live_workers(), 1u);
  // A failed round refuses every grad command as failed, but not before the claim has answered.
  std::ofstream(fault) << "fail\n";
  ASSERT_EQ(grad.admit(&owner, &push, kWrite16, 0, 4096, kA0).what, Admission::run);
  ASSERT_NE(shard->push(0, g, &push).status, kGood);
  EXPECT_EQ(grad.admit(&owner, &refused, kRead16, 0, 4096, kB0).what, Admission::conflict);
  EXPECT_EQ(grad.admit(&owner, &refused, kRead16, 0, 4096, kA0).what, Admission::failed);
}

}  // namespace
}  // namespace blockps
