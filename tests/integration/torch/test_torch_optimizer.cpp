// blockps.torch.DistributedOptimizer (client/python/blockps/torch/optimizer.py) against real shards: the gradients
// it pushes during backward are backward's, bit for bit (f32 wire; bf16 rounded as the wire rounds; through the
// staging path CUDA parameters take); one worker trains as torch.optim does, step for step (sgd, momentum,
// adam); two torchrun ranks on sync shards end with the same parameters and BatchNorm buffers; a rank killed
// mid-run does not hang the other; a dead shard's error names it and the parameters; early_forward trains the
// same, bit for bit. The checks are in torch_optimizer_check.py; each test starts its own shards.
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

class TorchOptimizerTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (HasFailure()) std::cerr << local_.logs();
  }
  // 2 shards, 128 KiB model in 8 KiB blocks: the small CNN's parameters span several blocks, so buckets of one
  // block are sent while backward still runs.
  void start(const std::string& shard_options, const std::string& dtype = "f32", const std::string& client = {}) {
    start_cluster(local_, shard_options, dtype, client);
  }
  static void start_cluster(LocalCluster& cluster, const std::string& shard_options, const std::string& dtype = "f32",
                            const std::string& client = {}) {
    const Status s = cluster.start({.model_bytes = 128 * K,
                                    .block_bytes = 8 * K,
                                    .shards = 2,
                                    .dtype = dtype,
                                    .shard_options = "dtype=" + dtype + ";" + shard_options,
                                    .client_options = client},
                                   "blockps-torch-opt-");
    ASSERT_TRUE(s.ok()) << s.message();
  }
  // The check script in `mode` with `args` after it; its output must say every check passed.
  void run_check(std::vector<std::string> args, std::chrono::milliseconds timeout = std::chrono::seconds(120)) {
    std::vector<std::string> command{"/usr/bin/env",      std::string("PYTHONPATH=") + BLOCKPS_PYTHON_DIR,
                                     "OMP_NUM_THREADS=1", kEveryRankAWorker,
                                     BLOCKPS_PYTHON,      BLOCKPS_TORCH_CHECK};
    command.insert(command.end(), args.begin(), args.end());
    const CommandResult r = run_command(command, {.timeout = timeout, .cwd = {}});
    EXPECT_TRUE(r.ok()) << r.describe();
    EXPECT_NE(r.output.find("every check passed"), std::string::npos) << r.output;
  }
  // torchrun's 2 ranks of the check script's `worker` mode, 8 steps on `cluster_file`, `extra` after it; each rank
  // saves its state as OUT.rankR.pt.
  static void run_torchrun_workers(const std::string& cluster_file, const std::string& out,
                                   const std::vector<std::string>& extra = {}) {
    std::vector<std::string> command{"/usr/bin/env", std::string("PYTHONPATH=") + BLOCKPS_PYTHON_DIR,
                                     "OMP_NUM_THREADS=1", kEveryRankAWorker};
    const std::vector<std::string> torchrun = torchrun_command(BLOCKPS_TORCHRUN, 2);
    ASSERT_FALSE(torchrun.empty()) << "no free loopback port for torchrun's rendezvous";
    command.insert(command.end(), torchrun.begin(), torchrun.end());
    command.insert(command.end(), {BLOCKPS_TORCH_CHECK, "worker", cluster_file, out, "8"});
    command.insert(command.end(), extra.begin(), extra.end());
    const CommandResult r = run_command(command, {.timeout = std::chrono::seconds(180), .cwd = {}});
    ASSERT_TRUE(r.ok()) << r.describe();
  }
  // Shard 1's tgtd killed by the check script between two steps; `extra` after the shard-down mode's arguments.
  void run_shard_down(const std::vector<std::string>& extra = {}) {
    ASSERT_NO_FATAL_FAILURE(start("opt=sum", "f32", "reconnect_s = 0\n"));
    std::vector<std::string> args{"shard-down", local_.cluster_file(), std::to_string(local_.tgtd(1).pid())};
    args.insert(args.end(), extra.begin(), extra.end());
    run_check(args);
    (void)local_.tgtd(1).kill9();  // reap the tgtd the script killed
  }
  LocalCluster local_;
};

TEST_F(TorchOptimizerTest, PushedGradientsAreBackwardsBitForBit) {
  ASSERT_NO_FATAL_FAILURE(start("opt=sum"));
  run_check({"exact", local_.cluster_file()});
}

TEST_F(TorchOptimizerTest, StagingPathPushesTheSameGradients) {
  ASSERT_NO_FATAL_FAILURE(start("opt=sum"));
  run_check({"exact", local_.cluster_file(), "--staging"});
}

TEST_F(TorchOptimizerTest, Bf16WireRoundsAsTheWireDoes) {
  ASSERT_NO_FATAL_FAILURE(start("opt=sum", "bf16"));
  run_check({"exact", local_.cluster_file(), "--wire", "bf16"});
}

// compress=sign1 after one warm-up round (issue 50): the warm-up step adds the f32 gradient, the later ones what the
// shards decode from the worker's compressed push with its error feedback, bit for bit; the direct and staging paths.
TEST_F(TorchOptimizerTest, CompressedPushesAddWhatTheShardsDecodeAfterTheWarmUp) {
  ASSERT_NO_FATAL_FAILURE(start("opt=sum;mode=sync;workers=1;compress=sign1;compress_after=1"));
  run_check({"compressed", local_.cluster_file()});
}

TEST_F(TorchOptimizerTest, OneWorkerMatchesTorchOptimSgd) {
  ASSERT_NO_FATAL_FAILURE(start("opt=sgd;lr=0.1;weight_decay=0.01"));
  run_check({"match", local_.cluster_file(), "sgd"});
}

TEST_F(TorchOptimizerTest, OneWorkerMatchesTorchOptimMomentum) {
  ASSERT_NO_FATAL_FAILURE(start("opt=momentum;lr=0.05;momentum=0.9"));
  run_check({"match", local_.cluster_file(), "momentum"});
}

TEST_F(TorchOptimizerTest, OneWorkerMatchesTorchOptimAdam) {
  ASSERT_NO_FATAL_FAILURE(start("opt=adam;lr=0.01"));
  run_check({"match", local_.cluster_file(), "adam"});
}

// torchrun starts 2 ranks; each trains on its own data through sync shards; at the end both hold the same
// parameters (the same rounds' averages) and rank 0's BatchNorm statistics.
TEST_F(TorchOptimizerTest, TorchrunRanksEndWithTheSameParametersAndBuffers) {
  ASSERT_NO_FATAL_FAILURE(start("opt=adam;lr=0.01;mode=sync;workers=2"));
  const std::string out = local_.cluster_file() + ".state";
  ASSERT_NO_FATAL_FAILURE(run_torchrun_workers(local_.cluster_file(), out));
  run_check({"compare", out, "2"});
}

// The same with early_forward (the next forward starts before the pulls end; rank 1 reads rank 0's buffers on a
// thread of its own): both ranks agree, and end where the same run without it ends, bit for bit (its own shards,
// as Adam's state stays on them).
TEST_F(TorchOptimizerTest, TorchrunRanksWithEarlyForwardEndAsWithout) {
  const std::string shards = "opt=adam;lr=0.01;mode=sync;workers=2";
  ASSERT_NO_FATAL_FAILURE(start(shards));
  LocalCluster plain;
  ASSERT_NO_FATAL_FAILURE(start_cluster(plain, shards));
  const std::string out = local_.cluster_file() + ".early";
  const std::string plain_out = plain.cluster_file() + ".plain";
  ASSERT_NO_FATAL_FAILURE(run_torchrun_workers(local_.cluster_file(), out, {"--early-forward"}));
  ASSERT_NO_FATAL_FAILURE(run_torchrun_workers(plain.cluster_file(), plain_out));
  run_check({"compare", out, "2", "--same-as", plain_out});
  if (HasFailure()) std::cerr << plain.logs();
}

// One worker on sgd shards (no optimizer state, so two runs from the same start meet the same math): the same
// steps with and without early_forward give the same losses, parameters and buffers after every forward, bit for
// bit, and step() returned while exchanges ran. The direct path and the staging (CUDA's) path.
TEST_F(TorchOptimizerTest, EarlyForwardTrainsTheSameBitForBit) {
  ASSERT_NO_FATAL_FAILURE(start("opt=sgd;lr=0.1;weight_decay=0.01"));
  run_check({"early-forward", local_.cluster_file()});
}

// Rank 1 is killed (SIGKILL) before its 4th step; rank 0 goes on alone (min_workers=1: its session's end drops
// rank 1 from the rounds) and finishes. Launched without torchrun, whose agent would stop rank 0 as well.
TEST_F(TorchOptimizerTest, KilledRankDoesNotHangTheOther) {
  ASSERT_NO_FATAL_FAILURE(start("opt=adam;lr=0.01;mode=sync;workers=2;min_workers=1"));
  const std::string out = local_.cluster_file() + ".state";
  const int port = free_loopback_port();
  ASSERT_NE(port, 0);
  const std::string env = std::string("PYTHONPATH=") + BLOCKPS_PYTHON_DIR + " OMP_NUM_THREADS=1 " +
                          std::string(kEveryRankAWorker) +
                          " WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port);
  const std::string worker = std::string(BLOCKPS_PYTHON) + " " + BLOCKPS_TORCH_CHECK + " worker " +
                             local_.cluster_file() + " " + out + " 10 --die-after 3";
  const auto begin = std::chrono::steady_clock::now();
  const CommandResult r = run_command(
      {"/bin/bash", "-c",
       "env " + env + " RANK=1 " + worker + " & env " + env + " RANK=0 " + worker + "; rc=$?; wait; exit $rc"},
      {.timeout = std::chrono::seconds(180), .cwd = {}});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  EXPECT_TRUE(r.ok()) << r.describe();
  EXPECT_NE(r.output.find("rank 1 dies before step 3"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rank 0: 10 steps done"), std::string::npos) << r.output;
  std::cout << "rank 0 finished 10 steps " << seconds << " s after start, rank 1 killed before step 3\n";
}

TEST_F(TorchOptimizerTest, DeadShardErrorNamesTheShardAndTheParameters) { run_shard_down(); }
// With early_forward, step() returns before the pulls end: the next forward's pre-hook, or wait_for_weights(),
// raises the same error.
TEST_F(TorchOptimizerTest, DeadShardErrorWithEarlyForwardComesFromTheNextForward) {
  run_shard_down({"--early-forward", "forward"});
}
TEST_F(TorchOptimizerTest, DeadShardErrorWithEarlyForwardComesFromWaitForWeights) {
  run_shard_down({"--early-forward", "wait"});
}
// Wrong inputs (a model larger than the cluster's, init=, backward_passes_per_step=0, another lr, the wrong
// number of checkpoint files, an optimizer the shards do not run) get a ValueError naming the
// problem; nothing reaches the shards' files, and the shards still train afterwards.
TEST_F(TorchOptimizerTest, WrongInputsAreRefusedWithTheirReason) {
  ASSERT_NO_FATAL_FAILURE(start("opt=adam;lr=0.01"));
  run_check({"bad-input", local_.cluster_file(), local_.cluster_file() + ".bad", local_.checkpoint_path(0),
             local_.checkpoint_path(1)});
}
// What DistributedOptimizer cannot do (param groups with their own hyper-parameters, an optimizer the shards do not
// run, Horovod's synchronize(), gradients changed between backward and step) is refused with the advice to use the
// DDP hook; plain steps raise nothing. The direct path and the staging (CUDA's) path.
TEST_F(TorchOptimizerTest, WhatItCannotDoIsRefusedPointingToTheDdpHook) {
  ASSERT_NO_FATAL_FAILURE(start("opt=adam;lr=0.01"));
  run_check({"cannot", local_.cluster_file()});
  run_check({"cannot", local_.cluster_file(), "--staging"});
}
// Train on adam shards, have them write their checkpoints, export a torch file; plain torch loads it and its next
// step matches the PS's. Then the other way: a torch checkpoint written as the shards' files, the shards
// restarted on them, and their next step matches torch's.
TEST_F(TorchOptimizerTest, TorchCheckpointRoundTrip) {
  ASSERT_NO_FATAL_FAILURE(start("opt=adam;lr=0.01"));
  const std::string out = local_.cluster_file() + ".torch";
  run_check({"checkpoint-export", local_.cluster_file(), out, local_.checkpoint_path(0), local_.checkpoint_path(1)});
  if (HasFailure()) return;
  for (int s = 0; s < 2; ++s) ASSERT_TRUE(local_.tgtd(s).kill9().ok());
  run_check({"checkpoint-import", local_.cluster_file(), out, local_.checkpoint_path(0), local_.checkpoint_path(1)});
  if (HasFailure()) return;
  for (int s = 0; s < 2; ++s) {
    const Status st = local_.restart_shard(s);
    ASSERT_TRUE(st.ok()) << st.message();
  }
  run_check({"checkpoint-resume", local_.cluster_file(), out});
}
#else
TEST(TorchOptimizerTest, Skipped) {
  GTEST_SKIP() << "TORCH OPTIMIZER TESTS SKIPPED: the Python package was not built (pybind11-dev missing at "
                  "configure time)";
}
#endif

}  // namespace
}  // namespace blockps::testing
