// Shards and workers as separate hosts: each PS host and each worker host is its own network namespace, all
// joined by veth links to a bridge in a "switch" namespace (created and removed by the test). Each shard's
// tgtd runs inside its host's namespace; each worker opens its Cluster from a thread that has entered its own
// namespace (a thread's network namespace is its own, and the sockets and I/O threads it creates stay there),
// and pushes and pulls through the libiscsi transport over the veth links: a model spanning both shards,
// pushed by 2 worker hosts at once with opt=sum, pulls back as exactly init + the sum of their gradients.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <condition_variable>
#include <cstring>
#include <fstream>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "blockps/cluster.h"
#include "tests/support/netns_hosts.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tgtd_instance.h"

namespace blockps::testing {
namespace {

constexpr std::uint64_t K = 1024;
constexpr int kShardHosts = 2;
constexpr int kWorkerHosts = 2;

std::string shard_iqn(int s) { return "iqn.2026-11.io.blockps:netns-shard" + std::to_string(s); }

std::vector<float> whole_numbers(std::size_t n, int seed) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = static_cast<float>(static_cast<int>((i * 11 + static_cast<std::size_t>(seed) * 17) % 89) - 44);
  return v;
}

std::span<const std::byte> bytes_of(const std::vector<float>& v) { return std::as_bytes(std::span(v)); }

class NetnsClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string why = TgtdInstance::unavailable_reason(); !why.empty())
      GTEST_SKIP() << "INTEGRATION TEST SKIPPED: " << why;
    ASSERT_TRUE(TgtdInstance::blockps_module_installed()) << blockps_module_path() << " is missing";
    if (!run_command({"ip", "netns", "list"}).ok()) GTEST_SKIP() << "INTEGRATION TEST SKIPPED: no `ip netns` here";
    ASSERT_TRUE(dir_.create("blockps-client-netns-").ok());
    Status s = hosts_.add_switch();
    ASSERT_TRUE(s.ok()) << s.message();
    for (int h = 0; h < kShardHosts; ++h) {
      s = hosts_.add_host("ps" + std::to_string(h), 10 + h);
      ASSERT_TRUE(s.ok()) << s.message();
      ps_threads_.push_back(std::make_unique<HostThread>("ps" + std::to_string(h)));
    }
    for (int w = 0; w < kWorkerHosts; ++w) {
      s = hosts_.add_host("worker" + std::to_string(w), 20 + w);
      ASSERT_TRUE(s.ok()) << s.message();
    }
  }
  void TearDown() override {
    for (int h = 0; h < kShardHosts; ++h) {
      if (!tgtd_[h].running()) continue;
      if (HasFailure()) std::cerr << "---- tgtd log of ps" << h << " ----\n" << tgtd_[h].log_text() << "\n";
      // From its namespace, where its control socket answers (from elsewhere stop() would wait, then SIGKILL).
      (void)ps_threads_[static_cast<std::size_t>(h)]->run([&] { return tgtd_[h].stop(); });
    }
  }

  Hosts hosts_;  // declared first: removed last, after every tgtd has stopped
  TempDir dir_;
  std::vector<std::unique_ptr<HostThread>> ps_threads_;  // outlive the tgtds they started
  TgtdInstance tgtd_[kShardHosts];
};

TEST_F(NetnsClientTest, WorkersOnOtherHostsPushAndPullAcrossAllShards) {
  const std::uint64_t size = 2048 * K, block = 256 * K;
  const auto layout = make_layout(LayoutKind::stripe, size, block, kShardHosts);
  std::string shards_toml;
  for (int h = 0; h < kShardHosts; ++h) {
    TgtdOptions options;
    options.address = Hosts::address(10 + h);
    // tgtd's control socket is in its namespace too: every tgtadm call runs from there.
    const Status made = ps_threads_[static_cast<std::size_t>(h)]->run([&] {
      if (Status st = tgtd_[h].start(options); !st.ok()) return st;
      if (const CommandResult t = tgtd_[h].add_target(1, shard_iqn(h)); !t.ok()) return Status::Error(t.describe());
      const std::string ckpt = dir_.path("shard" + std::to_string(h) + ".ckpt");
      const std::string shape = "size=" + std::to_string(layout->shard_bytes(static_cast<std::size_t>(h))) +
                                ";block=" + std::to_string(block) + ";opt=sum";
      const std::pair<int, std::string> lus[] = {{1, "role=grad;" + shape}, {2, "role=weights"}, {3, "role=status"}};
      for (const auto& [lun, bsopts] : lus) {
        if (const CommandResult r = tgtd_[h].add_lu(1, lun, ckpt, "blockps", bsopts); !r.ok())
          return Status::Error(r.describe());
      }
      return Status::Ok();
    });
    ASSERT_TRUE(made.ok()) << made.message();
    shards_toml += "[[shard]]\nname = \"ps" + std::to_string(h) + "\"\n";
    for (const auto& [role, lun] : {std::pair{"grad", 1}, std::pair{"weights", 2}, std::pair{"status", 3}})
      shards_toml += std::string(role) + " = \"" + tgtd_[h].url(shard_iqn(h), lun) + "\"\n";
  }
  auto cluster_file = [&](int w) {
    const std::string path = dir_.path("worker" + std::to_string(w) + ".toml");
    std::ofstream(path) << "[model]\nsize = \"2M\"\nblock = \"256K\"\n[client]\ninitiator = "
                           "\"iqn.2026-11.io.blockps:netns-worker"
                        << w << "\"\nqueue_depth = 8\n"
                        << shards_toml;
    return path;
  };

  // The shards cannot be reached from the test's own namespace: only through the links.
  EXPECT_FALSE(Cluster::open(cluster_file(0)).ok());

  const std::size_t n = size / 4;
  const auto init = whole_numbers(n, 1);
  constexpr int kRounds = 3;
  std::vector<std::unique_ptr<Cluster>> workers(kWorkerHosts);
  for (int w = 0; w < kWorkerHosts; ++w) {
    const Status s = Hosts::run_in("worker" + std::to_string(w), [&] {
      auto c = Cluster::open(cluster_file(w));
      if (!c.ok()) return c.status();
      workers[static_cast<std::size_t>(w)] = std::move(c.value());
      return Status::Ok();
    });
    ASSERT_TRUE(s.ok()) << s.message();
  }
  ASSERT_TRUE(workers[0]->write_weights(bytes_of(init)).ok());
  // Both worker hosts push at once; their I/O threads live in their namespaces.
  std::vector<std::vector<float>> grads;
  for (int w = 0; w < kWorkerHosts; ++w) grads.push_back(whole_numbers(n, 50 + w));
  std::vector<Operation> in_flight;
  for (int r = 0; r < kRounds; ++r)
    for (int w = 0; w < kWorkerHosts; ++w)
      in_flight.push_back(
          workers[static_cast<std::size_t>(w)]->push_async(bytes_of(grads[static_cast<std::size_t>(w)])));
  for (const Operation& op : in_flight) {
    const Status s = op.wait();
    ASSERT_TRUE(s.ok()) << s.message();
  }
  std::vector<float> expected = init;
  for (const auto& g : grads)
    for (std::size_t i = 0; i < n; ++i) expected[i] += kRounds * g[i];
  for (int w = 0; w < kWorkerHosts; ++w) {
    std::vector<float> pulled(n);
    const Status s = workers[static_cast<std::size_t>(w)]->pull(std::as_writable_bytes(std::span(pulled)));
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(pulled, expected) << "worker " << w;
  }
}

}  // namespace
}  // namespace blockps::testing
