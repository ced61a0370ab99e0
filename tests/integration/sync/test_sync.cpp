// mode=sync in a real tgtd over iSCSI: every worker is its own libiscsi session (its own I_T nexus). Rounds
// average the workers' gradients; a worker's READ after its push is parked by the module (tgt's asynchronous
// completion) until the round is applied; workers that die, sessions that end and a tgtd killed mid-training
// are survived as docs/OPTIONS.md "Synchronous rounds" says. Every wait is bounded: a hang fails the test.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <future>
#include <regex>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include "aggregator/model_shard.h"
#include "blockps/cluster.h"
#include "client/transport/iscsi_lun.h"
#include "contract/scsi_codes.h"
#include "tests/support/blockps_shard.h"
#include "tests/support/faulty_store.h"
#include "tests/support/process.h"
#include "tests/support/scsi_commands.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tgtd_instance.h"

namespace blockps::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr std::uint64_t kBytes = 256 * 1024;  // f32, 4 blocks of 64K
constexpr const char* kTarget = "iqn.2026-11.io.blockps:sync";

std::string worker_iqn(const std::string& name) { return "iqn.2026-11.io.blockps:sync-worker-" + name; }

std::vector<float> values(std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1, 1);
  std::vector<float> v(kBytes / 4);
  for (float& x : v) x = dist(gen);
  return v;
}

std::span<const std::byte> bytes_of(const std::vector<float>& v) { return std::as_bytes(std::span(v)); }

std::vector<float> floats_of(const std::vector<std::byte>& b) {
  std::vector<float> v(b.size() / 4);
  std::memcpy(v.data(), b.data(), b.size());
  return v;
}

// The averaged SGD step the shard must take for one round: w -= lr * (sum in IQN order) / n.
void reference_round(std::vector<float>& w, const std::vector<std::vector<float>>& grads_in_iqn_order, float lr) {
  ModelShard ref(
      {kBytes, WireDtype::f32, 64 * 1024},
      [&] {
        OptimizerParams p;
        p.kind = OptimizerKind::sgd;
        p.lr = lr;
        return p;
      }(),
      nullptr);
  EXPECT_TRUE(ref.assign_weights(0, bytes_of(w)).ok());
  std::vector<float> avg = grads_in_iqn_order.front();
  for (std::size_t k = 1; k < grads_in_iqn_order.size(); ++k)
    for (std::size_t i = 0; i < avg.size(); ++i) avg[i] += grads_in_iqn_order[k][i];
  for (float& x : avg) x *= 1.0f / static_cast<float>(grads_in_iqn_order.size());
  for (std::uint64_t b = 0; b < 4; ++b)  // block by block, as the rounds apply it
    EXPECT_TRUE(ref.apply_gradient_f32(b * 64 * 1024, std::span(avg).subspan(b * 16384, 16384)).ok());
  std::vector<std::byte> out(kBytes);
  ref.read_weights(0, out);
  w = floats_of(out);
}

class SyncModeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    BLOCKPS_REQUIRE_TGTD_AND_MODULE();
    ASSERT_TRUE(dir_.create("blockps-sync-").ok());
  }
  void TearDown() override {
    if (HasFailure() && tgtd_.running()) std::cerr << "---- tgtd log ----\n" << tail_of(tgtd_.log_text(), 6000) << "\n";
  }

  void start_shard(const std::string& sync_options) {
    options_ = "size=256K;block=64K;opt=sgd;lr=0.5;mode=sync;" + sync_options;
    const Status s = add_blockps_shard(tgtd_, 1, kTarget, dir_.path("m.ckpt"), options_);
    ASSERT_TRUE(s.ok()) << s.message();
  }

  void connect(IscsiLun& lun, const std::string& who, int lu = 1) {
    const Status s = lun.connect(tgtd_.url(kTarget, lu), worker_iqn(who));
    ASSERT_TRUE(s.ok()) << s.message();
  }

  nlohmann::json status_page() {
    IscsiLun status;
    if (!status.connect(tgtd_.url(kTarget, 3), worker_iqn("status-reader")).ok()) return {};
    std::vector<std::byte> page(1 << 20);
    if (!status.read(0, page).ok()) return {};
    return nlohmann::json::parse(reinterpret_cast<const char*>(page.data()));
  }

  // Worker `who` through libblockps (its own session): 64K requests, so an exchange is 4 WRITEs and 4 READs at
  // queue depth 4. reconnect_s = 0: a killed shard fails the exchange at once (test_reconnect.cpp has the recovery).
  std::unique_ptr<Cluster> open_worker(const std::string& who) {
    const std::string path = dir_.path("cluster-" + who + ".toml");
    std::ofstream(path) << "[model]\nsize = \"256K\"\nblock = \"64K\"\n[client]\nqueue_depth = 4\nmax_request = "
                           "\"64K\"\nreconnect_s = 0\ninitiator = \""
                        << worker_iqn(who) << "\"\n[[shard]]\nname = \"s0\"\ngrad = \"" << tgtd_.url(kTarget, 1)
                        << "\"\nweights = \"" << tgtd_.url(kTarget, 2) << "\"\nstatus = \"" << tgtd_.url(kTarget, 3)
                        << "\"\n";
    auto c = Cluster::open(path);
    EXPECT_TRUE(c.ok()) << c.message();
    return c.ok() ? std::move(c.value()) : nullptr;
  }

  // Block k (of open_worker's 64K blocks) of a gradient, and of a pull's buffer.
  static constexpr std::uint64_t kBlock = 64 * 1024;
  static std::span<const std::byte> block_of(const std::vector<float>& g, std::uint64_t k) {
    return bytes_of(g).subspan(k * kBlock, kBlock);
  }
  static std::span<std::byte> into(std::vector<std::byte>& pulled, std::uint64_t k) {
    return std::span(pulled).subspan(k * kBlock, kBlock);
  }

  // Worker `who` as a separate blockps_lu_io process: it pushes the whole LU, then READs it back (parked until
  // the round closes), for at most 30 s.
  std::future<CommandResult> spawn_pushpull(const std::string& who) {
    return std::async(std::launch::async, [this, who] {
      RunOptions limit;
      limit.timeout = 30s;
      return run_command({"bash", "-c",
                          "echo $$ > " + dir_.path(who + ".pid") + "; BLOCKPS_INITIATOR_IQN=" + worker_iqn(who) +
                              " exec " + BLOCKPS_LU_IO + " " + tgtd_.url(kTarget, 1) + " pushpull 0 256K 7"},
                         limit);
    });
  }
  bool kill_spawned(const std::string& who) {
    pid_t pid = 0;
    return std::istringstream(read_text_file(dir_.path(who + ".pid"))) >> pid && pid > 0 && ::kill(pid, SIGKILL) == 0;
  }

  // One round for every (worker, gradient) pair, each on its own thread: push, then pull. Returns what each
  // worker read back and how long each pull took; fails the test when a round takes over `limit`.
  struct Pulled {
    ScsiResult result;
    std::vector<float> weights;
  };
  std::vector<Pulled> round(std::vector<IscsiLun*> workers, const std::vector<std::vector<float>>& grads,
                            std::chrono::milliseconds limit = 15s) {
    std::vector<std::future<Pulled>> futures;
    for (std::size_t k = 0; k < workers.size(); ++k) {
      futures.push_back(std::async(std::launch::async, [lun = workers[k], &g = grads[k]] {
        Pulled p;
        p.result = lun->write(0, bytes_of(g));
        if (!p.result.ok()) return p;
        std::vector<std::byte> back(kBytes);
        p.result = lun->read(0, back);
        p.weights = floats_of(back);
        return p;
      }));
    }
    std::vector<Pulled> out;
    const auto deadline = Clock::now() + limit;
    for (auto& f : futures) {
      if (f.wait_until(deadline) != std::future_status::ready) {
        ADD_FAILURE() << "a worker's round did not finish within " << limit.count() << " ms";
        std::abort();  // a hung libiscsi call cannot be cancelled; dying is the bounded outcome
      }
      out.push_back(f.get());
    }
    return out;
  }

  TempDir dir_;
  TgtdInstance tgtd_;
  std::string options_;
};

TEST_F(SyncModeTest, ThreeWorkersReadTheAveragedStepAndWaitForTheLastPush) {
  ASSERT_NO_FATAL_FAILURE(start_shard("workers=3;min_workers=3;straggler_ms=60000"));
  IscsiLun a, b, c;
  ASSERT_NO_FATAL_FAILURE(connect(a, "a"));
  ASSERT_NO_FATAL_FAILURE(connect(b, "b"));
  ASSERT_NO_FATAL_FAILURE(connect(c, "c"));
  std::vector<float> expected(kBytes / 4, 0.0f);
  for (std::uint32_t r = 0; r < 3; ++r) {
    SCOPED_TRACE("round " + std::to_string(r));
    const auto ga = values(10 * r + 1), gb = values(10 * r + 2), gc = values(10 * r + 3);
    reference_round(expected, {ga, gb, gc}, 0.5f);
    // a and b push and pull at once; c pushes 400 ms later: a's and b's pulls must wait for it.
    const auto t0 = Clock::now();
    auto early = std::async(std::launch::async, [&] { return round({&a, &b}, {ga, gb}); });
    std::this_thread::sleep_for(400ms);
    ASSERT_EQ(early.wait_for(0s), std::future_status::timeout) << "a pull came back before the round closed";
    const auto late = round({&c}, {gc});
    const auto first = early.get();
    EXPECT_GE(Clock::now() - t0, 400ms);
    for (const Pulled& p : {first[0], first[1], late[0]}) {
      ASSERT_TRUE(p.result.ok()) << p.result.describe();
      EXPECT_EQ(p.weights, expected) << "a worker read something other than the averaged step";
    }
  }
  const auto s = status_page();
  EXPECT_EQ(s["rounds"]["rounds_min"], 3);
  EXPECT_EQ(s["rounds"]["live_workers"].size(), 3u);
  EXPECT_EQ(s["rounds"]["parked_commands"], 0);
  EXPECT_EQ(s["rounds"]["round_latency"]["count"], 12) << "4 blocks x 3 rounds";

  // `blockps status` shows the rounds and the live workers.
  const std::string cluster = dir_.path("cluster.toml");
  std::ofstream(cluster) << "[model]\nsize = \"256K\"\nblock = \"64K\"\n[[shard]]\nname = \"s0\"\ngrad = \""
                         << tgtd_.url(kTarget, 1) << "\"\nweights = \"" << tgtd_.url(kTarget, 2) << "\"\nstatus = \""
                         << tgtd_.url(kTarget, 3) << "\"\n";
  const CommandResult cli = run_command({BLOCKPS_CLI_PATH, "--cluster", cluster, "status"});
  ASSERT_TRUE(cli.ok()) << cli.describe();
  EXPECT_NE(cli.output.find("sync rounds"), std::string::npos) << cli.output;
  EXPECT_NE(cli.output.find("3/3"), std::string::npos) << cli.output;
  EXPECT_NE(cli.output.find(worker_iqn("c")), std::string::npos) << cli.output;
}

// The client's pipelined exchange against BSP: each worker's one session carries its WRITEs and its READs (a
// READ parked until the block's round closes while the worker's later WRITEs still go out), and every worker
// reads exactly the averaged step of each round. One session per worker: the shard counts 3 workers, not 6.
// The library runs a worker's queued exchanges as one stream; each of them finishes as soon as its own commands
// did, not with the whole stream: here exchange Z (block 3) is answered when its round closes, while exchange Y
// (block 2), queued before it, still waits for its own. (DistributedOptimizer's early forward waits for one
// module's blocks at a time and relies on this.)
TEST_F(SyncModeTest, AnExchangeOfABatchFinishesWithItsOwnRoundNotWithTheWholeBatch) {
  ASSERT_NO_FATAL_FAILURE(start_shard("workers=2;min_workers=2;straggler_ms=60000"));
  std::unique_ptr<Cluster> a = open_worker("a"), b = open_worker("b");
  ASSERT_TRUE(a && b);
  const std::vector<float> ga = values(1), gb = values(2);
  std::vector<std::byte> pulled_a(kBytes), pulled_b(kBytes);
  // X runs first, its READ parked until b pushes block 0; Y and Z queue behind it and run together.
  const Operation x = a->exchange_blocks_async(0, 1, block_of(ga, 0), into(pulled_a, 0));
  const Operation y = a->exchange_blocks_async(2, 1, block_of(ga, 2), into(pulled_a, 2));
  const Operation z = a->exchange_blocks_async(3, 1, block_of(ga, 3), into(pulled_a, 3));
  ASSERT_TRUE(b->exchange_blocks(0, 1, block_of(gb, 0), into(pulled_b, 0)).ok());
  ASSERT_TRUE(x.wait().ok());
  ASSERT_TRUE(b->exchange_blocks(3, 1, block_of(gb, 3), into(pulled_b, 3)).ok());
  const auto deadline = Clock::now() + 10s;
  while (!z.ready() && Clock::now() < deadline) std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(z.ready()) << "exchange Z waited for Y, whose round is still open: the batch finished as a whole";
  EXPECT_FALSE(y.ready()) << "Y finished before b pushed its block";
  EXPECT_TRUE(std::equal(pulled_a.begin() + 3 * kBlock, pulled_a.end(), pulled_b.begin() + 3 * kBlock))
      << "Z's pull is not the round's weights that b read";
  ASSERT_TRUE(b->exchange_blocks(2, 1, block_of(gb, 2), into(pulled_b, 2)).ok());
  ASSERT_TRUE(y.wait().ok());
  ASSERT_TRUE(z.wait().ok());
}

// The shard's stream (issue 48): an exchange queued while an earlier one's READ is parked goes out at once, not when
// that READ comes back. Worker a's exchange X (block 0) parks until b pushes block 0; a's exchange Y (block 2),
// queued after it, must reach the shard meanwhile, since b pushes block 2 first and its pull of block 2 waits for
// a's push of it. (Run as batches, Y waited for X's READ, which waited for b, which waited for Y: b's pull failed
// after worker_timeout_ms.) Then both workers push all four blocks as four exchanges each, in opposite orders, at
// once, for three steps: every round closes and both read the same weights.
TEST_F(SyncModeTest, AnExchangeQueuedBehindAParkedReadGoesOutAtOnceAndOppositeOrdersNeverStall) {
  ASSERT_NO_FATAL_FAILURE(start_shard("workers=2;min_workers=2;straggler_ms=60000;worker_timeout_ms=20000"));
  std::unique_ptr<Cluster> a = open_worker("a"), b = open_worker("b");
  ASSERT_TRUE(a && b);
  const std::vector<float> ga = values(1), gb = values(2);
  std::vector<std::byte> pulled_a(kBytes), pulled_b(kBytes);
  const Operation x = a->exchange_blocks_async(0, 1, block_of(ga, 0), into(pulled_a, 0));
  std::this_thread::sleep_for(300ms);  // X's WRITE landed, its READ is parked
  const Operation y = a->exchange_blocks_async(2, 1, block_of(ga, 2), into(pulled_a, 2));
  const Operation b2 = b->exchange_blocks_async(2, 1, block_of(gb, 2), into(pulled_b, 2));
  const auto deadline = Clock::now() + 10s;
  while (!(b2.ready() && y.ready()) && Clock::now() < deadline) std::this_thread::sleep_for(10ms);
  ASSERT_TRUE(b2.ready()) << "a's exchange Y waited behind X's parked READ";
  EXPECT_TRUE(b2.wait().ok()) << b2.wait().message();
  EXPECT_TRUE(y.wait().ok()) << y.wait().message();
  EXPECT_FALSE(x.ready()) << "X finished before b pushed block 0";
  ASSERT_TRUE(b->exchange_blocks(0, 1, block_of(gb, 0), into(pulled_b, 0)).ok());
  ASSERT_TRUE(x.wait().ok());
  for (std::uint64_t k : {1, 3}) {  // close the other rounds of this step
    const Operation mine = a->exchange_blocks_async(k, 1, block_of(ga, k), into(pulled_a, k));
    ASSERT_TRUE(b->exchange_blocks(k, 1, block_of(gb, k), into(pulled_b, k)).ok());
    ASSERT_TRUE(mine.wait().ok());
  }
  EXPECT_EQ(pulled_a, pulled_b);

  for (int step = 0; step < 3; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    std::vector<Operation> ops;
    for (std::uint64_t k = 0; k < 4; ++k) {
      ops.push_back(a->exchange_blocks_async(k, 1, block_of(ga, k), into(pulled_a, k)));
      ops.push_back(b->exchange_blocks_async(3 - k, 1, block_of(gb, 3 - k), into(pulled_b, 3 - k)));
    }
    const auto step_deadline = Clock::now() + 10s;
    for (const Operation& op : ops) {
      while (!op.ready() && Clock::now() < step_deadline) std::this_thread::sleep_for(10ms);
      ASSERT_TRUE(op.ready()) << "an exchange did not finish within 10 s: the opposite orders stalled";
      EXPECT_TRUE(op.wait().ok()) << op.wait().message();
    }
    EXPECT_EQ(pulled_a, pulled_b);
  }
  EXPECT_EQ(status_page()["rounds"]["rounds_min"], 4);
}

TEST_F(SyncModeTest, ThreeWorkersExchangingReadTheAveragedStepOfEveryRound) {
  ASSERT_NO_FATAL_FAILURE(start_shard("workers=3;min_workers=3;straggler_ms=60000"));
  std::vector<std::unique_ptr<Cluster>> workers;
  for (const char* who : {"a", "b", "c"}) ASSERT_NO_FATAL_FAILURE(workers.push_back(open_worker(who)));
  std::vector<float> expected(kBytes / 4, 0.0f);
  for (std::uint32_t r = 0; r < 3; ++r) {
    SCOPED_TRACE("round " + std::to_string(r));
    const std::vector<std::vector<float>> grads{values(10 * r + 1), values(10 * r + 2), values(10 * r + 3)};
    reference_round(expected, grads, 0.5f);
    std::vector<std::future<Pulled>> futures;
    for (std::size_t k = 0; k < workers.size(); ++k) {
      futures.push_back(std::async(std::launch::async, [&, k] {
        Pulled p;
        std::vector<std::byte> back(kBytes);
        const Status s = workers[k]->exchange(bytes_of(grads[k]), back);
        if (!s.ok()) p.result = ScsiResult{kScsiTransportError, 0, 0, s.message()};
        p.weights = floats_of(back);
        return p;
      }));
    }
    const auto deadline = Clock::now() + 15s;
    for (auto& f : futures) {
      if (f.wait_until(deadline) != std::future_status::ready) {
        ADD_FAILURE() << "an exchange did not finish within 15 s";
        std::abort();  // a hung libiscsi call cannot be cancelled; dying is the bounded outcome
      }
      const Pulled p = f.get();
      ASSERT_TRUE(p.result.ok()) << p.result.describe();
      EXPECT_EQ(p.weights, expected) << "a worker read something other than the averaged step";
    }
  }
  const auto s = status_page();
  EXPECT_EQ(s["rounds"]["rounds_min"], 3);
  EXPECT_EQ(s["rounds"]["live_workers"].size(), 3u) << "one session per worker";
  for (auto& w : workers) {
    auto counters = w->grad_queue_counters();
    ASSERT_TRUE(counters.ok()) << counters.message();
    EXPECT_GT(counters->front().issued_beside_other_direction, 0u) << "READs and WRITEs never shared the queue";
  }
}

// ssp:K with the exchange: pushes are applied at once and READs never wait, so each exchange returns the
// weights with this worker's own pushes and at most K + 1 of the other's beyond (or behind) them; at the end
// every push is in.
// opt=average through tgtd: every worker's READ after its push returns that round's average gradient (not a sum
// of rounds, not weights), each round from nothing.
TEST_F(SyncModeTest, AnAveragingShardReturnsEachRoundsAverageToEveryWorker) {
  const Status made = add_blockps_shard(tgtd_, 1, kTarget, dir_.path("m.ckpt"),
                                        "size=256K;block=64K;opt=average;mode=sync;workers=2;min_workers=2");
  ASSERT_TRUE(made.ok()) << made.message();
  IscsiLun a, b;
  connect(a, "a");
  connect(b, "b");
  for (std::uint32_t r = 0; r < 3; ++r) {
    const std::vector<std::vector<float>> grads{values(10 + r), values(20 + r)};  // IQN order: a, then b
    std::vector<float> expected(kBytes / 4);
    for (std::size_t i = 0; i < expected.size(); ++i) expected[i] = (grads[0][i] + grads[1][i]) * 0.5f;
    const auto pulled = round({&a, &b}, grads);
    for (std::size_t k = 0; k < pulled.size(); ++k) {
      ASSERT_TRUE(pulled[k].result.ok()) << "round " << r << ", worker " << k << ": " << pulled[k].result.describe();
      EXPECT_EQ(pulled[k].weights, expected) << "round " << r << ", worker " << k;
    }
  }
  EXPECT_EQ(status_page()["rounds"]["rounds_closed"], 3 * 4);
}

// push_lead through tgtd: a WRITE that would open a round while its worker already leads a worker that is pushing
// by push_lead blocks gets no answer until that worker's push closes a round; then it lands, once, in its round.
TEST_F(SyncModeTest, AWriteThatWouldLeadTooFarIsAnsweredWhenTheSlowestWorkerCatchesUp) {
  start_shard("workers=2;min_workers=2;straggler_ms=60000;push_lead=1");
  IscsiLun a, b;
  connect(a, "a");
  connect(b, "b");
  const auto ga = values(1), gb = values(2);
  ASSERT_TRUE(a.write(0, block_of(ga, 0)).ok());           // A: block 0's round open
  ASSERT_TRUE(b.write(3 * kBlock, block_of(gb, 3)).ok());  // B pushes too: block 3's round open
  ASSERT_TRUE(a.write(kBlock, block_of(ga, 1)).ok());      // A: 2 open, B 1
  auto held = std::async(std::launch::async, [&] { return a.write(2 * kBlock, block_of(ga, 2)); });
  EXPECT_EQ(held.wait_for(500ms), std::future_status::timeout) << "A's WRITE of block 2 would lead B by 2 blocks";
  ASSERT_TRUE(b.write(0, block_of(gb, 0)).ok());  // closes block 0's round: A leads by 0
  ASSERT_EQ(held.wait_for(10s), std::future_status::ready) << "the held WRITE was not answered after B caught up";
  const ScsiResult held_result = held.get();
  ASSERT_TRUE(held_result.ok()) << held_result.describe();
  ASSERT_TRUE(b.write(kBlock, block_of(gb, 1)).ok());
  ASSERT_TRUE(b.write(2 * kBlock, block_of(gb, 2)).ok());  // a round A opened: never held
  ASSERT_TRUE(a.write(3 * kBlock, block_of(ga, 3)).ok());
  // Every round closed once with both gradients: the exact averaged step (IQN order: a, then b).
  std::vector<float> expected(kBytes / 4, 0.0f);
  reference_round(expected, {ga, gb}, 0.5f);
  std::vector<std::byte> back(kBytes);
  ASSERT_TRUE(a.read(0, back).ok());
  EXPECT_EQ(floats_of(back), expected);
  EXPECT_EQ(status_page()["rounds"]["rounds_closed"], 4);
}

TEST_F(SyncModeTest, SspExchangesStayWithinTheStalenessBound) {
  constexpr int kK = 1, kSteps = 6;
  const Status started = add_blockps_shard(tgtd_, 1, kTarget, dir_.path("m.ckpt"),
                                           "size=256K;block=64K;opt=sgd;lr=0.25;mode=ssp:" + std::to_string(kK));
  ASSERT_TRUE(started.ok()) << started.message();
  std::vector<std::unique_ptr<Cluster>> workers;
  for (const char* who : {"a", "b"}) ASSERT_NO_FATAL_FAILURE(workers.push_back(open_worker(who)));
  std::vector<std::byte> start(kBytes);
  ASSERT_TRUE(workers[0]->pull(start).ok());
  const float w0 = floats_of(start)[0];
  // Gradients of 1: each push subtracts exactly 0.25; a weight says how many pushes are in it.
  const std::vector<float> ones(kBytes / 4, 1.0f);
  std::vector<std::string> errors(workers.size());
  // A worker new to a block starts one push behind the slowest one there (docs/OPTIONS.md, mode): a worker that
  // joins after the other's N-th push counts N - 1 pushes it never made, so the bound below holds between workers
  // that joined within each other's first push: they race only after each one's first exchange.
  std::barrier both_joined(static_cast<std::ptrdiff_t>(workers.size()));
  std::vector<std::thread> threads;
  for (std::size_t k = 0; k < workers.size(); ++k) {
    threads.emplace_back([&, k] {
      bool joined = false;
      const auto fail = [&](std::string why) {
        errors[k] = std::move(why);
        if (!joined) both_joined.arrive_and_drop();  // the other worker must not wait for this one
      };
      std::vector<std::byte> back(kBytes);
      for (int step = 1; step <= kSteps; ++step) {
        if (Status s = workers[k]->exchange(bytes_of(ones), back); !s.ok()) return fail(s.message());
        for (float w : floats_of(back)) {
          const float pushes = (w0 - w) / 0.25f;
          if (pushes != std::round(pushes) || pushes < step || pushes > std::min(2 * kSteps, 2 * step + kK + 1))
            return fail("step " + std::to_string(step) + ": a weight holds " + std::to_string(pushes) + " pushes");
        }
        if (step == 1) {
          both_joined.arrive_and_wait();
          joined = true;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (std::size_t k = 0; k < workers.size(); ++k) EXPECT_EQ(errors[k], "") << "worker " << k;
  std::vector<std::byte> end(kBytes);
  ASSERT_TRUE(workers[0]->pull(end).ok());
  for (float w : floats_of(end)) ASSERT_EQ(w, w0 - 0.25f * 2 * kSteps);
}

// A shard that dies mid-exchange: worker a's WRITEs are in, its READs are parked (b has not pushed), and the
// shard's tgtd is killed. The exchange fails at once, naming the shard and the LU; nothing waits forever.
TEST_F(SyncModeTest, AShardKilledMidExchangeFailsItNamingTheShard) {
  ASSERT_NO_FATAL_FAILURE(start_shard("workers=2;min_workers=2;straggler_ms=60000"));
  auto a = open_worker("a");
  ASSERT_NE(a, nullptr);
  std::vector<std::byte> back(kBytes);
  const auto g = values(5);
  Operation op = a->exchange_async(bytes_of(g), back);
  const auto parked_by = Clock::now() + 10s;
  for (;;) {  // the READs parked: the exchange is in the middle, waiting on the round (3 of its 4: at queue depth 4
              // the shard's stream keeps a slot for the WRITEs of exchanges still to come)
    const auto page = status_page();
    if (!page.is_null() && page["rounds"]["parked_commands"] == 3) break;
    ASSERT_LT(Clock::now(), parked_by) << "the exchange's READs never parked: " << page.dump();
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_FALSE(op.ready());
  const auto killed_at = Clock::now();
  ASSERT_TRUE(tgtd_.kill9().ok());
  std::promise<Status> outcome;
  std::thread waiter([&] { outcome.set_value(op.wait()); });
  auto f = outcome.get_future();
  if (f.wait_for(30s) != std::future_status::ready) {
    ADD_FAILURE() << "the exchange still waits 30 s after its shard died";
    std::abort();  // a hung libiscsi call cannot be cancelled; dying is the bounded outcome
  }
  waiter.join();
  const Status s = f.get();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("shard 's0' grad LU (" + tgtd_.url(kTarget, 1) + "): read of "), std::string::npos)
      << s.message();
  std::cout << "the exchange failed " << std::chrono::duration<double>(Clock::now() - killed_at).count()
            << " s after the kill: " << s.message() << "\n";
}

TEST_F(SyncModeTest, AWorkerKilledWithAParkedReadDoesNotStopTheOthers) {
  ASSERT_NO_FATAL_FAILURE(start_shard("workers=3;min_workers=2;straggler_ms=1000;worker_timeout_ms=5000"));
  // Worker c is a separate process: it pushes, its READ parks (a and b have not pushed), and it is killed -9.
  auto c = spawn_pushpull("c");
  const auto joined_by = Clock::now() + 10s;
  for (;;) {
    const auto s = status_page();
    if (!s.is_null() && s["rounds"]["live_workers"].size() == 1 && s["rounds"]["parked_commands"] == 1) break;
    ASSERT_LT(Clock::now(), joined_by) << "worker c never pushed and parked its READ: " << s.dump();
    std::this_thread::sleep_for(50ms);
  }
  ASSERT_TRUE(kill_spawned("c"));
  const CommandResult killed = c.get();
  EXPECT_EQ(killed.exit_code, 128 + SIGKILL) << killed.describe();

  IscsiLun a, b;
  ASSERT_NO_FATAL_FAILURE(connect(a, "a"));
  ASSERT_NO_FATAL_FAILURE(connect(b, "b"));
  for (std::uint32_t r = 0; r < 4; ++r) {
    SCOPED_TRACE("round " + std::to_string(r));
    const auto t0 = Clock::now();
    const auto pulled = round({&a, &b}, {values(2 * r + 20), values(2 * r + 21)});
    // Round 0 holds c's gradient and closes as soon as a and b pushed; later rounds may wait straggler_ms
    // once, until tgt has torn c's session down and the poll drops it.
    EXPECT_LT(Clock::now() - t0, 1000ms + 1500ms) << "a round took longer than straggler_ms plus a margin";
    for (const Pulled& p : pulled) ASSERT_TRUE(p.result.ok()) << p.result.describe();
    EXPECT_EQ(pulled[0].weights, pulled[1].weights);
  }
  const auto s = status_page();
  EXPECT_EQ(s["rounds"]["rounds_min"], 4);
  EXPECT_EQ(s["rounds"]["live_workers"].size(), 2u) << s["rounds"].dump();
  EXPECT_GE(s["rounds"]["workers_dropped"], 1);
}

TEST_F(SyncModeTest, ALunResetOfAParkedReadIsAnsweredPromptly) {
  ASSERT_NO_FATAL_FAILURE(start_shard("workers=2;min_workers=2;straggler_ms=60000;worker_timeout_ms=30000"));
  // Worker c (a separate process) pushes; its READ parks: b never pushes, so the round cannot close.
  auto c = spawn_pushpull("c");
  const auto parked_by = Clock::now() + 10s;
  while (status_page()["rounds"]["parked_commands"] != 1) {
    ASSERT_LT(Clock::now(), parked_by) << "c's READ never parked";
    std::this_thread::sleep_for(50ms);
  }
  IscsiLun admin;
  ASSERT_NO_FATAL_FAILURE(connect(admin, "admin"));
  const auto t0 = Clock::now();
  const ScsiResult reset = lun_reset(admin);
  EXPECT_TRUE(reset.ok()) << reset.describe();
  EXPECT_LT(Clock::now() - t0, 2s) << "the LUN RESET waited for the parked READ instead of aborting it";
  EXPECT_EQ(status_page()["rounds"]["parked_commands"], 0);
  kill_spawned("c");  // it may have ended already: tgt answers the aborted READ to its session
  (void)c.wait_for(40s);
}

TEST_F(SyncModeTest, BelowMinWorkersPullsFailWithNotReadyAndRecoverWhenAWorkerReturns) {
  ASSERT_NO_FATAL_FAILURE(start_shard("workers=2;min_workers=2;straggler_ms=500;worker_timeout_ms=5000"));
  IscsiLun a, b;
  ASSERT_NO_FATAL_FAILURE(connect(a, "a"));
  ASSERT_NO_FATAL_FAILURE(connect(b, "b"));
  std::vector<float> expected(kBytes / 4, 0.0f);
  const auto g1a = values(1), g1b = values(2);
  reference_round(expected, {g1a, g1b}, 0.5f);
  for (const Pulled& p : round({&a, &b}, {g1a, g1b})) ASSERT_TRUE(p.result.ok()) << p.result.describe();

  b.disconnect();  // b's session ends (logout)
  const auto g2a = values(3), g2b = values(4);
  ASSERT_TRUE(a.write(0, bytes_of(g2a)).ok()) << "pushes are still taken while degraded";
  std::vector<std::byte> back(kBytes);
  const auto t0 = Clock::now();
  const ScsiResult refused = a.read(0, back);
  EXPECT_LT(Clock::now() - t0, 3s) << "the refusal must come promptly, not at a timeout";
  EXPECT_TRUE(refused.check_condition(scsi::kNotReady, scsi::kAscNotReadyManualIntervention)) << refused.describe();
  const auto s = status_page();
  EXPECT_TRUE(s["rounds"]["degraded"].get<bool>()) << s["rounds"].dump();
  EXPECT_NE(s["rounds"]["degraded_reason"].get<std::string>().find("live workers 1 < min_workers=2"),
            std::string::npos);

  // b comes back (a new session) and pushes round 2: the round closes with a's and b's gradients.
  IscsiLun b2;
  ASSERT_NO_FATAL_FAILURE(connect(b2, "b"));
  reference_round(expected, {g2a, g2b}, 0.5f);
  const auto pulled = round({&b2}, {g2b});
  ASSERT_TRUE(pulled[0].result.ok()) << pulled[0].result.describe();
  EXPECT_EQ(pulled[0].weights, expected);
  ASSERT_TRUE(a.read(0, back).ok());
  EXPECT_EQ(floats_of(back), expected);
  EXPECT_FALSE(status_page()["rounds"]["degraded"].get<bool>());
}

// A job ends (or torchrun restarts all its ranks) and the next one starts on the same shard. Once every worker
// was dropped, the shard forms anew: a new first worker's push waits for the expected workers instead of
// closing rounds alone with min_workers=1, and both read the average of both.
TEST_F(SyncModeTest, AfterEveryWorkerLeftTheNextWorkersFormAnew) {
  ASSERT_NO_FATAL_FAILURE(start_shard("workers=2;min_workers=1;straggler_ms=60000;worker_timeout_ms=60000"));
  std::vector<float> expected(kBytes / 4, 0.0f);
  {
    IscsiLun a, b;
    ASSERT_NO_FATAL_FAILURE(connect(a, "a"));
    ASSERT_NO_FATAL_FAILURE(connect(b, "b"));
    const auto g1a = values(1), g1b = values(2);
    reference_round(expected, {g1a, g1b}, 0.5f);
    for (const Pulled& p : round({&a, &b}, {g1a, g1b})) ASSERT_TRUE(p.result.ok()) << p.result.describe();
  }  // both log out
  const auto t0 = Clock::now();
  nlohmann::json s;
  for (;;) {
    s = status_page();
    if (!s.is_null() && s["rounds"]["workers_dropped"] == 2) break;
    ASSERT_LT(Clock::now() - t0, 10s) << "the logged-out workers were not dropped: " << s.dump();
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_FALSE(s["rounds"]["degraded"].get<bool>()) << "an empty shard waits for a new job, it is not degraded";

  IscsiLun a2, b2;
  ASSERT_NO_FATAL_FAILURE(connect(a2, "a"));
  ASSERT_NO_FATAL_FAILURE(connect(b2, "b"));
  const auto g2a = values(3), g2b = values(4);
  ASSERT_TRUE(a2.write(0, bytes_of(g2a)).ok());  // alone, it must not close the round
  ASSERT_TRUE(b2.write(0, bytes_of(g2b)).ok());
  reference_round(expected, {g2a, g2b}, 0.5f);
  for (IscsiLun* w : {&a2, &b2}) {
    std::vector<std::byte> back(kBytes);
    ASSERT_TRUE(w->read(0, back).ok());
    EXPECT_EQ(floats_of(back), expected) << "a round closed without both new workers";
  }
}

// Errors flow to the commands owed them, through a real tgtd: the shard's store (the test double of
// tests/support/faulty_store.h, in the test-only module of tgt-modules-fault-injection/ beside the product's, whose
// hook reads BLOCKPS_FAULT_INJECTION_FILE) fails every update while a file exists. The push that closes the failing
// round, the READ parked for it and every later grad-LU command fail with HARDWARE ERROR, INTERNAL TARGET FAILURE; the
// status page says why; reset-rounds serves again. Runs on the engine BLOCKPS_TEST_DEVICE names (cpu here; gpu:0 on a
// GPU host, tests/gpu/run.sh).
class FailingStoreTest : public SyncModeTest {
 protected:
  void start_with_fault_hook(const std::string& options) {
    TgtdOptions o;
    o.module_dir = tgt_module_dir() + "-fault-injection";  // tests/integration/sync/CMakeLists.txt builds it there
    ASSERT_EQ(::access((o.module_dir + "/bs_blockps.so").c_str(), R_OK), 0) << o.module_dir << ": no test module";
    o.environment = {std::string(kFaultInjectionFileVariable) + "=" + fault()};
    const Status started = tgtd_.start(o);
    ASSERT_TRUE(started.ok()) << started.message();
    const Status s = add_blockps_shard(tgtd_, 1, kTarget, dir_.path("m.ckpt"), options);
    ASSERT_TRUE(s.ok()) << s.message();
  }
  std::string fault() const { return dir_.path("fault"); }
  void fail_updates() { std::ofstream(fault()) << "fail\n"; }
  static void expect_hardware_error(const ScsiResult& r, const char* what) {
    EXPECT_TRUE(r.check_condition(scsi::kHardwareError, scsi::kAscInternalTargetFailure))
        << what << ": " << r.describe();
  }
};

TEST_F(FailingStoreTest, SyncARoundWhoseUpdateFailsIsNeverAnsweredGoodOverOldWeights) {
  ASSERT_NO_FATAL_FAILURE(
      start_with_fault_hook("size=256K;block=64K;opt=sgd;lr=0.5;mode=sync;workers=2;"
                            "straggler_ms=60000;worker_timeout_ms=60000"));
  IscsiLun a, b, status;
  ASSERT_NO_FATAL_FAILURE(connect(a, "a"));
  ASSERT_NO_FATAL_FAILURE(connect(b, "b"));
  ASSERT_NO_FATAL_FAILURE(connect(status, "admin", 3));
  std::vector<float> expected(kBytes / 4, 0.0f);
  reference_round(expected, {values(1), values(2)}, 0.5f);
  for (const Pulled& p : round({&a, &b}, {values(1), values(2)})) ASSERT_TRUE(p.result.ok()) << p.result.describe();

  fail_updates();
  ASSERT_TRUE(a.write(0, bytes_of(values(3))).ok());
  auto a_pull = std::async(std::launch::async, [&a] {
    std::vector<std::byte> back(kBytes);
    return a.read(0, back);  // parked until round 2 closes
  });
  std::this_thread::sleep_for(200ms);
  expect_hardware_error(b.write(0, bytes_of(values(4))), "the push that closed the failing round");
  ASSERT_EQ(a_pull.wait_for(10s), std::future_status::ready) << "the parked READ was not answered";
  expect_hardware_error(a_pull.get(), "the READ parked for the failing round");
  std::vector<std::byte> back(kBytes);
  expect_hardware_error(b.read(0, back), "a later READ");
  expect_hardware_error(a.write(0, bytes_of(values(5))), "a later push");
  const auto s = status_page();
  EXPECT_TRUE(s["rounds"]["degraded"].get<bool>()) << s["rounds"].dump();
  EXPECT_GE(s["rounds"]["apply_failures"].get<int>(), 1);
  // The round's four blocks are updated in parallel (the CPU engine splits a large update over blocks), so the first
  // failure recorded may be any of them.
  EXPECT_TRUE(std::regex_search(s["rounds"]["degraded_reason"].get<std::string>(),
                                std::regex("^sync: round 2 of block [0-3] not applied: injected fault")))
      << s["rounds"].dump();
  EXPECT_NE(tgtd_.log_text().find("not applied: injected fault"), std::string::npos);

  // Fixed (the file is gone) and reset: the rounds go on from the last weights that were applied.
  std::remove(fault().c_str());
  std::vector<std::byte> line(512);
  const std::string reset = "reset-rounds\n";
  std::memcpy(line.data(), reset.data(), reset.size());
  ASSERT_TRUE(status.write(0, line).ok());
  reference_round(expected, {values(6), values(7)}, 0.5f);
  for (const Pulled& p : round({&a, &b}, {values(6), values(7)})) {
    ASSERT_TRUE(p.result.ok()) << p.result.describe();
    EXPECT_EQ(p.weights, expected);
  }
  EXPECT_FALSE(status_page()["rounds"]["degraded"].get<bool>());
}

TEST_F(FailingStoreTest, SspAPushWhoseUpdateFailsIsAnsweredHardwareErrorAndSoAreLaterCommands) {
  ASSERT_NO_FATAL_FAILURE(
      start_with_fault_hook("size=256K;block=64K;opt=sgd;lr=0.5;mode=ssp:1;workers=2;"
                            "worker_timeout_ms=60000"));
  IscsiLun a;
  ASSERT_NO_FATAL_FAILURE(connect(a, "a"));
  ASSERT_TRUE(a.write(0, bytes_of(values(1))).ok());
  std::vector<std::byte> before(kBytes);
  ASSERT_TRUE(a.read(0, before).ok());
  fail_updates();
  expect_hardware_error(a.write(0, bytes_of(values(2))), "the push whose update failed");
  std::vector<std::byte> back(kBytes);
  expect_hardware_error(a.read(0, back), "a later READ");
  const auto s = status_page();
  EXPECT_TRUE(s["rounds"]["degraded"].get<bool>()) << s["rounds"].dump();
  EXPECT_NE(s["rounds"]["degraded_reason"].get<std::string>().find("ssp: push of"), std::string::npos)
      << s["rounds"].dump();
}

TEST_F(SyncModeTest, AKilledTgtdRestartsFromTheLastCheckpointAndRoundsResume) {
  ASSERT_NO_FATAL_FAILURE(start_shard("workers=2;min_workers=2;straggler_ms=60000"));
  std::vector<float> at_checkpoint;
  {
    IscsiLun a, b;
    ASSERT_NO_FATAL_FAILURE(connect(a, "a"));
    ASSERT_NO_FATAL_FAILURE(connect(b, "b"));
    for (std::uint32_t r = 0; r < 2; ++r)
      for (const Pulled& p : round({&a, &b}, {values(r + 40), values(r + 50)})) ASSERT_TRUE(p.result.ok());
    ASSERT_TRUE(a.synchronize_cache().ok());  // fsync: a checkpoint after round 2
    std::vector<std::byte> w(kBytes);
    ASSERT_TRUE(a.read(0, w).ok());
    at_checkpoint = floats_of(w);
    const auto lost = round({&a, &b}, {values(60), values(61)});  // round 3: not checkpointed
    ASSERT_TRUE(lost[0].result.ok());
    ASSERT_NE(lost[0].weights, at_checkpoint);
  }
  ASSERT_TRUE(tgtd_.kill9().ok());
  ASSERT_TRUE(tgtd_.restart().ok());
  const Status s = add_blockps_shard(tgtd_, 1, kTarget, dir_.path("m.ckpt"), options_);
  ASSERT_TRUE(s.ok()) << s.message();
  const auto page = status_page();
  EXPECT_EQ(page["rounds"]["rounds_min"], 2) << "rounds resume from the checkpoint";
  IscsiLun a, b;
  ASSERT_NO_FATAL_FAILURE(connect(a, "a"));
  ASSERT_NO_FATAL_FAILURE(connect(b, "b"));
  std::vector<std::byte> w(kBytes);
  ASSERT_TRUE(a.read(0, w).ok());
  EXPECT_EQ(floats_of(w), at_checkpoint) << "exactly the checkpointed weights; only round 3 is lost";
  std::vector<float> expected = at_checkpoint;
  reference_round(expected, {values(70), values(71)}, 0.5f);
  for (const Pulled& p : round({&a, &b}, {values(70), values(71)})) {
    ASSERT_TRUE(p.result.ok()) << p.result.describe();
    EXPECT_EQ(p.weights, expected);
  }
  EXPECT_EQ(status_page()["rounds"]["rounds_min"], 3);
}

TEST_F(SyncModeTest, StatusLuControlLinesSetLrResetRoundsAndRefuseUnknownKeys) {
  ASSERT_NO_FATAL_FAILURE(start_shard("workers=1"));
  IscsiLun a, status;
  ASSERT_NO_FATAL_FAILURE(connect(a, "a"));
  ASSERT_NO_FATAL_FAILURE(connect(status, "a", 3));
  for (const Pulled& p : round({&a}, {values(1)})) ASSERT_TRUE(p.result.ok());
  const auto control = [&](const std::string& text) {
    std::vector<std::byte> block(512);
    std::memcpy(block.data(), text.data(), text.size());
    return status.write(0, block);
  };
  const ScsiResult bad = control("learning_rate=0.1\n");
  EXPECT_TRUE(bad.check_condition(scsi::kIllegalRequest, scsi::kAscInvalidFieldInParameterList)) << bad.describe();
  EXPECT_NE(tgtd_.log_text().find("refused control 'learning_rate=0.1': unknown"), std::string::npos);
  ASSERT_TRUE(control("lr=0.125\nreset-rounds\n").ok());
  const auto s = status_page();
  EXPECT_EQ(s["shard"]["lr"], 0.125);
  EXPECT_EQ(s["rounds"]["rounds_max"], 0);
}

}  // namespace
}  // namespace blockps::testing
