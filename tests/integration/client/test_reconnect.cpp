// Workers that reconnect (client/transport/libiscsi_transport.cpp) against real shards: a shard killed with kill -9 and
// restarted by its supervisor (here the test) costs the training loop nothing but the updates since the shard's
// last checkpoint; a session the target drops is logged in again and no push is applied twice; a shard that
// stays away fails the step after [client] reconnect_s with an error that names it (C++ code, C result, Python
// exception). Every shard runs opt=sum and every gradient is 1, so a weight counts the pushes applied to it.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <mutex>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "blockps/blockps.h"
#include "blockps/cluster.h"
#include "client/transport/iscsi_lun.h"
#include "contract/log.h"
#include "tests/support/blockps_shard.h"
#include "tests/support/local_cluster.h"
#include "tests/support/process.h"

namespace blockps::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
constexpr std::uint64_t K = 1024;
constexpr std::uint64_t kModelBytes = 1024 * K;  // 16 blocks of 64K: 8 per shard
constexpr std::uint64_t kBlockBytes = 64 * K;

std::span<const float> floats(const std::vector<std::byte>& bytes) {
  return {reinterpret_cast<const float*>(bytes.data()), bytes.size() / sizeof(float)};
}

// What a transport's recovery did, as the tests print it.
std::string recovery_of(const LuQueueCounters& c) {
  return std::to_string(c.reconnects) + " reconnects, " + std::to_string(c.unanswered_writes_dropped) +
         " WRITEs given up, " + std::to_string(c.unit_attentions_resent) + " UNIT ATTENTIONs resent";
}

class ReconnectTest : public ::testing::Test {
 protected:
  void SetUp() override { BLOCKPS_REQUIRE_TGTD_AND_MODULE(); }
  void TearDown() override {
    if (HasFailure()) std::cerr << local_.logs();
  }

  void start(double reconnect_s, const std::string& more_client_options = {}) {
    const Status s =
        local_.start({.model_bytes = kModelBytes,
                      .block_bytes = kBlockBytes,
                      .client_options = "reconnect_s = " + std::to_string(reconnect_s) + "\n" + more_client_options},
                     "blockps-reconnect-");
    ASSERT_TRUE(s.ok()) << s.message();
    auto c = Cluster::open(local_.cluster_file());
    ASSERT_TRUE(c.ok()) << c.message();
    cluster_ = std::move(c.value());
    layout_ = make_layout(LayoutKind::stripe, kModelBytes, kBlockBytes, 2);
    ones_.assign(kModelBytes / sizeof(float), 1.0f);
    back_.resize(kModelBytes);
  }

  Status exchange_once() { return cluster_->exchange(std::as_bytes(std::span<const float>(ones_)), back_); }

  // SYNCHRONIZE CACHE on the shard's weights LU: the shard writes its checkpoint (what fsync on its device does).
  void checkpoint(int shard) {
    IscsiLun lu;
    const Status s = lu.connect(local_.url(shard, 2), "iqn.2026-11.io.blockps:test-checkpointer");
    ASSERT_TRUE(s.ok()) << s.message();
    const ScsiResult r = lu.synchronize_cache();
    ASSERT_TRUE(r.ok()) << r.describe();
  }

  // Each weight of `shard`, from a pull (opt=sum from zeros: the number of pushes applied to it).
  std::vector<float> weights_of(int shard) {
    std::vector<std::byte> w(kModelBytes);
    const Status s = cluster_->pull(w);
    EXPECT_TRUE(s.ok()) << s.message();
    std::vector<float> out;
    const auto all = floats(w);
    for (std::size_t b = 0; b < layout_->block_count(); ++b) {
      if (layout_->place(b).shard != static_cast<std::size_t>(shard)) continue;
      const std::size_t first = layout_->model_offset_of_block(b) / sizeof(float);
      const std::size_t n = layout_->bytes_of_block(b) / sizeof(float);
      out.insert(out.end(), all.begin() + static_cast<std::ptrdiff_t>(first),
                 all.begin() + static_cast<std::ptrdiff_t>(first + n));
    }
    return out;
  }

  LocalCluster local_;
  std::unique_ptr<Cluster> cluster_;
  std::unique_ptr<Layout> layout_;
  std::vector<float> ones_;
  std::vector<std::byte> back_;
};

// The end-to-end case of a shard that crashes: the loop checkpoints shard 1 after step 40, steps 41-44 are
// acknowledged, shard 1 is killed with -9 while step 45's exchange is in flight and a supervisor restarts it a
// second later from its checkpoint. Every step returns ok; shard 1 lost exactly the pushes after its checkpoint
// (steps 41-44, and 45 where its WRITEs were in flight; a WRITE of 45 not yet sent at the kill goes after the
// reconnect and counts) and applied none twice; shard 0 lost nothing.
TEST_F(ReconnectTest, ATrainingLoopRidesOutAShardKilledAndRestartedFromItsCheckpoint) {
  ASSERT_NO_FATAL_FAILURE(start(30));
  constexpr int kSteps = 60, kCheckpointAfter = 40, kKilledDuring = 45;
  std::string around_the_kill;
  for (int step = 1; step <= kSteps; ++step) {
    if (step != kKilledDuring) {
      const Status s = exchange_once();
      ASSERT_TRUE(s.ok()) << "step " << step << ": " << s.message();
    } else {
      Operation op = cluster_->exchange_async(std::as_bytes(std::span<const float>(ones_)), back_);
      ASSERT_TRUE(local_.tgtd(1).kill9().ok());
      const auto killed_at = Clock::now();
      // The supervisor (this thread: a tgtd dies with the thread that started it, tests/support/process.h).
      std::this_thread::sleep_for(1s);
      const Status restarted = local_.restart_shard(1);
      ASSERT_TRUE(restarted.ok()) << restarted.message();
      const Status s = op.wait();
      ASSERT_TRUE(s.ok()) << "the step in flight at the kill: " << s.message();
      std::cout << "step " << step << " finished " << std::chrono::duration<double>(Clock::now() - killed_at).count()
                << " s after shard 1 was killed\n";
    }
    if (step == kCheckpointAfter) {
      ASSERT_NO_FATAL_FAILURE(checkpoint(1));
    }
    if (step >= kKilledDuring && step <= kKilledDuring + 2) {
      // What shard 1's session did around the kill: the evidence a failure below is read with.
      around_the_kill += "after step " + std::to_string(step) + ": shard 1 " +
                         recovery_of(cluster_->grad_queue_counters().value()[1]) + "\n";
    }
  }
  std::cout << around_the_kill;
  auto counters = cluster_->grad_queue_counters();
  ASSERT_TRUE(counters.ok()) << counters.message();
  EXPECT_GE(counters.value()[1].reconnects, 1u);
  EXPECT_EQ(counters.value()[0].reconnects, 0u);

  for (float w : weights_of(0)) ASSERT_EQ(w, kSteps) << "shard 0 lost or doubled a push";
  for (float w : weights_of(1)) {
    // Pushes applied on the restarted shard: 40 from the checkpoint, 46..60, and 45's WRITEs sent after the kill.
    ASSERT_GE(w, kCheckpointAfter + (kSteps - kKilledDuring))
        << "shard 1 lost more than the steps after its checkpoint\n"
        << around_the_kill;
    ASSERT_LE(w, kCheckpointAfter + (kSteps - kKilledDuring) + 1) << "a push was applied twice";
  }
}

// The mechanism behind issue 26 (ATrainingLoopRidesOut... ended one push short in about 1 run in 10 under load), made
// deterministic: shard 1 is killed between two steps, with nothing of the worker in flight, and restarted from its
// checkpoint. The worker's session still looks logged in, but the target closed its connection. Every WRITE of the
// next step must reach the restarted shard: none of it can have been applied before, so none may be given up as
// "unanswered". Under load the step in flight at the kill of the test above had often finished on shard 1 before the
// kill landed (it returned ~1.08 s after the kill, without a login of its own), and the next step's first WRITEs
// were handed to the dead session and dropped.
TEST_F(ReconnectTest, ASessionClosedBetweenStepsLosesNoPushOfTheNextStep) {
  ASSERT_NO_FATAL_FAILURE(start(30));
  constexpr int kCheckpointAfter = 3, kStepsBeforeKill = 5;
  for (int step = 1; step <= kStepsBeforeKill; ++step) {
    ASSERT_TRUE(exchange_once().ok()) << "step " << step;
    if (step == kCheckpointAfter) {
      ASSERT_NO_FATAL_FAILURE(checkpoint(1));
    }
  }
  ASSERT_TRUE(local_.tgtd(1).kill9().ok());  // reaps it: its sockets are closed when this returns
  const Status restarted = local_.restart_shard(1);
  ASSERT_TRUE(restarted.ok()) << restarted.message();

  // The library's lines go where its caller says (set_log_sink; stderr by default,
  // tests/unit/contract/test_log.cpp).
  static std::mutex lines_mutex;
  static std::string lines;
  set_log_sink([](const char* line) {
    std::lock_guard lock(lines_mutex);
    lines += std::string(line) + "\n";
  });
  const Status s = exchange_once();
  set_log_sink(nullptr);
  const std::string logged = [] {
    std::lock_guard lock(lines_mutex);
    return lines;
  }();
  ASSERT_TRUE(s.ok()) << "the step after the restart: " << s.message();
  const LuQueueCounters c1 = cluster_->grad_queue_counters().value()[1];
  std::cout << "shard 1: " << recovery_of(c1) << "\n";
  EXPECT_EQ(c1.reconnects, 1u);
  // The user sees it without a debugger: one log line naming the shard and the LU, and the shard's counters.
  EXPECT_NE(logged.find("blockps: shard 'shard1' grad LU ("), std::string::npos) << logged;
  // With why: the restarted target closed the session.
  EXPECT_NE(logged.find("session lost and logged in again, the last time because the session was lost"),
            std::string::npos)
      << logged;
  EXPECT_NE(logged.find(" (1)\n"), std::string::npos) << logged;
  EXPECT_EQ(logged.find("shard 'shard0'"), std::string::npos) << "shard 0 needed no recovery: " << logged;
  EXPECT_GE(cluster_->recovery_counters().value()[1].reconnects, 1u);
  EXPECT_EQ(cluster_->recovery_counters().value()[0].reconnects, 0u);
  EXPECT_EQ(c1.unanswered_writes_dropped, 0u) << "a WRITE handed to a session the target had closed was given up";
  for (float w : weights_of(0)) ASSERT_EQ(w, kStepsBeforeKill + 1) << "shard 0 lost or doubled a push";
  for (float w : weights_of(1))
    ASSERT_EQ(w, kCheckpointAfter + 1) << "the checkpoint's pushes plus the step after the restart";
}

// The target drops the worker's sessions (as a broken network would) while the loop pushes: each is logged in
// again, and no push is applied twice: a shard's weights end between the pushes acknowledged and those minus the
// WRITEs the transport gave up because their answer was lost.
TEST_F(ReconnectTest, SessionsDroppedByTheTargetAreReinstatedAndNoPushIsAppliedTwice) {
  ASSERT_NO_FATAL_FAILURE(start(30));
  constexpr std::uint64_t kReconnects = 3;  // the loop runs until shard 1's grad session came back this often
  std::atomic<bool> done{false};
  std::atomic<int> drops{0};
  std::thread network([&] {
    // Close every connection of shard 1's target, a few times, while the loop runs.
    while (!done) {
      std::this_thread::sleep_for(150ms);
      const CommandResult shown = local_.tgtd(1).tgtadm({"--lld", "iscsi", "--op", "show", "--mode", "target"});
      static const std::regex nexus(R"(I_T nexus: (\d+))");
      for (auto it = std::sregex_iterator(shown.output.begin(), shown.output.end(), nexus);
           it != std::sregex_iterator(); ++it) {
        const CommandResult r = local_.tgtd(1).tgtadm({"--lld", "iscsi", "--op", "delete", "--mode", "conn", "--tid",
                                                       "1", "--sid", (*it)[1].str(), "--cid", "0"});
        if (r.exit_code == 0) ++drops;
      }
    }
  });
  const auto deadline = Clock::now() + 120s;
  int steps = 0;
  Status failed = Status::Ok();
  LuQueueCounters c1;
  while (failed.ok() && c1.reconnects < kReconnects && Clock::now() < deadline) {
    failed = exchange_once();
    if (failed.ok()) ++steps;
    c1 = cluster_->grad_queue_counters().value()[1];
  }
  done = true;
  network.join();
  ASSERT_TRUE(failed.ok()) << "step " << steps + 1 << ": " << failed.message();
  ASSERT_GT(drops.load(), 0) << "the test dropped no connection: tgtadm --mode conn --op delete did not work";
  ASSERT_GE(c1.reconnects, kReconnects) << "shard 1's grad session was not logged in again " << kReconnects
                                        << " times in 120 s (" << drops << " connections dropped)";
  const int kSteps = steps;
  std::cout << drops << " connections dropped; shard 1: " << c1.reconnects << " reconnects, "
            << c1.unanswered_writes_dropped << " WRITEs given up\n";
  for (float w : weights_of(0)) ASSERT_EQ(w, kSteps);
  for (float w : weights_of(1)) {
    ASSERT_LE(w, kSteps) << "a push was applied twice";
    ASSERT_GE(w, kSteps - static_cast<double>(c1.unanswered_writes_dropped)) << "a push acknowledged was lost";
  }
}

// The case where a push may have been applied although its answer never came: shard 1's tgtd is stopped
// (SIGSTOP) with the exchange's WRITEs in its socket, the worker gives its session up after timeout_s, and the
// tgtd resumes: it reads and applies those WRITEs, and its answers go nowhere. The transport must not send them
// again on the new session: every weight of shard 1 stays at most the number of steps.
TEST_F(ReconnectTest, APushWhoseAnswerWasLostIsNotSentAgain) {
  ASSERT_NO_FATAL_FAILURE(start(30, "timeout_s = 1\n"));
  constexpr int kSteps = 5;
  for (int step = 1; step < kSteps; ++step) ASSERT_TRUE(exchange_once().ok());
  const pid_t tgtd = local_.tgtd(1).pid();
  ASSERT_EQ(::kill(tgtd, SIGSTOP), 0);
  Operation op = cluster_->exchange_async(std::as_bytes(std::span<const float>(ones_)), back_);
  // Well past timeout_s (also on a loaded machine): the session is given up, a login attempt waits.
  std::this_thread::sleep_for(4s);
  ASSERT_EQ(::kill(tgtd, SIGCONT), 0);
  const Status s = op.wait();
  ASSERT_TRUE(s.ok()) << s.message();
  const LuQueueCounters c1 = cluster_->grad_queue_counters().value()[1];
  EXPECT_GE(c1.reconnects, 1u);
  EXPECT_GE(c1.unanswered_writes_dropped, 1u);
  std::cout << "shard 1: " << c1.reconnects << " reconnects, " << c1.unanswered_writes_dropped << " WRITEs given up\n";
  float highest = 0;
  for (float w : weights_of(1)) highest = std::max(highest, w);
  EXPECT_LE(highest, kSteps) << "a push was applied twice";
  for (float w : weights_of(0)) ASSERT_EQ(w, kSteps);
}

// A shard that does not come back: the step fails after reconnect_s, naming the shard, with its own code in C++
// and C; when the shard is back, the next step works without reopening the cluster.
TEST_F(ReconnectTest, AShardThatStaysAwayFailsTheStepAfterReconnectSNamingIt) {
  ASSERT_NO_FATAL_FAILURE(start(2));
  ASSERT_TRUE(exchange_once().ok());
  ASSERT_TRUE(local_.tgtd(1).kill9().ok());
  const auto killed_at = Clock::now();
  const Status s = exchange_once();
  const double waited = std::chrono::duration<double>(Clock::now() - killed_at).count();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::unreachable) << s.message();
  EXPECT_NE(s.message().find("shard 'shard1' grad LU"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("reconnect_s"), std::string::npos) << s.message();
  EXPECT_GE(waited, 1.5) << "gave up before reconnect_s";
  EXPECT_LT(waited, 30) << "kept trying long past reconnect_s";
  std::cout << "gave up after " << waited << " s: " << s.message() << "\n";

  ASSERT_TRUE(local_.restart_shard(1).ok());
  const Status again = exchange_once();
  EXPECT_TRUE(again.ok()) << "after the shard came back: " << again.message();
}

TEST_F(ReconnectTest, TheCApiSaysUnreachable) {
  ASSERT_NO_FATAL_FAILURE(start(1));
  blockps_cluster* c = nullptr;
  ASSERT_EQ(blockps_cluster_open(local_.cluster_file().c_str(), &c), BLOCKPS_OK) << blockps_last_error();
  std::vector<float> w(kModelBytes / sizeof(float));
  ASSERT_TRUE(local_.tgtd(1).kill9().ok());
  const blockps_result r = blockps_pull(c, w.data(), kModelBytes);
  EXPECT_EQ(r, BLOCKPS_ERR_UNREACHABLE) << blockps_result_name(r) << ": " << blockps_last_error();
  EXPECT_STREQ(blockps_result_name(r), "BLOCKPS_ERR_UNREACHABLE");
  EXPECT_NE(std::string(blockps_last_error()).find("shard 'shard1'"), std::string::npos) << blockps_last_error();
  blockps_cluster_close(c);
}

#ifdef BLOCKPS_PYTHON_DIR
// Python raises blockps.ShardUnreachableError, a blockps.Error. The script kills shard 1's tgtd itself after the
// cluster opened (the pid is its argument), so the pull meets a dead shard.
TEST_F(ReconnectTest, PythonRaisesShardUnreachableError) {
  ASSERT_NO_FATAL_FAILURE(start(1));
  const std::string script = R"(
import os, signal, sys
import numpy as np
import blockps
c = blockps.Cluster(sys.argv[1])
assert issubclass(blockps.ShardUnreachableError, blockps.Error)
os.kill(int(sys.argv[2]), signal.SIGKILL)
try:
    c.pull(np.empty(c.elements, np.float32))
except blockps.ShardUnreachableError as e:
    assert "shard 'shard1'" in str(e), str(e)
    print("raised ShardUnreachableError:", e)
    sys.exit(0)
print("no ShardUnreachableError")
sys.exit(1)
)";
  const CommandResult r = run_command({"/usr/bin/env", std::string("PYTHONPATH=") + BLOCKPS_PYTHON_DIR, BLOCKPS_PYTHON,
                                       "-c", script, local_.cluster_file(), std::to_string(local_.tgtd(1).pid())},
                                      {.timeout = std::chrono::milliseconds(60000), .cwd = {}});
  (void)local_.tgtd(1).kill9();  // reap the tgtd the script killed
  EXPECT_TRUE(r.ok()) << r.describe();
  EXPECT_NE(r.output.find("raised ShardUnreachableError"), std::string::npos) << r.output;
}
#else
TEST_F(ReconnectTest, PythonRaisesShardUnreachableError) {
  GTEST_SKIP() << "PYTHON BINDING TEST SKIPPED: the package was not built (pybind11-dev missing at configure time)";
}
#endif

}  // namespace
}  // namespace blockps::testing
