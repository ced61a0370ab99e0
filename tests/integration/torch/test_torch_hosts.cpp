// Hosts with several ranks (client/python/blockps/torch/host.py): the ranks of a host combine their gradients and
// the host's leader alone pushes and pulls, through real shards. 2 hosts x 2 ranks on this machine (BLOCKPS_HOST names
// each rank's host, as torchrun's node does on real hosts; one test runs two torchrun agents instead): the hook
// equals DDP over gloo within the sum order's rounding, DistributedOptimizer with aggregation equals it without,
// every shard sees one worker per host, a dead local rank fails its host naming it (the optimizer's other host
// trains on), shards whose rounds count ranks are refused, and a torchrun restart after a killed rank is exact.
// The checks are in host_check.py; each test starts its own shards.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "tests/support/local_cluster.h"
#include "tests/support/process.h"

namespace blockps::testing {
namespace {

#ifdef BLOCKPS_PYTHON_DIR
constexpr std::uint64_t K = 1024;
constexpr int kHosts = 2, kRanksPerHost = 2;

class TorchHostsTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (HasFailure()) std::cerr << averaging_.logs() << optimizer_.logs() << flat_.logs();
  }
  // 2 shards, a 64 KiB model in 4 KiB blocks (the check model's parameters span blocks on both shards). workers=
  // counts what pushes: hosts with aggregation, ranks without.
  static void start(LocalCluster& cluster, const std::string& shard_options, const char* prefix,
                    const std::string& dtype = "f32") {
    const Status s = cluster.start({.model_bytes = 64 * K,
                                    .block_bytes = 4 * K,
                                    .shards = 2,
                                    .dtype = dtype,
                                    .shard_options = "dtype=" + dtype + ";" + shard_options,
                                    .client_options = {}},
                                   prefix);
    ASSERT_TRUE(s.ok()) << s.message();
  }
  static std::string sync(int workers, int straggler_ms = 60000) {
    return "mode=sync;workers=" + std::to_string(workers) +
           ";min_workers=1;straggler_ms=" + std::to_string(straggler_ms);
  }
  static std::string momentum() { return "opt=momentum;lr=0.05;momentum=0.9;nesterov=0;weight_decay=0;"; }
  // host_check.py's launcher: kHosts x kRanksPerHost ranks of `args`; the output of all.
  static CommandResult spawn(const std::vector<std::string>& args, const std::vector<std::string>& env = {}) {
    std::vector<std::string> command{"/usr/bin/env",
                                     std::string("PYTHONPATH=") + BLOCKPS_PYTHON_DIR,
                                     BLOCKPS_PYTHON,
                                     BLOCKPS_HOST_CHECK,
                                     "spawn",
                                     "--hosts",
                                     std::to_string(kHosts),
                                     "--ranks-per-host",
                                     std::to_string(kRanksPerHost)};
    for (const std::string& setting : env) {
      command.push_back("--env");
      command.push_back(setting);
    }
    command.push_back("--");
    command.insert(command.end(), args.begin(), args.end());
    const CommandResult r = run_command(command, {.timeout = std::chrono::seconds(240), .cwd = {}});
    std::cout << r.output;
    return r;
  }
  static void expect_every_rank_passed(const CommandResult& r, const std::vector<int>& ranks) {
    EXPECT_TRUE(r.ok()) << r.describe();
    for (int rank : ranks)
      EXPECT_NE(r.output.find("rank " + std::to_string(rank) + ": every check passed"), std::string::npos)
          << "rank " << rank << ":\n"
          << r.output;
  }
  LocalCluster averaging_, optimizer_, flat_;
};

TEST_F(TorchHostsTest, TheHookOnTwoHostsOfTwoRanksTrainsAsDdpOverGlooWithinTheSumOrdersRounding) {
  ASSERT_NO_FATAL_FAILURE(start(averaging_, "opt=average;" + sync(kHosts), "blockps-hosts-hook-"));
  expect_every_rank_passed(spawn({"hook", averaging_.cluster_file()}), {0, 1, 2, 3});
}

TEST_F(TorchHostsTest, DistributedOptimizerWithHostAggregationEqualsItWithout) {
  ASSERT_NO_FATAL_FAILURE(start(optimizer_, momentum() + sync(kHosts), "blockps-hosts-opt-"));
  ASSERT_NO_FATAL_FAILURE(start(flat_, momentum() + sync(kHosts * kRanksPerHost), "blockps-hosts-flat-"));
  expect_every_rank_passed(spawn({"optimizer", optimizer_.cluster_file(), flat_.cluster_file()}), {0, 1, 2, 3});
}

// The same with early_forward on the host path (the leader's pulls shared with the host's ranks, each module's
// forward waiting for its own blocks, rank 0's buffers read after the step's first exchange): the same results.
TEST_F(TorchHostsTest, EarlyForwardWithHostAggregationEqualsTheFlatPath) {
  ASSERT_NO_FATAL_FAILURE(start(optimizer_, momentum() + sync(kHosts), "blockps-hosts-early-"));
  ASSERT_NO_FATAL_FAILURE(start(flat_, momentum() + sync(kHosts * kRanksPerHost), "blockps-hosts-eflat-"));
  expect_every_rank_passed(spawn({"optimizer", optimizer_.cluster_file(), flat_.cluster_file(), "--early-forward"}),
                           {0, 1, 2, 3});
}

// Ranks that disagree on host aggregation (one says host_aggregation=False), BLOCKPS_HOST_AGGREGATION=2,
// BLOCKPS_HOST_TIMEOUT_S=soon: each refused on every rank with what to change (not one side waiting for the other's
// collectives).
TEST_F(TorchHostsTest, WrongHostSettingsAreRefusedOnEveryRank) {
  ASSERT_NO_FATAL_FAILURE(start(optimizer_, momentum() + sync(kHosts), "blockps-hosts-wrong-"));
  expect_every_rank_passed(spawn({"wrong-settings", optimizer_.cluster_file()}), {0, 1, 2, 3});
}

// Where /dev/shm cannot hold the slots (here: BLOCKPS_HOST_SHM=0), the ranks combine over gloo: said on stderr,
// and the same results.
TEST_F(TorchHostsTest, WithoutSharedMemoryTheRanksCombineOverGlooWithTheSameResults) {
  ASSERT_NO_FATAL_FAILURE(start(optimizer_, momentum() + sync(kHosts), "blockps-hosts-gloo-"));
  ASSERT_NO_FATAL_FAILURE(start(flat_, momentum() + sync(kHosts * kRanksPerHost), "blockps-hosts-gloflat-"));
  const CommandResult r = spawn({"optimizer", optimizer_.cluster_file(), flat_.cluster_file()}, {"BLOCKPS_HOST_SHM=0"});
  expect_every_rank_passed(r, {0, 1, 2, 3});
  EXPECT_NE(r.output.find("BLOCKPS_HOST_SHM=0; its ranks combine over gloo"), std::string::npos) << r.output;
}

// The bf16 wire: each rank's gradient rounded to bf16, summed in f32 on its host, the scaled sum rounded to bf16
// for the push, the hosts' pushes averaged by the shards and rounded: bit for bit.
TEST_F(TorchHostsTest, TheBf16WireRoundsOncePerHostAsSaid) {
  ASSERT_NO_FATAL_FAILURE(start(averaging_, "opt=average;" + sync(kHosts), "blockps-hosts-bf16-", "bf16"));
  expect_every_rank_passed(spawn({"bf16", averaging_.cluster_file()}), {0, 1, 2, 3});
}

// Rank 3 (local rank 1 of host1) is killed before its 4th step: rank 2, its leader, fails that step with an error
// naming rank 3 and host1 (a reduction that lost its peer, not a hang); host0's ranks meet nobody after the start,
// so they train on: the shards close their rounds without host1 (straggler_ms, then its sessions are gone).
TEST_F(TorchHostsTest, ADeadLocalRankFailsItsHostNamingItAndTheOtherHostTrainsOn) {
  ASSERT_NO_FATAL_FAILURE(start(optimizer_, momentum() + sync(kHosts, 2000), "blockps-hosts-die-"));
  const auto begin = std::chrono::steady_clock::now();
  expect_every_rank_passed(spawn({"optimizer", optimizer_.cluster_file(), "--die", "3", "--steps", "8"}), {0, 1, 2});
  std::cout << "(" << std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count() << " s)\n";
}

// Rank 3 stops (SIGSTOP) instead: nothing closes, so its host's leader waits in the reduction until
// BLOCKPS_HOST_TIMEOUT_S (5 s here) and fails the step saying so, naming the host and its ranks, never a hang; host0
// trains on.
TEST_F(TorchHostsTest, AStoppedLocalRankFailsItsHostAfterTheTimeoutAndTheOtherHostTrainsOn) {
  ASSERT_NO_FATAL_FAILURE(start(optimizer_, momentum() + sync(kHosts, 2000), "blockps-hosts-stop-"));
  const auto begin = std::chrono::steady_clock::now();
  expect_every_rank_passed(spawn({"optimizer", optimizer_.cluster_file(), "--die", "3", "--stop", "--steps", "8"},
                                 {"BLOCKPS_HOST_TIMEOUT_S=5"}),
                           {0, 1, 2});
  std::cout << "(" << std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count() << " s)\n";
}

// The same death under DDP with the hook: rank 2 fails naming rank 3; host0's ranks end too, without a hang (DDP
// broadcasts rank 0's buffers over every rank each forward, which the dead rank breaks).
TEST_F(TorchHostsTest, ADeadLocalRankFailsTheHooksHostNamingIt) {
  ASSERT_NO_FATAL_FAILURE(start(averaging_, "opt=average;" + sync(kHosts, 2000), "blockps-hosts-hookdie-"));
  expect_every_rank_passed(spawn({"hook", averaging_.cluster_file(), "--die", "3"}), {0, 1, 2});
}

TEST_F(TorchHostsTest, ShardsWhoseRoundsCountRanksAreRefusedWhileTheHostsAggregate) {
  ASSERT_NO_FATAL_FAILURE(start(flat_, momentum() + sync(kHosts * kRanksPerHost), "blockps-hosts-refuse-"));
  expect_every_rank_passed(spawn({"too-many-workers", flat_.cluster_file()}), {0, 1, 2, 3});
}

// Two torchrun agents of one job (--nnodes 2, 2 ranks each): blockps finds the hosts from torchrun's nodes. Rank 3
// is killed in attempt 0; both agents restart their ranks and attempt 1 trains as DDP over gloo again: nothing of
// attempt 0 is left in the shards' rounds, and the hosts are found again.
TEST_F(TorchHostsTest, TwoTorchrunAgentsAreTwoHostsAndARestartAfterAKilledRankTrainsExactly) {
  ASSERT_NO_FATAL_FAILURE(start(averaging_, "opt=average;" + sync(kHosts), "blockps-hosts-torchrun-"));
  const int port = free_loopback_port();
  ASSERT_NE(port, 0) << "no free loopback port for torchrun's rendezvous";
  std::string script;
  for (int node = 0; node < kHosts; ++node) {
    const std::vector<std::string> torchrun = torchrun_node_command(
        BLOCKPS_TORCHRUN, {.port = port, .nodes = kHosts, .ranks_per_node = kRanksPerHost, .run_id = "hosts-test"}, 1);
    std::string line = "env PYTHONPATH=" + std::string(BLOCKPS_PYTHON_DIR) + " OMP_NUM_THREADS=1";
    for (const std::string& word : torchrun) line += " '" + word + "'";
    line += " '" + std::string(BLOCKPS_HOST_CHECK) + "' hook '" + averaging_.cluster_file() + "' --die-in-attempt-0 3";
    script += line + " & p" + std::to_string(node) + "=$!; ";
  }
  script += "wait $p0; a=$?; wait $p1; b=$?; exit $((a | b))";
  const CommandResult r = run_command({"/bin/bash", "-c", script}, {.timeout = std::chrono::seconds(300), .cwd = {}});
  std::cout << r.output;
  EXPECT_TRUE(r.ok()) << r.describe();
  for (int rank = 0; rank < kHosts * kRanksPerHost; ++rank)
    EXPECT_NE(r.output.find("rank " + std::to_string(rank) + " attempt 1: every check passed"), std::string::npos)
        << "rank " << rank << ":\n"
        << r.output;
}
#else
TEST(TorchHostsTest, Skipped) {
  GTEST_SKIP() << "HOST AGGREGATION TESTS SKIPPED: the Python package was not built (pybind11-dev missing at "
                  "configure time)";
}
#endif

}  // namespace
}  // namespace blockps::testing
