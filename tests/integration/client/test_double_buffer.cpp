// DoubleBuffer (client/include/blockps/double_buffer.h) against a real 2-shard cluster (one tgtd each, opt=sum so every
// expected weight is exact): the swap never hands compute a half-pulled buffer, the bubble of adaptive pull
// converges to what the plan says under a controlled compute time, and the C API drives the same pipeline.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <thread>
#include <vector>

#include "blockps/blockps.h"
#include "blockps/cluster.h"
#include "blockps/double_buffer.h"
#include "tests/support/blockps_shard.h"
#include "tests/support/local_cluster.h"
#include "tests/support/process.h"

namespace blockps::testing {
namespace {

constexpr std::uint64_t K = 1024;

std::span<float> floats(std::span<std::byte> bytes) {
  return {reinterpret_cast<float*>(bytes.data()), bytes.size() / sizeof(float)};
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

class DoubleBufferTest : public ::testing::Test {
 protected:
  void SetUp() override {
    BLOCKPS_REQUIRE_TGTD_AND_MODULE();
  }
  void TearDown() override {
    if (HasFailure()) std::cerr << local_.logs();
  }
  // 2 MiB in 64 KiB blocks over 2 shards: a pull is 32 blocks, several commands per shard, so a buffer handed
  // back early would show blocks of the poison. reconnect_s = 0: a dead shard fails the step at once
  // (test_reconnect.cpp has the recovery).
  void start(std::uint64_t model_bytes = 2048 * K, std::uint64_t block_bytes = 64 * K) {
    const Status s = local_.start(
        {.model_bytes = model_bytes, .block_bytes = block_bytes, .client_options = "reconnect_s = 0\n"},
        "blockps-dbuf-");
    ASSERT_TRUE(s.ok()) << s.message();
    auto c = Cluster::open(local_.cluster_file());
    ASSERT_TRUE(c.ok()) << c.message();
    cluster_ = std::move(c.value());
  }
  std::unique_ptr<DoubleBuffer> make(const PipelineOptions& o) {
    auto db = DoubleBuffer::create(*cluster_, o);
    EXPECT_TRUE(db.ok()) << db.message();
    return db.ok() ? std::move(db.value()) : nullptr;
  }

  LocalCluster local_;
  std::unique_ptr<Cluster> cluster_;
};

// Each buffer is poisoned (NaN weights) just before it is handed to the communication thread; the buffer
// step() hands back must hold, in every element, exactly the sum of the pushes before its pull (opt=sum,
// gradients of 1, one worker): step k returns weights k - 1 (the double buffer's one-step staleness).
TEST_F(DoubleBufferTest, SwapNeverExposesAHalfPulledBuffer) {
  start();
  for (bool adaptive : {false, true}) {
    SCOPED_TRACE(adaptive ? "adaptive pull" : "pull right after the push");
    // Weights start from what the shards hold now (earlier loops pushed to them).
    std::vector<std::byte> initial(cluster_->model_bytes());
    ASSERT_TRUE(cluster_->pull(initial).ok());
    const float base = floats(initial)[0];
    // The buffer step k hands back was pulled after step k - 1 was called (at k = 1: when the buffers opened).
    auto pull_not_before = std::chrono::steady_clock::now();
    auto db = make({.mode = PipelineMode::double_buffer, .adaptive_pull = adaptive, .warmup_steps = 1});
    ASSERT_NE(db, nullptr);
    std::mt19937 gen(7);
    std::uniform_int_distribution<int> compute_us(0, 3000);
    for (int k = 1; k <= 40; ++k) {
      std::fill_n(floats(db->grads()).begin(), floats(db->grads()).size(), 1.0f);
      std::fill_n(floats(db->weights()).begin(), floats(db->weights()).size(),
                  std::numeric_limits<float>::quiet_NaN());
      std::this_thread::sleep_for(std::chrono::microseconds(compute_us(gen)));
      const auto called = std::chrono::steady_clock::now();
      auto m = db->step();
      ASSERT_TRUE(m.ok()) << m.message();
      const float expect = base + static_cast<float>(std::max(0, k - 1));
      const auto w = floats(db->weights());
      for (std::size_t i = 0; i < w.size(); ++i)
        ASSERT_EQ(w[i], expect) << "step " << k << ": element " << i << " (block "
                                << i * 4 / cluster_->config().model.block_bytes << ") of the buffer handed back";
      // Its age: from its pull's completion to this return, so positive and within the time since that pull began.
      const auto returned = std::chrono::steady_clock::now();
      EXPECT_GT(m->weight_age_s, 0) << "step " << k;
      EXPECT_LE(m->weight_age_s, std::chrono::duration<double>(returned - pull_not_before).count()) << "step " << k;
      pull_not_before = called;
    }
  }
}

// Where compute leaves no room for a bubble (~0 compute), every exchange after warm-up is one pipelined
// exchange, and its pulled weights include its own push of every block: the buffer handed back at step k holds
// exactly the pushes of steps 1 .. k - 1 (a READ issued before its block's WRITE completed would show k - 2).
TEST_F(DoubleBufferTest, PipelinedExchangeWhenComputeLeavesNoRoom) {
  start();
  std::vector<std::byte> initial(cluster_->model_bytes());
  ASSERT_TRUE(cluster_->pull(initial).ok());
  const float base = floats(initial)[0];
  auto db = make({.mode = PipelineMode::double_buffer, .adaptive_pull = true, .warmup_steps = 1});
  ASSERT_NE(db, nullptr);
  int pipelined_steps = 0;
  // The "compute" is two copies: an element loop would not be ~0 in an unoptimised sanitized build.
  const std::vector<float> ones(cluster_->model_bytes() / sizeof(float), 1.0f);
  const std::vector<float> poison(ones.size(), std::numeric_limits<float>::quiet_NaN());
  for (int k = 1; k <= 40; ++k) {
    std::memcpy(db->grads().data(), ones.data(), cluster_->model_bytes());
    std::memcpy(db->weights().data(), poison.data(), cluster_->model_bytes());
    auto m = db->step();
    ASSERT_TRUE(m.ok()) << m.message();
    pipelined_steps += m->pipelined ? 1 : 0;
    const float expect = base + static_cast<float>(std::max(0, k - 1));
    const auto w = floats(db->weights());
    // Every element equal to the next (one memcmp: the check must not become the compute time) and the first
    // as expected; the element loop only to name the first wrong one.
    if (w[0] == expect && std::memcmp(w.data(), w.data() + 1, (w.size() - 1) * sizeof(float)) == 0) continue;
    for (std::size_t i = 0; i < w.size(); ++i)
      ASSERT_EQ(w[i], expect) << "step " << k << ": element " << i << " (block "
                              << i * 4 / cluster_->config().model.block_bytes << ")";
  }
  EXPECT_GT(pipelined_steps, 30) << "compute (~0) < push + pull should make the exchanges pipelined";
  auto counters = cluster_->grad_queue_counters();
  ASSERT_TRUE(counters.ok()) << counters.message();
  for (std::size_t s = 0; s < counters->size(); ++s)
    EXPECT_GT((*counters)[s].issued_beside_other_direction, 0u)
        << "shard " << s << ": no command was ever issued while the other direction had one in flight";
}

// Under a controlled compute time (a sleep), the bubble settles where the pull ends (1 - safety) x compute
// after compute began, less twice the pull's mean deviation (the margin for slower pulls):
// bubble + push + pull ~ (1 - safety) x compute - 2 x deviation. Weights then wait little for compute:
// their age is a small part of what it is when the pull follows the push at once, and compute hardly stalls.
TEST_F(DoubleBufferTest, BubbleConvergesUnderControlledCompute) {
  start();
  // 80 ms: room for a bubble beside a 2 MiB exchange also on a slow or loaded machine (a 40 ms compute left
  // only ~14 ms of bubble where the exchange took ~19 ms next to another test).
  constexpr double kCompute = 0.080;
  struct Run {
    std::vector<double> planned_span, exchange, age, stall, bubble;
    double pull_deviation_s = 0;
  };
  auto run = [&](bool adaptive) {
    Run r;
    auto db = make({.mode = PipelineMode::double_buffer, .adaptive_pull = adaptive});
    if (db == nullptr) return r;
    for (int k = 1; k <= 30; ++k) {
      std::this_thread::sleep_for(std::chrono::duration<double>(kCompute));
      auto m = db->step();
      EXPECT_TRUE(m.ok()) << m.message();
      if (!m.ok() || k <= 10) continue;  // warm-up and the moving averages settling
      r.planned_span.push_back(m->bubble_s + m->push_s + m->pull_s);
      r.exchange.push_back(m->push_s + m->pull_s);
      r.age.push_back(m->weight_age_s);
      r.stall.push_back(m->stall_s);
      r.bubble.push_back(m->bubble_s);
    }
    r.pull_deviation_s = db->averages().pull_deviation_s;
    return r;
  };
  const Run fixed = run(false);
  const Run adaptive = run(true);
  ASSERT_FALSE(adaptive.planned_span.empty());
  const double safety = PipelineOptions{}.safety;
  const double target = (1 - safety) * kCompute - 2 * adaptive.pull_deviation_s;
  std::cout << "bubble median " << median(adaptive.bubble) * 1e3 << " ms, bubble+push+pull median "
            << median(adaptive.planned_span) * 1e3 << " ms (target " << target * 1e3 << " ms), weight age median "
            << median(adaptive.age) * 1e3 << " ms (without adaptive pull " << median(fixed.age) * 1e3
            << " ms), stall median " << median(adaptive.stall) * 1e3 << " ms\n";
  // Compute time measured around the sleep is a little longer than the sleep; the plan uses the measured one.
  // Each step planned with the pull deviation of its moment, the target uses the last one: on a loaded machine
  // the deviation itself moves (seen with a core busy: 69.7 ms planned vs a 62.6 ms target), so the
  // tolerance grows with it; on a quiet machine it stays ~6-7 ms.
  EXPECT_NEAR(median(adaptive.planned_span), target, 0.006 + adaptive.pull_deviation_s);
  // The room this machine leaves: what the plan has beside the measured exchange. The bubble must fill most of it.
  const double room = target - median(adaptive.exchange);
  ASSERT_GT(room, 0.2 * target) << "the 2 MiB exchange took " << median(adaptive.exchange) * 1e3
                                << " ms of an 80 ms compute: this machine is too slow for the test's premise";
  EXPECT_GT(median(adaptive.bubble), 0.5 * room) << "an 80 ms compute and a 2 MiB exchange leave room for a bubble";
  EXPECT_LT(median(adaptive.stall), 0.1 * kCompute);
  EXPECT_LT(median(adaptive.age) * 2, median(fixed.age)) << "adaptive pull should at least halve the weight age";
  for (double b : fixed.bubble) EXPECT_EQ(b, 0) << "no bubble without adaptive pull";
}

TEST_F(DoubleBufferTest, SequentialModeExchangesInStep) {
  start(256 * K, 64 * K);
  std::vector<std::byte> initial(cluster_->model_bytes());
  ASSERT_TRUE(cluster_->pull(initial).ok());
  auto db = make({.mode = PipelineMode::sequential, .adaptive_pull = true});
  ASSERT_NE(db, nullptr);
  for (int k = 1; k <= 5; ++k) {
    std::fill_n(floats(db->grads()).begin(), floats(db->grads()).size(), 2.0f);
    auto m = db->step();
    ASSERT_TRUE(m.ok()) << m.message();
    EXPECT_EQ(floats(db->weights())[0], floats(initial)[0] + 2.0f * static_cast<float>(k)) << "no staleness";
    EXPECT_EQ(m->bubble_s, 0);
    EXPECT_TRUE(m->pipelined) << "sequential mode exchanges in one pipelined operation";
    EXPECT_GE(m->stall_s, m->push_s);
  }
}

TEST_F(DoubleBufferTest, RefusesBadOptionsWithTheReason) {
  start(256 * K, 64 * K);
  const std::pair<PipelineOptions, std::string> cases[] = {
      {{.smoothing = 0}, "smoothing = 0.000000: must be in (0, 1]"},
      {{.safety = 1}, "safety = 1.000000: must be in [0, 1)"},
      {{.warmup_steps = 0}, "warmup_steps = 0: must be >= 1"},
  };
  for (const auto& [options, why] : cases) {
    auto db = DoubleBuffer::create(*cluster_, options);
    ASSERT_FALSE(db.ok());
    EXPECT_EQ(db.status().code(), StatusCode::invalid_argument);
    EXPECT_NE(db.message().find(why), std::string::npos) << db.message();
  }
}

// A shard that dies: the step that would hand back the failed buffer reports the I/O error naming the shard,
// and the pipeline stays failed.
TEST_F(DoubleBufferTest, DeadShardFailsTheStepWithTheReason) {
  start(256 * K, 64 * K);
  auto db = make({});
  ASSERT_NE(db, nullptr);
  ASSERT_TRUE(db->step().ok());
  ASSERT_TRUE(local_.tgtd(1).kill9().ok());
  Status first = Status::Ok();
  for (int k = 0; k < 3 && first.ok(); ++k) first = db->step().status();
  ASSERT_FALSE(first.ok());
  EXPECT_NE(first.message().find("shard1"), std::string::npos) << first.message();
  EXPECT_EQ(db->step().status().message(), first.message());
}

}  // namespace
}  // namespace blockps::testing

namespace blockps::testing {
namespace {

// The C API's double buffer (<blockps/blockps.h>, API version 2): defaults, the swap's exact values, metrics, errors.
TEST_F(DoubleBufferTest, CApiDrivesTheSamePipeline) {
  start(256 * K, 64 * K);
  blockps_cluster* c = nullptr;
  ASSERT_EQ(blockps_cluster_open(local_.cluster_file().c_str(), &c), BLOCKPS_OK) << blockps_last_error();
  std::vector<float> base(blockps_cluster_model_bytes(c) / 4);
  ASSERT_EQ(blockps_pull(c, base.data(), base.size() * 4), BLOCKPS_OK);
  blockps_double_buffer_options o;
  blockps_double_buffer_options_init(&o);
  EXPECT_EQ(o.mode, BLOCKPS_PIPELINE_DOUBLE_BUFFER);
  EXPECT_EQ(o.adaptive_pull, 1);
  o.smoothing = 2;
  blockps_double_buffer* db = nullptr;
  EXPECT_EQ(blockps_double_buffer_open(c, &o, &db), BLOCKPS_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(blockps_last_error()).find("smoothing = 2"), std::string::npos) << blockps_last_error();
  EXPECT_EQ(db, nullptr);
  // The buffer step k hands back was pulled after step k - 1 was called (at k = 1: when the buffers opened).
  auto pull_not_before = std::chrono::steady_clock::now();
  ASSERT_EQ(blockps_double_buffer_open(c, nullptr, &db), BLOCKPS_OK) << blockps_last_error();
  for (int k = 1; k <= 4; ++k) {
    auto* g = static_cast<float*>(blockps_double_buffer_grads(db));
    std::fill_n(g, base.size(), 1.0f);
    blockps_step_metrics m{};
    const auto called = std::chrono::steady_clock::now();
    ASSERT_EQ(blockps_double_buffer_step(db, &m), BLOCKPS_OK) << blockps_last_error();
    EXPECT_EQ(m.step, static_cast<std::uint64_t>(k));
    const auto returned = std::chrono::steady_clock::now();
    EXPECT_GT(m.weight_age_s, 0) << "step " << k;
    EXPECT_LE(m.weight_age_s, std::chrono::duration<double>(returned - pull_not_before).count()) << "step " << k;
    pull_not_before = called;
    const auto* w = static_cast<const float*>(blockps_double_buffer_weights(db));
    EXPECT_EQ(w[0], base[0] + static_cast<float>(std::max(0, k - 1)));
    EXPECT_EQ(w[base.size() - 1], base.back() + static_cast<float>(std::max(0, k - 1)));
  }
  EXPECT_EQ(blockps_double_buffer_step(nullptr, nullptr), BLOCKPS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(blockps_double_buffer_weights(nullptr), nullptr);
  blockps_double_buffer_close(db);
  blockps_double_buffer_close(nullptr);
  blockps_cluster_close(c);
}

#ifdef BLOCKPS_PYTHON_DIR
// The Python package (client/python) run by Debian's /usr/bin/python3 against the same kind of cluster.
TEST_F(DoubleBufferTest, PythonBindingAndTorchHelper) {
  start(256 * K, 64 * K);
  const CommandResult r = run_command({"/usr/bin/env", std::string("PYTHONPATH=") + BLOCKPS_PYTHON_DIR,
                                       BLOCKPS_PYTHON, BLOCKPS_PYTHON_CHECK, local_.cluster_file()},
                                      {.timeout = std::chrono::milliseconds(120000), .cwd = {}});
  EXPECT_TRUE(r.ok()) << r.describe();
  EXPECT_NE(r.output.find("every check passed"), std::string::npos) << r.output;
}
#else
TEST_F(DoubleBufferTest, PythonBindingAndTorchHelper) {
  GTEST_SKIP() << "PYTHON BINDING TEST SKIPPED: the package was not built (pybind11-dev missing at configure time)";
}
#endif

}  // namespace
}  // namespace blockps::testing
