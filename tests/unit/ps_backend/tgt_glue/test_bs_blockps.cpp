// The tgt glue's parked-command life cycle without tgtd: bs_blockps.c runs against stubbed tgt calls
// (bs_blockps_ut.c) and the real core; each test plays tgt's main loop and checks what the glue handed to tgt.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "contract/scsi_codes.h"
#include "ps_backend/shard/shard_registry.h"
#include "tests/support/faulty_store.h"
#include "tests/unit/ps_backend/test_support.h"
#include "tests/unit/ps_backend/tgt_glue/allocation_failure.h"
#include "tests/unit/ps_backend/tgt_glue/bs_blockps_ut.h"

namespace {

using namespace blockps;

constexpr std::uint32_t kBlock = 4096;
constexpr std::uint64_t kWorkerA = 1, kWorkerB = 2;
// Two workers per round; rounds close only when both pushed (no straggler deadline within a test).
const std::string kSync = "role=grad;size=8k;block=4k;mode=sync;workers=2;straggler_ms=600000;worker_timeout_ms=600000";

std::string last_log() {
  char line[1200];
  ut_log_last(line, sizeof line);
  return line;
}

class Glue : public ::testing::Test {
 protected:
  void TearDown() override {
    ut_lu_close();
    for (ut_cmd* c : cmds_) ut_cmd_free(c);
  }

  // These tests play tgt's I/O pool one step at a time, so every command goes to it (main_thread_bytes=0);
  // GlueRunningHere tests the commands run on the main thread.
  void open(const std::string& bsopts) { open_with(bsopts + ";main_thread_bytes=0"); }
  void open_with(const std::string& bsopts) {
    ASSERT_EQ(ut_lu_init(bsopts.c_str()), UT_INIT_OK) << last_log();
    ASSERT_EQ(ut_lu_open(dir_.file("shard.ckpt").c_str()), 0) << last_log();
  }

  ut_cmd* command(std::uint64_t itn, bool write, std::uint64_t offset, std::uint32_t length = kBlock) {
    cmds_.push_back(ut_cmd_new(itn, write ? 1 : 0, offset, length));
    return cmds_.back();
  }

  // A push that runs at once and completes GOOD through the I/O pool.
  void push(std::uint64_t itn, std::uint64_t offset) {
    ut_cmd* c = command(itn, true, offset);
    ASSERT_EQ(ut_submit(c), 0);
    ASSERT_EQ(ut_run_pool(), 1) << "push of worker " << itn << " at " << offset << " did not run at once";
    expect_completed_good(c);
  }

  // A command the glue holds: asynchronous, neither queued to the pool nor completed.
  ut_cmd* park_pull(std::uint64_t itn, std::uint64_t offset) {
    ut_cmd* c = command(itn, false, offset);
    EXPECT_EQ(ut_submit(c), 0);
    expect_parked(c);
    return c;
  }

  // Worker A pushes block 0 and reads it back: the READ waits for the round (B has not pushed).
  ut_cmd* pull_parked_behind_its_push() {
    push(kWorkerA, 0);
    return park_pull(kWorkerA, 0);
  }

  static void expect_parked(const ut_cmd* c) {
    const ut_fate f = ut_cmd_fate(c);
    EXPECT_TRUE(f.async);
    EXPECT_EQ(f.queued, 0);
    EXPECT_EQ(f.completed, 0);
  }

  static void expect_completed_good(const ut_cmd* c) {
    const ut_fate f = ut_cmd_fate(c);
    EXPECT_EQ(f.executed, 1);
    EXPECT_EQ(f.completed, 1);
    EXPECT_EQ(f.result, scsi::kGood);
    EXPECT_FALSE(f.sense_built);
    EXPECT_EQ(f.sense_left, 0) << "the glue took its admission record out";
  }

  // Executed once and answered CHECK CONDITION with this sense.
  static void expect_executed_check_condition(const ut_cmd* c, std::uint8_t sense_key, std::uint16_t asc) {
    const ut_fate f = ut_cmd_fate(c);
    EXPECT_EQ(f.executed, 1);
    EXPECT_EQ(f.completed, 1);
    EXPECT_EQ(f.result, scsi::kCheckCondition);
    EXPECT_EQ(f.sense_key, sense_key);
    EXPECT_EQ(f.asc, asc);
    EXPECT_EQ(f.sense_left, 0) << "the glue took its admission record out";
  }

  // Failed by the glue itself (target_cmd_io_done from the wake handler), never run.
  static void expect_failed(const ut_cmd* c, std::uint8_t sense_key, std::uint16_t asc) {
    const ut_fate f = ut_cmd_fate(c);
    EXPECT_EQ(f.queued, 0);
    EXPECT_EQ(f.executed, 0);
    EXPECT_EQ(f.completed, 1);
    EXPECT_EQ(f.result, scsi::kCheckCondition);
    EXPECT_TRUE(f.sense_built);
    EXPECT_EQ(f.sense_key, sense_key);
    EXPECT_EQ(f.asc, asc);
    EXPECT_EQ(f.sense_left, 0) << "the glue took its admission record out";
  }

  // tgt's event loop: call the wake handler until `done` (rounds close on the pool's thread, wakes come later).
  static bool wake_until(const std::function<bool()>& done) {
    for (int i = 0; i < 200 && !done(); ++i) {
      ut_wake();
      if (!done()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return done();
  }

  unit::TempDir dir_;
  std::vector<ut_cmd*> cmds_;
};

TEST_F(Glue, AnAsyncLuQueuesEveryCommandAndWatchesNoFd) {
  open("role=grad;size=8k;block=4k");
  EXPECT_FALSE(ut_wake_fd_watched());
  push(kWorkerA, 0);
  ut_cmd* pull = command(kWorkerA, false, 0);
  ASSERT_EQ(ut_submit(pull), 0);
  EXPECT_EQ(ut_run_pool(), 1);
  expect_completed_good(pull);
}

TEST_F(Glue, ParkedPullIsResubmittedWhenItsRoundCloses) {
  open(kSync);
  EXPECT_TRUE(ut_wake_fd_watched());
  ut_cmd* pull = pull_parked_behind_its_push();
  ut_wake();  // a wake before the round closed hands nothing back
  expect_parked(pull);

  push(kWorkerB, 0);  // the round's last push: it closes
  ASSERT_TRUE(wake_until([&] { return ut_cmd_fate(pull).queued == 1; })) << last_log();
  EXPECT_EQ(ut_cmd_fate(pull).completed, 0);
  EXPECT_EQ(ut_run_pool(), 1);
  expect_completed_good(pull);
}

TEST_F(Glue, ParkedPushIsResubmittedWhenItsRoundCloses) {
  open(kSync);
  push(kWorkerA, 0);
  ut_cmd* again = command(kWorkerA, true, 0);  // the same block in the same open round waits
  ASSERT_EQ(ut_submit(again), 0);
  expect_parked(again);

  push(kWorkerB, 0);
  ASSERT_TRUE(wake_until([&] { return ut_cmd_fate(again).queued == 1; })) << last_log();
  EXPECT_EQ(ut_run_pool(), 1);
  expect_completed_good(again);
}

TEST_F(Glue, ParkedPastItsDeadlineFailsNotReady) {
  open("role=grad;size=8k;block=4k;mode=sync;workers=2;straggler_ms=600000;worker_timeout_ms=100");
  ut_cmd* pull = pull_parked_behind_its_push();
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  ut_wake();
  expect_failed(pull, scsi::kNotReady, scsi::kAscNotReadyManualIntervention);
  EXPECT_EQ(ut_log_count("parked for worker_timeout_ms=100"), 1) << last_log();
}

TEST_F(Glue, AbortedWhileParkedFailsAbortedCommand) {
  open(kSync);
  ut_cmd* pull = pull_parked_behind_its_push();
  ut_abort(pull);
  ut_wake();
  expect_failed(pull, scsi::kAbortedCommand, scsi::kAscNone);
  EXPECT_EQ(ut_log_count("aborted by the initiator"), 1) << last_log();
}

TEST_F(Glue, ClosingTheLuFailsItsParkedCommandsAndStopsWatching) {
  open(kSync);
  ut_cmd* pull = pull_parked_behind_its_push();
  ut_lu_close();
  expect_failed(pull, scsi::kNotReady, scsi::kAscNotReadyManualIntervention);
  EXPECT_FALSE(ut_wake_fd_watched());
  EXPECT_EQ(ut_log_count("its LU is closing"), 1) << last_log();
}

TEST_F(Glue, TooFewLiveWorkersRefuseAPullNotReady) {
  open("role=grad;size=8k;block=4k;mode=sync;workers=2;min_workers=2;straggler_ms=600000;worker_timeout_ms=600000");
  push(kWorkerA, 0);
  push(kWorkerB, kBlock);  // both joined: the group formed, no round complete
  ut_end_session(kWorkerB);
  ut_wake();                              // drops B: 1 live worker < min_workers=2
  ut_cmd* pull = park_pull(kWorkerA, 0);  // the refusal comes back through the wake, as a parked command's
  ut_wake();
  expect_failed(pull, scsi::kNotReady, scsi::kAscNotReadyManualIntervention);
  EXPECT_EQ(ut_log_count("pull of iqn.2024-01.test:worker-1 at byte 0 failed: live workers 1 < min_workers=2"), 1)
      << last_log();
}

TEST_F(Glue, AnAdmissionThatFailsRefusesTheCommandInsteadOfRunningIt) {
  open(kSync);
  push(kWorkerA, 0);
  ut_cmd* pull = command(kWorkerA, false, 0);
  unit::fail_allocations_on_this_thread(true);
  const int submitted = ut_submit(pull);
  unit::fail_allocations_on_this_thread(false);
  // Non-zero: tgt fails it with CHECK CONDITION, HARDWARE ERROR, INTERNAL TARGET FAILURE (sbc_rw).
  EXPECT_NE(submitted, 0);
  const ut_fate f = ut_cmd_fate(pull);
  EXPECT_FALSE(f.async);
  EXPECT_EQ(f.queued, 0);
  EXPECT_EQ(f.completed, 0);
  EXPECT_EQ(ut_log_count("refused command 0x28 of iqn.2024-01.test:worker-1: admission: std::bad_alloc"), 1)
      << last_log();

  // Nothing was left parked or claimed: the round still closes and the LU goes on serving.
  push(kWorkerB, 0);
  ut_cmd* next = command(kWorkerA, false, 0);
  ASSERT_EQ(ut_submit(next), 0);
  ASSERT_TRUE(wake_until([&] { return ut_cmd_fate(next).queued == 1; })) << last_log();
  EXPECT_EQ(ut_run_pool(), 1);
  expect_completed_good(next);
}

// The shard's store fails every optimizer update while a file exists (tests/support/faulty_store.h, the stores
// the registry's shards are made with, ShardRegistry::wrap_stores): the test double of the store, the real glue and
// core.
class GlueWithAFailingStore : public Glue {
 protected:
  void SetUp() override {
    ShardRegistry::instance().wrap_stores(
        [file = fault_](std::unique_ptr<ShardStore> store) { return make_faulty_store(std::move(store), file); });
  }
  void TearDown() override {
    Glue::TearDown();
    ShardRegistry::instance().wrap_stores({});
  }
  void fail_updates() { std::ofstream(fault_) << "fail\n"; }

  // Run by the pool and answered with HARDWARE ERROR, INTERNAL TARGET FAILURE.
  static void expect_executed_hardware_error(const ut_cmd* c) {
    expect_executed_check_condition(c, scsi::kHardwareError, scsi::kAscInternalTargetFailure);
  }

  std::string fault_ = dir_.file("fault");
};

TEST_F(GlueWithAFailingStore, ARoundWhoseUpdateFailsFailsItsParkedCommandsAndEveryLaterOne) {
  open(kSync);
  push(kWorkerA, 0);
  push(kWorkerB, 0);  // round 1 of block 0 is applied
  fail_updates();
  push(kWorkerA, 0);
  ut_cmd* pull = park_pull(kWorkerA, 0);
  ut_cmd* again = command(kWorkerA, true, 0);  // A's next push of block 0 waits for round 2
  ASSERT_EQ(ut_submit(again), 0);
  expect_parked(again);

  ut_cmd* last = command(kWorkerB, true, 0);  // closes round 2, whose update fails
  ASSERT_EQ(ut_submit(last), 0);
  ASSERT_EQ(ut_run_pool(), 1);
  expect_executed_hardware_error(last);
  ASSERT_TRUE(wake_until([&] { return ut_cmd_fate(pull).completed == 1 && ut_cmd_fate(again).completed == 1; }))
      << last_log();
  expect_failed(pull, scsi::kHardwareError, scsi::kAscInternalTargetFailure);
  expect_failed(again, scsi::kHardwareError, scsi::kAscInternalTargetFailure);
  EXPECT_GE(ut_log_count("sync: round 2 of block 0 not applied: injected fault"), 1) << last_log();
  EXPECT_GE(ut_log_count("pull of iqn.2024-01.test:worker-1 at byte 0 failed: sync: round 2 of block 0"), 1)
      << last_log();

  // Never GOOD over old weights: a later READ, even of another block, and a later push fail the same way.
  ut_cmd* later_pull = command(kWorkerB, false, kBlock);
  ut_cmd* later_push = command(kWorkerB, true, kBlock);
  ASSERT_EQ(ut_submit(later_pull), 0);
  ASSERT_EQ(ut_submit(later_push), 0);
  ASSERT_TRUE(wake_until([&] { return ut_cmd_fate(later_push).completed == 1; })) << last_log();
  expect_failed(later_pull, scsi::kHardwareError, scsi::kAscInternalTargetFailure);
  expect_failed(later_push, scsi::kHardwareError, scsi::kAscInternalTargetFailure);
}

TEST_F(GlueWithAFailingStore, AnSspPushWhoseUpdateFailsIsAnsweredHardwareErrorAndLaterCommandsFail) {
  open("role=grad;size=8k;block=4k;mode=ssp:1;workers=2;straggler_ms=600000;worker_timeout_ms=600000");
  push(kWorkerA, 0);
  fail_updates();
  ut_cmd* failing = command(kWorkerB, true, 0);
  ASSERT_EQ(ut_submit(failing), 0);
  ASSERT_EQ(ut_run_pool(), 1);
  expect_executed_hardware_error(failing);
  EXPECT_GE(ut_log_count("ssp: push of iqn.2024-01.test:worker-2 to block 0 not applied: injected fault"), 1)
      << last_log();
  ut_cmd* pull = command(kWorkerA, false, 0);
  ASSERT_EQ(ut_submit(pull), 0);
  ASSERT_TRUE(wake_until([&] { return ut_cmd_fate(pull).completed == 1; })) << last_log();
  expect_failed(pull, scsi::kHardwareError, scsi::kAscInternalTargetFailure);
}

// A job holds the shard (its sessions sent job=NAME to the status LU): the glue answers every command of another
// session that the claim fences with RESERVATION CONFLICT, without sense data, as a fenced SCSI device does. An
// LU that cannot hold commands answers it through the I/O pool (the only way a store sets a status of its own
// without asynchronous completion); a grad LU with rounds fails it from the wake handler, before the rounds see it.
class GlueWithAClaim : public Glue {
 protected:
  void TearDown() override {
    shard_.reset();
    Glue::TearDown();
  }
  static blockps::WorkerRef session(std::uint64_t itn) {
    return {1, itn, "iqn.2024-01.test:worker-" + std::to_string(itn)};  // as the stubbed tgt names them
  }
  // `itn` joins job `job` through the shard's control lines (in tgtd: a WRITE to the status LU of the same target).
  void join(std::uint64_t itn, const std::string& job) {
    if (!shard_) {
      auto attached = ShardRegistry::instance().attach(dir_.file("shard.ckpt"), unit::options("role=status"));
      ASSERT_TRUE(attached.ok()) << attached.message();
      shard_ = std::move(attached).value();
    }
    const blockps::WorkerRef who = session(itn);
    ASSERT_EQ(error_text(shard_->control("job=" + job + "\n", &who)), "");
  }

  // Answered RESERVATION CONFLICT with no sense: through the pool (`executed`), or by the glue itself.
  static void expect_reservation_conflict(const ut_cmd* c, bool executed) {
    const ut_fate f = ut_cmd_fate(c);
    EXPECT_EQ(f.queued, executed ? 1 : 0);
    EXPECT_EQ(f.executed, executed ? 1 : 0);
    EXPECT_EQ(f.completed, 1);
    EXPECT_EQ(f.result, scsi::kReservationConflict);
    EXPECT_FALSE(f.sense_built);
    EXPECT_EQ(f.sense_left, 0) << "the glue took its admission record out";
  }

  std::shared_ptr<ServedShard> shard_;
};

TEST_F(GlueWithAClaim, AnAsyncGradLuAnswersAnotherJobReservationConflictThroughThePool) {
  open("role=grad;size=8k;block=4k");
  join(kWorkerA, "run-a");
  ut_cmd* push = command(kWorkerB, true, 0);
  ut_cmd* pull = command(kWorkerB, false, 0);
  ASSERT_EQ(ut_submit(push), 0);
  ASSERT_EQ(ut_submit(pull), 0);
  EXPECT_EQ(ut_run_pool(), 2);
  expect_reservation_conflict(push, true);
  expect_reservation_conflict(pull, true);
  EXPECT_EQ(shard_->counters().pushes.load(), 0u);
  EXPECT_EQ(shard_->counters().pulls.load(), 0u);
  EXPECT_EQ(ut_log_count("session 2 of iqn.2024-01.test:worker-2 has not joined it"), 1)
      << "logged once per session, not per command: " << last_log();
  this->push(kWorkerA, 0);  // the holder's session is served
  EXPECT_EQ(shard_->counters().pushes.load(), 1u);
  EXPECT_EQ(shard_->claim_status().refused, 2u);
}

TEST_F(GlueWithAClaim, ASyncGradLuRefusesAnotherJobBeforeItsRounds) {
  open(kSync);
  join(kWorkerA, "run-a");
  ut_cmd* push = command(kWorkerB, true, 0);
  ut_cmd* pull = command(kWorkerB, false, kBlock);
  ASSERT_EQ(ut_submit(push), 0);
  ASSERT_EQ(ut_submit(pull), 0);
  expect_parked(push);  // held until the wake its refusal triggered
  ut_wake();
  expect_reservation_conflict(push, false);
  expect_reservation_conflict(pull, false);
  EXPECT_EQ(shard_->rounds()->live_workers(), 0u) << "the refused push joined no round";
  // The holder's worker forms its rounds as before: its READ waits for the round its push opened.
  this->push(kWorkerA, 0);
  ut_cmd* own = park_pull(kWorkerA, 0);
  expect_parked(own);
  EXPECT_EQ(shard_->rounds()->live_workers(), 1u);
}

TEST_F(GlueWithAClaim, AWeightsLuRefusesAnotherJobsWritesButServesItsReads) {
  open("role=weights;size=8k;block=4k");
  join(kWorkerA, "run-a");
  ut_cmd* write = command(kWorkerB, true, 0);
  ut_cmd* read = command(kWorkerB, false, 0);
  ASSERT_EQ(ut_submit(write), 0);
  ASSERT_EQ(ut_submit(read), 0);
  EXPECT_EQ(ut_run_pool(), 2);
  expect_reservation_conflict(write, true);
  expect_completed_good(read);  // a snapshot (blockps save, dd if=) is never fenced
  EXPECT_EQ(shard_->counters().weight_writes.load(), 0u);
  ut_cmd* own = command(kWorkerA, true, 0);
  ASSERT_EQ(ut_submit(own), 0);
  EXPECT_EQ(ut_run_pool(), 1);
  expect_completed_good(own);
  EXPECT_EQ(shard_->counters().weight_writes.load(), 1u);
}

// What an admission decided travels with the command to its execution in the glue's keeping (struct
// blockps_admitted, in the command's sense buffer): a control write of the status LU runs in the pool and acts in the
// name of the session its admission saw (job= joins that session), and one of an initiator admins= does not name is
// answered ACCESS DENIED there. Nothing of the record is left in an answered command.
TEST_F(GlueWithAClaim, AControlWriteActsInTheNameItsAdmissionKept) {
  open("role=grad;size=8k;block=4k");
  ut_lu* status = ut_lu_new("role=status;admins=iqn.2024-01.test:worker-1", 9, nullptr);
  ASSERT_NE(status, nullptr) << last_log();
  ASSERT_EQ(ut_lu_attach(status, dir_.file("shard.ckpt").c_str()), 0) << last_log();
  std::vector<std::uint8_t> lines(512);
  const std::string job = "job=run-a\n";
  std::memcpy(lines.data(), job.data(), job.size());
  const std::uint8_t write10[10] = {0x2a, 0, 0, 0, 0, 0, 0, 0, 1, 0};  // WRITE(10) of block 0
  for (std::uint64_t itn : {kWorkerA, kWorkerB})
    cmds_.push_back(ut_cmd_new_cdb(status, itn, write10, sizeof write10, lines.data(), 512, 1, nullptr));
  ut_cmd* const admin = cmds_[0];
  ut_cmd* const other = cmds_[1];
  ASSERT_EQ(ut_submit(admin), 0);
  ASSERT_EQ(ut_submit(other), 0);
  EXPECT_EQ(ut_run_pool(), 2) << "control writes run in the pool";
  expect_completed_good(admin);
  expect_executed_check_condition(other, scsi::kIllegalRequest, scsi::kAscAccessDeniedNoAccessRights);
  // Worker A's session (the one admitted with the write) joined run-a: its push runs, B's is refused.
  push(kWorkerA, 0);
  ut_cmd* refused = command(kWorkerB, true, 0);
  ASSERT_EQ(ut_submit(refused), 0);
  EXPECT_EQ(ut_run_pool(), 1);
  expect_reservation_conflict(refused, true);
  ut_lu_delete(status);
}

// main_thread_bytes (64K by default): a READ or WRITE no larger, of blocks no larger, runs on tgt's main thread when
// it is submitted or handed back, instead of in the I/O pool.
class GlueRunningHere : public GlueWithAClaim {
 protected:
  // Ran at submission and completed by tgt, GOOD.
  static void expect_ran_here_good(const ut_cmd* c) {
    const ut_fate f = ut_cmd_fate(c);
    EXPECT_TRUE(f.ran_here);
    EXPECT_FALSE(f.async);
    EXPECT_EQ(f.queued, 0);
    EXPECT_EQ(f.completed, 1);
    EXPECT_EQ(f.result, scsi::kGood);
  }
};

TEST_F(GlueRunningHere, SmallPushesAndPullsRunAtSubmissionAndLargerOnesInThePool) {
  open_with("role=grad;size=256k;block=4k;opt=sum;init=zeros");
  ut_cmd* push = command(kWorkerA, true, 0);
  std::vector<std::uint8_t> ones(kBlock);
  for (std::size_t i = 0; i < ones.size(); i += 4) ones[i + 3] = 0x3f, ones[i + 2] = 0x80;  // 1.0f, little-endian
  std::memcpy(const_cast<std::uint8_t*>(ut_cmd_data(push)), ones.data(), ones.size());
  ASSERT_EQ(ut_submit(push), 0);
  expect_ran_here_good(push);
  ut_cmd* pull = command(kWorkerA, false, 0);
  ASSERT_EQ(ut_submit(pull), 0);
  expect_ran_here_good(pull);
  EXPECT_EQ(std::memcmp(ut_cmd_data(pull), ones.data(), ones.size()), 0) << "the pull read the push's sum";
  EXPECT_EQ(ut_pool_queued(), 0u);

  ut_cmd* large = command(kWorkerA, false, 0, 128 * 1024);  // above 64K: the pool's
  ASSERT_EQ(ut_submit(large), 0);
  EXPECT_EQ(ut_run_pool(), 1);
  expect_completed_good(large);
  EXPECT_FALSE(ut_cmd_fate(large).ran_here);
}

TEST_F(GlueRunningHere, ZeroOrCommandsLargerThanTheLimitGoToThePool) {
  for (const char* bsopts :
       {"role=grad;size=256k;block=4k;main_thread_bytes=0", "role=grad;size=256k;block=4k;main_thread_bytes=2k"}) {
    SCOPED_TRACE(bsopts);
    open_with(bsopts);
    ut_cmd* pull = command(kWorkerA, false, 0);
    ASSERT_EQ(ut_submit(pull), 0);
    EXPECT_EQ(ut_run_pool(), 1);
    expect_completed_good(pull);
    ut_lu_close();
  }
}

TEST_F(GlueRunningHere, WithRoundsASmallPushToALargerBlockGoesToThePoolWhileItsPullRunsHere) {
  open_with("role=grad;size=256k;block=128k;mode=sync;workers=1;straggler_ms=600000;worker_timeout_ms=600000");
  ut_cmd* push = command(kWorkerA, true, 0);  // 4K of a 128K block: the WRITE that closes its round averages 128K
  ASSERT_EQ(ut_submit(push), 0);
  EXPECT_EQ(ut_run_pool(), 1);
  expect_completed_good(push);
  ut_cmd* pull = command(kWorkerA, false, 128 * 1024);  // a block whose round 1 is not open: a READ of its weights
  ASSERT_EQ(ut_submit(pull), 0);
  expect_ran_here_good(pull);
}

TEST_F(GlueRunningHere, AnAnswerOtherThanGoodComesOnTgtsNextLoopPassWithItsOwnStatus) {
  open_with("role=grad;size=8k;block=4k");
  join(kWorkerA, "run-a");
  ut_cmd* push = command(kWorkerB, true, 0);
  ASSERT_EQ(ut_submit(push), 0);
  const ut_fate before = ut_cmd_fate(push);
  EXPECT_TRUE(before.async) << "sbc.c would answer a synchronous store's refusal GOOD or HARDWARE ERROR";
  EXPECT_EQ(before.completed, 0);
  EXPECT_EQ(ut_run_sched_events(), 1);
  const ut_fate f = ut_cmd_fate(push);
  EXPECT_EQ(f.queued, 0);
  EXPECT_EQ(f.completed, 1);
  EXPECT_EQ(f.result, scsi::kReservationConflict);
  EXPECT_EQ(shard_->counters().pushes.load(), 0u);
}

TEST_F(GlueRunningHere, AParkedPullRunsWhenHandedBackWithoutThePool) {
  open_with(kSync);
  ut_cmd* first = command(kWorkerA, true, 0);
  ASSERT_EQ(ut_submit(first), 0);
  expect_ran_here_good(first);
  ut_cmd* pull = park_pull(kWorkerA, 0);
  ut_cmd* last = command(kWorkerB, true, 0);  // closes round 1 of block 0
  ASSERT_EQ(ut_submit(last), 0);
  expect_ran_here_good(last);
  ASSERT_TRUE(wake_until([&] { return ut_cmd_fate(pull).completed == 1; })) << last_log();
  const ut_fate f = ut_cmd_fate(pull);
  EXPECT_EQ(f.queued, 0);
  EXPECT_EQ(f.result, scsi::kGood);
  EXPECT_EQ(ut_pool_queued(), 0u);
}

TEST_F(Glue, BsoptsRefusalsTellTgtadmUnknownKeyFromBadValue) {
  EXPECT_EQ(ut_lu_init("role=grad;size=8k;colour=red"), UT_INIT_UNKNOWN_PARAM);
  EXPECT_EQ(ut_log_count("unknown key 'colour'"), 1) << last_log();
  EXPECT_EQ(ut_lu_init("role=grad;size=8k;mode=sideways"), UT_INIT_INVALID_REQUEST);
}

}  // namespace
