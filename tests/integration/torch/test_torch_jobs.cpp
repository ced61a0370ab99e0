// A shard serves one job at a time, in the place it holds (issue 36), through the torch paths: two torchrun jobs
// pointed at the same averaging shards (the second refused with the holder named, the first bit for bit equal to
// DDP over gloo), the same with DistributedOptimizer (the first job's weights untouched), a takeover when asked
// (the first job's next step fails naming the second), a cluster file in another order (both paths), and each
// path on the other kind of shard. The checks are in job_check.py; each test starts its own shards.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "tests/support/local_cluster.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"

namespace blockps::testing {
namespace {

#ifdef BLOCKPS_PYTHON_DIR
constexpr std::uint64_t K = 1024;

class TorchJobsTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (HasFailure()) std::cerr << local_.logs();
  }
  // 2 shards, a 64 KiB model in 4 KiB blocks (the check model's parameters span blocks on both shards).
  void start(const std::string& shard_options) {
    const Status made = dir_.create("blockps-torch-jobs-markers-");
    ASSERT_TRUE(made.ok()) << made.message();
    const Status s = local_.start({.model_bytes = 64 * K,
                                   .block_bytes = 4 * K,
                                   .shards = 2,
                                   .layout = LayoutKind::stripe,
                                   .dtype = "f32",
                                   .shard_options = shard_options,
                                   .client_options = {}},
                                  "blockps-torch-jobs-");
    ASSERT_TRUE(s.ok()) << s.message();
  }
  void start_averaging(int workers) {
    start("dtype=f32;opt=average;mode=sync;workers=" + std::to_string(workers) + ";min_workers=1;straggler_ms=60000");
  }
  // torchrun of job_check.py MODE CLUSTER DIR ARGS as one shell word list (the two jobs run side by side in bash).
  std::string torchrun_line(int ranks, const std::vector<std::string>& args) {
    std::vector<std::string> command = torchrun_command(BLOCKPS_TORCHRUN, ranks);
    if (command.empty()) return {};
    std::string line = "env PYTHONPATH=" + std::string(BLOCKPS_PYTHON_DIR) + " OMP_NUM_THREADS=1 " + kEveryRankAWorker;
    for (const std::string& word : command) line += " '" + word + "'";
    line += " '" + std::string(BLOCKPS_JOB_CHECK) + "'";
    for (const std::string& word : args) line += " '" + word + "'";
    return line;
  }
  // Job A (the holder) and job B (the other one) at the same time; both must say every check passed.
  void two_jobs(const std::vector<std::string>& holder, int holder_ranks, const std::vector<std::string>& other,
                int other_ranks) {
    const std::string a = torchrun_line(holder_ranks, holder), b = torchrun_line(other_ranks, other);
    ASSERT_FALSE(a.empty() || b.empty()) << "no free loopback port for torchrun's rendezvous";
    const std::string script = a + " > " + dir_.path() + "/a.log 2>&1 & a=$!; " + b + " > " + dir_.path() +
                               "/b.log 2>&1; b=$?; wait $a; a_rc=$?; cat " + dir_.path() + "/a.log " + dir_.path() +
                               "/b.log; echo \"exit a=$a_rc b=$b\"; [ $a_rc = 0 ] && [ $b = 0 ]";
    const CommandResult r = run_command({"/bin/bash", "-c", script}, {.timeout = std::chrono::seconds(300), .cwd = {}});
    std::cout << r.output;
    EXPECT_TRUE(r.ok()) << r.describe();
    for (const std::string& job : {std::string("A"), std::string("B")}) {
      const int ranks = job == "A" ? holder_ranks : other_ranks;
      for (int rank = 0; rank < ranks; ++rank)
        EXPECT_NE(r.output.find("job " + job + " rank " + std::to_string(rank) + ": every check passed"),
                  std::string::npos)
            << "job " << job << " rank " << rank;
    }
  }
  // job_check.py in one process; it must say every check passed.
  void single(const std::vector<std::string>& args) {
    std::vector<std::string> command{"/usr/bin/env",      std::string("PYTHONPATH=") + BLOCKPS_PYTHON_DIR,
                                     "OMP_NUM_THREADS=1", kEveryRankAWorker,
                                     BLOCKPS_PYTHON,      BLOCKPS_JOB_CHECK};
    command.insert(command.end(), args.begin(), args.end());
    const CommandResult r = run_command(command, {.timeout = std::chrono::seconds(120), .cwd = {}});
    std::cout << r.output;
    EXPECT_TRUE(r.ok()) << r.describe();
    EXPECT_NE(r.output.find("every check passed"), std::string::npos) << r.output;
  }
  LocalCluster local_;
  TempDir dir_;  // the marker files through which the two jobs meet
};

TEST_F(TorchJobsTest, SecondHookJobIsRefusedAndTheFirstStaysExact) {
  ASSERT_NO_FATAL_FAILURE(start_averaging(2));
  two_jobs({"hook-holder", local_.cluster_file(), dir_.path(), "--job", "A"}, 2,
           {"hook-intruder", local_.cluster_file(), dir_.path(), "--job", "B"}, 2);
}

TEST_F(TorchJobsTest, SecondDistributedOptimizerJobLeavesTheWeightsAlone) {
  ASSERT_NO_FATAL_FAILURE(start("dtype=f32;opt=adam;lr=0.001;mode=async"));
  two_jobs({"opt-holder", local_.cluster_file(), dir_.path(), "--job", "A"}, 1,
           {"opt-intruder", local_.cluster_file(), dir_.path(), "--job", "B"}, 1);
}

TEST_F(TorchJobsTest, TakeoverWhenAskedAndTheOldJobIsToldWhy) {
  ASSERT_NO_FATAL_FAILURE(start_averaging(1));
  two_jobs({"hook-holder", local_.cluster_file(), dir_.path(), "--job", "A", "--expect-taken-over", "B"}, 1,
           {"hook-intruder", local_.cluster_file(), dir_.path(), "--job", "B", "--takeover"}, 1);
}

TEST_F(TorchJobsTest, HookRefusesAClusterFileInAnotherOrder) {
  ASSERT_NO_FATAL_FAILURE(start_averaging(1));
  single({"order", local_.cluster_file(), "--kind", "averaging"});
}

TEST_F(TorchJobsTest, DistributedOptimizerRefusesAClusterFileInAnotherOrder) {
  ASSERT_NO_FATAL_FAILURE(start("dtype=f32;opt=adam;lr=0.001;mode=async"));
  single({"order", local_.cluster_file(), "--kind", "optimizer"});
}

TEST_F(TorchJobsTest, DistributedOptimizerRefusesAveragingShards) {
  ASSERT_NO_FATAL_FAILURE(start_averaging(1));
  single({"kind", local_.cluster_file(), "--kind", "averaging"});
}

TEST_F(TorchJobsTest, HookRefusesOptimizerShards) {
  ASSERT_NO_FATAL_FAILURE(start("dtype=f32;opt=adam;lr=0.001;mode=sync;workers=1;min_workers=1"));
  single({"kind", local_.cluster_file(), "--kind", "optimizer"});
}

#else
TEST(TorchJobsTest, Skipped) {
  GTEST_SKIP() << "TORCH JOB TESTS SKIPPED: the Python package was not built (pybind11-dev missing at configure time)";
}
#endif

}  // namespace
}  // namespace blockps::testing
