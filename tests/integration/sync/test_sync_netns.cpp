// mode=sync with the PS and the workers on separate hosts (network namespaces joined by a bridge): each worker
// is a separate blockps_lu_io process in its own namespace, training in rounds (push, then pull). Mid-training
// one worker's link is taken down (a pulled cable: no FIN, no RST). The other worker must keep training: every
// round closes within straggler_ms plus a margin, NOP-In ends the dead session and the shard drops the worker.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <future>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "client/transport/iscsi_lun.h"
#include "tests/support/blockps_shard.h"
#include "tests/support/netns_hosts.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tgtd_instance.h"

namespace blockps::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr const char* kTarget = "iqn.2026-11.io.blockps:sync-netns";
constexpr int kStragglerMs = 800;

class SyncNetnsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    BLOCKPS_REQUIRE_TGTD_AND_MODULE();
    if (!run_command({"ip", "netns", "list"}).ok()) GTEST_SKIP() << "INTEGRATION TEST SKIPPED: no `ip netns` here";
    ASSERT_TRUE(dir_.create("blockps-sync-netns-").ok());
    Status s = hosts_.add_switch();
    ASSERT_TRUE(s.ok()) << s.message();
    s = hosts_.add_host("ps", 10);
    ASSERT_TRUE(s.ok()) << s.message();
    ps_ = std::make_unique<HostThread>("ps");
    for (int w = 0; w < 2; ++w) {
      s = hosts_.add_host(std::string("w").append(std::to_string(w)), 20 + w);
      ASSERT_TRUE(s.ok()) << s.message();
    }
  }
  void TearDown() override {
    if (ps_ && tgtd_.running()) {
      if (HasFailure()) std::cerr << "---- tgtd log ----\n" << tail_of(tgtd_.log_text(), 6000) << "\n";
      (void)ps_->run([&] { return tgtd_.stop(); });
    }
  }

  // The status page, read from the PS host's namespace.
  nlohmann::json status_page() {
    nlohmann::json page;
    (void)ps_->run([&] {
      IscsiLun status;
      if (Status s = status.connect(tgtd_.url(kTarget, 3), "iqn.2026-11.io.blockps:sync-netns-status"); !s.ok())
        return s;
      std::vector<std::byte> raw(1 << 20);
      if (!status.read(0, raw).ok()) return Status::Error("status read failed");
      page = nlohmann::json::parse(reinterpret_cast<const char*>(raw.data()));
      return Status::Ok();
    });
    return page;
  }

  // A worker process in host `name`'s namespace: `rounds` rounds of push + pull of the whole grad LU.
  std::future<CommandResult> start_worker(const std::string& name, int rounds) {
    const std::string pid_file = dir_.path(name + ".pid");
    return std::async(std::launch::async, [=, this] {
      RunOptions limit;
      limit.timeout = 90s;
      return run_command({"bash", "-c",
                          "echo $$ > " + pid_file + "; exec ip netns exec " + Hosts::prefix() + name +
                              " env BLOCKPS_INITIATOR_IQN=iqn.2026-11.io.blockps:sync-netns-" + name + " " +
                              BLOCKPS_LU_IO + " " + tgtd_.url(kTarget, 1) + " rounds 0 4M " +
                              std::to_string(name.back() - '0' + 1) + " " + std::to_string(rounds)},
                         limit);
    });
  }

  void kill_worker(const std::string& name) {
    pid_t pid = 0;
    if (std::istringstream(read_text_file(dir_.path(name + ".pid"))) >> pid && pid > 0) ::kill(pid, SIGKILL);
  }

  Hosts hosts_;  // first: removed last
  TempDir dir_;
  std::unique_ptr<HostThread> ps_;
  TgtdInstance tgtd_;
};

TEST_F(SyncNetnsTest, AWorkerWhoseLinkGoesDownDoesNotStopTheOther) {
  TgtdOptions options;
  options.address = Hosts::address(10);
  const Status made = ps_->run([&] {
    if (Status s = tgtd_.start(options); !s.ok()) return s;
    const std::string sync = "size=4M;block=256K;opt=sgd;lr=0.001;mode=sync;workers=2;min_workers=1;straggler_ms=" +
                             std::to_string(kStragglerMs) + ";worker_timeout_ms=30000";
    if (Status s = add_blockps_shard(tgtd_, 1, kTarget, dir_.path("m.ckpt"), sync); !s.ok()) return s;
    // NOP-In every second, the session ends after 2 unanswered (what configs' blockps-nop-in sets).
    for (const char* p : {"nop_interval=1", "nop_count=2"}) {
      const std::string kv = p;
      const CommandResult r = tgtd_.tgtadm({"--op", "update", "--mode", "target", "--tid", "1", "-n",
                                            kv.substr(0, kv.find('=')), "-v", kv.substr(kv.find('=') + 1)});
      if (!r.ok()) return Status::Error(r.describe());
    }
    return Status::Ok();
  });
  ASSERT_TRUE(made.ok()) << made.message();

  auto w1 = start_worker("w1", 100000);
  auto w0 = start_worker("w0", 40);
  const auto both_by = Clock::now() + 30s;
  for (;;) {
    const auto s = status_page();
    if (!s.is_null() && s["rounds"]["live_workers"].size() == 2 && s["rounds"]["rounds_min"] >= 3) break;
    ASSERT_LT(Clock::now(), both_by) << "the two workers did not train together: " << s.dump();
    std::this_thread::sleep_for(100ms);
  }
  ASSERT_TRUE(hosts_.set_link("w1", 21, false).ok());

  ASSERT_EQ(w0.wait_for(80s), std::future_status::ready) << "worker w0 hung after w1's link went down";
  const CommandResult r0 = w0.get();
  ASSERT_TRUE(r0.ok()) << r0.describe();
  // Every round of w0 closed within straggler_ms plus a margin, and at least one waited for the straggler
  // (the link really went down while w0 trained).
  std::istringstream lines(r0.output);
  std::string word;
  int rounds = 0, index = 0, ms = 0, slowest = 0;
  while (lines >> word >> index >> ms) {
    if (word != "round") continue;
    ++rounds;
    slowest = std::max(slowest, ms);
    EXPECT_LT(ms, kStragglerMs + 1500) << "round " << index << " of w0 took " << ms << " ms";
  }
  EXPECT_EQ(rounds, 40) << r0.output;
  EXPECT_GE(slowest, kStragglerMs - 100) << "no round waited for the straggler: was the link down?";

  const auto dropped_by = Clock::now() + 15s;
  for (;;) {
    const auto s = status_page();
    if (!s.is_null() && s["rounds"]["workers_dropped"] >= 1 && s["rounds"]["live_workers"].size() <= 1) break;
    ASSERT_LT(Clock::now(), dropped_by) << "NOP-In never ended w1's session: " << s.dump();
    std::this_thread::sleep_for(200ms);
  }
  kill_worker("w1");
  (void)w1.wait_for(20s);
}

}  // namespace
}  // namespace blockps::testing
