// libblockps against a 2-shard cluster: each shard its own tgtd (as on separate hosts) with grad, weights and
// status blockps LUs (opt=sum, so every expected value is exact), reached through the libiscsi transport and
// opened from a generated cluster file. Pulls land in the layout's positions (stripe and range, with a short
// last block), push then pull gives init + grads, async handles and callbacks, block ranges, 3 concurrent
// workers, mismatches refused with their message, and a dead shard reported as an error naming it.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <future>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "blockps/cluster.h"
#include "blockps/double_buffer.h"
#include "client/trace.h"
#include "client/transport/iscsi_lun.h"
#include "client/transport/lu_transport.h"
#include "tests/support/blockps_shard.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tgtd_instance.h"

namespace blockps::testing {
namespace {

constexpr std::uint64_t K = 1024;
constexpr int kShards = 2;
constexpr const char* kTestInitiator = "iqn.2026-11.io.blockps:client-test";

std::string shard_iqn(int s) { return "iqn.2026-11.io.blockps:client-shard" + std::to_string(s); }

// f32 values as wire bytes.
std::vector<std::byte> f32_bytes(const std::vector<float>& values) {
  std::vector<std::byte> out(values.size() * 4);
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}
std::vector<float> f32_values(std::span<const std::byte> bytes) {
  std::vector<float> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), out.size() * 4);
  return out;
}

// Small whole numbers: sums of them are exact in f32.
std::vector<float> whole_numbers(std::size_t n, int seed) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = static_cast<float>(static_cast<int>((i * 7 + static_cast<std::size_t>(seed) * 13) % 97) - 48);
  return v;
}

struct ModelShape {
  std::uint64_t size = 0;
  std::uint64_t block = 0;
  LayoutKind layout = LayoutKind::stripe;
};

class ClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    BLOCKPS_REQUIRE_TGTD_AND_MODULE();
    ASSERT_TRUE(dir_.create("blockps-client-").ok());
  }
  void TearDown() override {
    if (!HasFailure()) return;
    for (int s = 0; s < kShards; ++s)
      if (tgtd_[s].running()) std::cerr << "---- shard " << s << " tgtd log ----\n" << tgtd_[s].log_text() << "\n";
  }

  // Starts one tgtd per shard with the LUs the layout gives it: `shard_model` is what the shards are told
  // (size per the layout, dtype, block); a test of mismatches passes another shape to the cluster file.
  void start_shards(const ModelShape& shard_model, const std::string& dtype = "f32") {
    const auto layout = make_layout(shard_model.layout, shard_model.size, shard_model.block, kShards);
    for (int s = 0; s < kShards; ++s) {
      const std::string shape = "size=" + std::to_string(layout->shard_bytes(static_cast<std::size_t>(s))) +
                                ";block=" + std::to_string(shard_model.block) + ";dtype=" + dtype + ";opt=sum";
      const Status st =
          add_blockps_shard(tgtd_[s], 1, shard_iqn(s), dir_.path("shard" + std::to_string(s) + ".ckpt"), shape);
      ASSERT_TRUE(st.ok()) << st.message();
    }
  }

  // Shards of a 512K model in blocks of 64K, and a libiscsi transport to shard 0's grad LU (256K) in `lu`.
  void open_shard0_grad_lu(std::unique_ptr<LuTransport>& lu) {
    ASSERT_NO_FATAL_FAILURE(start_shards({512 * K, 64 * K, LayoutKind::stripe}));
    TransportOptions options;
    options.initiator = kTestInitiator;
    auto opened = open_libiscsi_transport(tgtd_[0].url(shard_iqn(0), 1), options);
    ASSERT_TRUE(opened.ok()) << opened.message();
    lu = std::move(opened.value());
  }

  // Writes a cluster file for the running shards and returns its path.
  std::string cluster_file(const ModelShape& m, const std::string& extra_client = {},
                           const std::string& dtype = "f32") {
    std::string text = "[model]\nsize = " + std::to_string(m.size) + "\ndtype = \"" + dtype +
                       "\"\nblock = " + std::to_string(m.block) + "\n[layout]\nkind = \"" +
                       std::string(to_string(m.layout)) + "\"\n[client]\nqueue_depth = 4\nmax_request = \"1M\"\n" +
                       extra_client;
    for (int s = 0; s < kShards; ++s) {
      text += "[[shard]]\nname = \"shard" + std::to_string(s) + "\"\n";
      text += "grad = \"" + tgtd_[s].url(shard_iqn(s), 1) + "\"\n";
      text += "weights = \"" + tgtd_[s].url(shard_iqn(s), 2) + "\"\n";
      text += "status = \"" + tgtd_[s].url(shard_iqn(s), 3) + "\"\n";
    }
    const std::string path = dir_.path("cluster" + std::to_string(++files_) + ".toml");
    std::ofstream(path) << text;
    return path;
  }

  std::unique_ptr<Cluster> open(const std::string& path) {
    auto c = Cluster::open(path);
    EXPECT_TRUE(c.ok()) << c.message();
    return c.ok() ? std::move(c.value()) : nullptr;
  }

  // One shard's weights LU, read or written directly (not through the client).
  std::vector<std::byte> read_weights_lu(int s) {
    IscsiLun lun;
    EXPECT_TRUE(lun.connect(tgtd_[s].url(shard_iqn(s), 2), kTestInitiator).ok());
    std::vector<std::byte> out(lun.capacity_bytes());
    const ScsiResult r = lun.read(0, out);
    EXPECT_TRUE(r.ok()) << r.describe();
    return out;
  }
  void write_weights_lu(int s, std::span<const std::byte> data) {
    IscsiLun lun;
    ASSERT_TRUE(lun.connect(tgtd_[s].url(shard_iqn(s), 2), kTestInitiator).ok());
    const ScsiResult r = lun.write(0, data);
    ASSERT_TRUE(r.ok()) << r.describe();
  }

  // Checks that `model` holds, at each block's model position, the shard bytes the layout puts there.
  void expect_in_layout_positions(const Layout& layout, std::span<const std::byte> model,
                                  const std::vector<std::vector<std::byte>>& shard_bytes) {
    for (std::uint64_t b = 0; b < layout.block_count(); ++b) {
      const BlockPlace p = layout.place(b);
      ASSERT_EQ(std::memcmp(model.data() + p.model_offset, shard_bytes[p.shard].data() + p.shard_offset, p.bytes), 0)
          << "block " << b << " (shard " << p.shard << " offset " << p.shard_offset << ")";
    }
  }

  void pull_returns_weights_in_layout_positions(LayoutKind kind) {
    // 7 blocks of 64K and a short last one of 4K: 8 blocks, uneven over 2 shards under range.
    const ModelShape m{7 * 64 * K + 4 * K, 64 * K, kind};
    ASSERT_NO_FATAL_FAILURE(start_shards(m));
    const auto layout = make_layout(kind, m.size, m.block, kShards);
    std::vector<std::vector<std::byte>> shards;
    for (int s = 0; s < kShards; ++s) {
      // Shard s holds 1000*s + i at element i: every element of the model names where it came from.
      std::vector<float> v(layout->shard_bytes(static_cast<std::size_t>(s)) / 4);
      for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(1000000 * s + static_cast<int>(i));
      shards.push_back(f32_bytes(v));
      ASSERT_NO_FATAL_FAILURE(write_weights_lu(s, shards.back()));
    }
    auto cluster = open(cluster_file(m));
    ASSERT_TRUE(cluster);
    std::vector<std::byte> model(cluster->model_bytes());
    const Status s = cluster->pull(model);
    ASSERT_TRUE(s.ok()) << s.message();
    expect_in_layout_positions(*layout, model, shards);
    std::vector<std::byte> snapshot(cluster->model_bytes());
    ASSERT_TRUE(cluster->read_weights(snapshot).ok());
    EXPECT_EQ(snapshot, model) << "the weights LUs and the grad LUs disagree";
  }

  // Every shard's tgtd sends a NOP-In every `interval_s` and drops a session after `count` unanswered (tgtadm: the
  // `blockps-nop-in` line of a shard conf).
  void send_nop_ins(int interval_s, int count) {
    for (int s = 0; s < kShards; ++s) {
      for (const auto& [name, value] : {std::pair{"nop_interval", interval_s}, std::pair{"nop_count", count}}) {
        const CommandResult r = tgtd_[s].tgtadm(
            {"--op", "update", "--mode", "target", "--tid", "1", "-n", name, "-v", std::to_string(value)});
        ASSERT_TRUE(r.ok()) << r.describe();
      }
    }
  }

  TempDir dir_;
  TgtdInstance tgtd_[kShards];
  int files_ = 0;
};

TEST_F(ClientTest, StripePullReturnsTheWeightsInLayoutPositions) {
  pull_returns_weights_in_layout_positions(LayoutKind::stripe);
}

TEST_F(ClientTest, RangePullReturnsTheWeightsInLayoutPositions) {
  pull_returns_weights_in_layout_positions(LayoutKind::range);
}

// libiscsi 1.19 answers a target's NOP-In with the CmdSN of the first PDU in its send queue; when that is an
// older WRITE's Data-Out, its next send fails ("outqueue[0]->cmdsn < expcmdsn") and the session is dropped
// (kLibiscsiImmediateWriteBytes). With 1 MiB WRITEs (256 KiB immediate data, the rest Data-Outs on R2T) and NOP-In
// every second, the first second of pushes lost the session every time (blockps_lu_io pushloop: after 8, 40
// and 55 writes). libblockps keeps libiscsi WRITEs within the immediate-data size: 6 s of pushes, 6 NOP-Ins or
// more, and the pulled weights are exactly init + every gradient pushed.
TEST_F(ClientTest, PushesKeepTheirSessionsThroughTheTargetsNopIns) {
  const ModelShape m{8 * 1024 * K, 256 * K};
  ASSERT_NO_FATAL_FAILURE(start_shards(m));
  ASSERT_NO_FATAL_FAILURE(send_nop_ins(1, 5));
  // Asked for 4 MiB requests and queue depth 8: READs get them, WRITEs stay within 256 KiB.
  const std::string path = cluster_file(m);
  std::string text = read_text_file(path);
  text.replace(text.find("queue_depth = 4\nmax_request = \"1M\""), 34, "queue_depth = 8\nmax_request = \"4M\"");
  std::ofstream(path) << text;
  auto c = open(path);
  ASSERT_NE(c, nullptr);
  const std::size_t n = m.size / 4;
  const auto init = whole_numbers(n, 1);
  const auto grad = whole_numbers(n, 2);
  ASSERT_TRUE(c->write_weights(f32_bytes(init)).ok());
  const auto grad_bytes = f32_bytes(grad);
  int pushes = 0;
  for (const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(6);
       std::chrono::steady_clock::now() < until; ++pushes) {
    const Status s = c->push(grad_bytes);
    ASSERT_TRUE(s.ok()) << "push " << pushes << ": " << s.message();
  }
  std::vector<std::byte> pulled(m.size);
  ASSERT_TRUE(c->pull(pulled).ok());
  const auto w = f32_values(pulled);
  for (std::size_t i = 0; i < n; ++i)
    ASSERT_EQ(w[i], init[i] + static_cast<float>(pushes) * grad[i])
        << "element " << i << " after " << pushes << " pushes";
}

// libiscsi answers a NOP-In only while it is serviced, and tgtd drops a session after nop_count unanswered ones: a
// worker idle for longer (an evaluation pass, a checkpoint save, a wait for a restarting peer) lost every session,
// and its next exchange logged in again, or gave its pushes up where the drop raced with them. Each shard's I/O
// thread answers them while it has nothing to run (LuTransport::keep_alive): idle for 6 s against a NOP-In every
// second and 2 unanswered allowed (a session left alone is dropped within 3 to 4.5 s), no session of the grad,
// weights or status LU is logged in again, tgtd closed none, and the weights are exact.
TEST_F(ClientTest, IdleSessionsAnswerTheTargetsNopInsAndStayLoggedIn) {
  const ModelShape m{512 * K, 64 * K};
  ASSERT_NO_FATAL_FAILURE(start_shards(m));
  ASSERT_NO_FATAL_FAILURE(send_nop_ins(1, 2));
  auto c = open(cluster_file(m));
  ASSERT_NE(c, nullptr);
  const std::size_t n = m.size / 4;
  const auto init = whole_numbers(n, 1);
  const auto grad = whole_numbers(n, 2);
  ASSERT_TRUE(c->write_weights(f32_bytes(init)).ok());
  std::vector<std::byte> pulled(m.size);
  for (int round = 1; round <= 2; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    if (round == 2) std::this_thread::sleep_for(std::chrono::seconds(6));  // idle: no command on any session
    const Status pushed = c->push(f32_bytes(grad));
    ASSERT_TRUE(pushed.ok()) << pushed.message();
    const Status s = c->pull(pulled);
    ASSERT_TRUE(s.ok()) << s.message();
    const auto w = f32_values(pulled);
    for (std::size_t i = 0; i < n; ++i)
      ASSERT_EQ(w[i], init[i] + static_cast<float>(round) * grad[i]) << "element " << i;
  }
  // The weights and status sessions were idle as long: they are used after it too.
  std::vector<std::byte> snapshot(m.size);
  ASSERT_TRUE(c->read_weights(snapshot).ok());
  EXPECT_EQ(snapshot, pulled);
  ASSERT_TRUE(c->status_pages().ok());
  auto counters = c->recovery_counters();
  ASSERT_TRUE(counters.ok()) << counters.message();
  for (int s = 0; s < kShards; ++s) {
    const LuQueueCounters& k = counters.value()[static_cast<std::size_t>(s)];
    EXPECT_EQ(k.reconnects, 0u) << "shard " << s << ": sessions lost while idle and logged in again";
    EXPECT_EQ(k.unanswered_writes_dropped, 0u) << "shard " << s;
    EXPECT_EQ(tgtd_[s].log_text().find("failed NOP-OUT"), std::string::npos)
        << "shard " << s << ": tgtd dropped a session";
  }
}

TEST_F(ClientTest, PushThenPullIsInitPlusGradsExactly) {
  for (LayoutKind kind : {LayoutKind::stripe, LayoutKind::range}) {
    SCOPED_TRACE(std::string(to_string(kind)));
    for (auto& t : tgtd_) ASSERT_TRUE(t.stop().ok());
    dir_ = TempDir();
    ASSERT_TRUE(dir_.create("blockps-client-").ok());
    // 2 MiB in 128K blocks: runs of up to 1 MiB, several requests per shard in flight.
    const ModelShape m{2048 * K, 128 * K, kind};
    ASSERT_NO_FATAL_FAILURE(start_shards(m));
    auto cluster = open(cluster_file(m));
    ASSERT_TRUE(cluster);
    const std::size_t n = cluster->model_bytes() / 4;
    const auto init = whole_numbers(n, 1);
    ASSERT_TRUE(cluster->write_weights(f32_bytes(init)).ok());
    std::vector<float> expected = init;
    for (int round = 0; round < 3; ++round) {
      const auto g = whole_numbers(n, 10 + round);
      const Status s = cluster->push(f32_bytes(g));
      ASSERT_TRUE(s.ok()) << s.message();
      for (std::size_t i = 0; i < n; ++i) expected[i] += g[i];
    }
    std::vector<std::byte> pulled(cluster->model_bytes());
    const Status s = cluster->pull(pulled);
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(f32_values(pulled), expected);
    // A pull into memory that is not 4K aligned (the libiscsi transport does not care; the posix one bounces).
    std::vector<std::byte> unaligned(cluster->model_bytes() + 1);
    ASSERT_TRUE(cluster->pull(std::span(unaligned).subspan(1)).ok());
    EXPECT_EQ(f32_values(std::span(unaligned).subspan(1)), expected);
  }
}

TEST_F(ClientTest, AsyncHandlesCallbacksAndBlockRanges) {
  const ModelShape m{1024 * K, 64 * K, LayoutKind::stripe};  // 16 blocks
  ASSERT_NO_FATAL_FAILURE(start_shards(m));
  auto cluster = open(cluster_file(m));
  ASSERT_TRUE(cluster);
  const std::size_t n = cluster->model_bytes() / 4;
  const auto g1 = f32_bytes(whole_numbers(n, 3));
  const auto g2 = f32_bytes(whole_numbers(n, 4));
  std::promise<std::string> called;
  Operation a = cluster->push_async(g1, [&](const Status& s) { called.set_value(s.ok() ? "ok" : s.message()); });
  Operation b = cluster->push_async(g2);
  EXPECT_TRUE(a.wait().ok());
  EXPECT_TRUE(b.wait().ok());
  EXPECT_TRUE(a.ready() && b.ready());
  EXPECT_EQ(called.get_future().get(), "ok");
  std::vector<float> expected(n);
  const auto v1 = f32_values(g1), v2 = f32_values(g2);
  for (std::size_t i = 0; i < n; ++i) expected[i] = v1[i] + v2[i];

  // Blocks [5, 9): push ones there; only those blocks change.
  const std::uint64_t first = 5, count = 4;
  std::vector<float> ones(count * m.block / 4, 1.0f);
  Status s = cluster->push_blocks(first, count, f32_bytes(ones));
  ASSERT_TRUE(s.ok()) << s.message();
  for (std::uint64_t i = first * m.block / 4; i < (first + count) * m.block / 4; ++i) expected[i] += 1.0f;
  std::vector<std::byte> pulled(cluster->model_bytes());
  Operation p = cluster->pull_async(pulled);
  ASSERT_TRUE(p.wait().ok());
  EXPECT_EQ(f32_values(pulled), expected);
  std::vector<std::byte> part(count * m.block);
  ASSERT_TRUE(cluster->pull_blocks(first, count, part).ok());
  EXPECT_EQ(f32_values(part),
            std::vector<float>(expected.begin() + static_cast<std::ptrdiff_t>(first * m.block / 4),
                               expected.begin() + static_cast<std::ptrdiff_t>((first + count) * m.block / 4)));

  // Wrong sizes and ranges are errors, not crashes.
  std::vector<std::byte> small(100);
  EXPECT_EQ(cluster->pull(small).message(), "pull: the buffer holds 100 bytes, blocks [0, 16) are 1048576 bytes");
  EXPECT_EQ(cluster->push_blocks(15, 2, g1).message(), "push: blocks [15, 17) are outside the model's 16 blocks");
}

// The pipelined exchange (async shards, opt=sum): every pulled block includes this push of it, so each
// exchange returns init + every gradient so far, exactly; READs went out while WRITEs were in flight on each
// shard's one session (the transport's own counters, not a clock).
TEST_F(ClientTest, ExchangeReturnsTheWeightsWithItsOwnPushOfEveryBlock) {
  const ModelShape m{2048 * K, 64 * K, LayoutKind::stripe};  // 32 blocks
  ASSERT_NO_FATAL_FAILURE(start_shards(m));
  // 64K requests: 16 WRITEs and 16 READs per shard at queue depth 4.
  const std::string path = cluster_file(m);
  std::string text = read_text_file(path);
  text.replace(text.find("max_request = \"1M\""), 18, "max_request = \"64K\"");
  std::ofstream(path) << text;
  auto cluster = open(path);
  ASSERT_TRUE(cluster);
  const std::size_t n = cluster->model_bytes() / 4;
  const auto init = whole_numbers(n, 1);
  ASSERT_TRUE(cluster->write_weights(f32_bytes(init)).ok());
  std::vector<float> expected = init;
  std::vector<std::byte> pulled(cluster->model_bytes());
  for (int round = 0; round < 3; ++round) {
    const auto g = whole_numbers(n, 20 + round);
    const Status s = cluster->exchange(f32_bytes(g), pulled);
    ASSERT_TRUE(s.ok()) << s.message();
    for (std::size_t i = 0; i < n; ++i) expected[i] += g[i];
    ASSERT_EQ(f32_values(pulled), expected) << "round " << round;
  }
  // In place: the gradients' buffer receives the weights.
  const auto g_inplace = whole_numbers(n, 30);
  auto inplace = f32_bytes(g_inplace);
  for (std::size_t i = 0; i < n; ++i) expected[i] += g_inplace[i];
  ASSERT_TRUE(cluster->exchange(inplace, inplace).ok());
  EXPECT_EQ(f32_values(inplace), expected);
  // Asynchronous, on blocks [3, 11), with a callback.
  const std::uint64_t first = 3, count = 8;
  std::vector<float> ones(count * m.block / 4, 1.0f);
  std::vector<std::byte> part(count * m.block);
  std::promise<std::string> called;
  const auto ones_bytes = f32_bytes(ones);
  Operation op = cluster->exchange_blocks_async(
      first, count, ones_bytes, part, [&](const Status& s) { called.set_value(s.ok() ? "ok" : s.message()); });
  ASSERT_TRUE(op.wait().ok());
  EXPECT_EQ(called.get_future().get(), "ok");
  for (std::uint64_t i = first * m.block / 4; i < (first + count) * m.block / 4; ++i) expected[i] += 1.0f;
  EXPECT_EQ(f32_values(part),
            std::vector<float>(expected.begin() + static_cast<std::ptrdiff_t>(first * m.block / 4),
                               expected.begin() + static_cast<std::ptrdiff_t>((first + count) * m.block / 4)));
  auto counters = cluster->grad_queue_counters();
  ASSERT_TRUE(counters.ok()) << counters.message();
  for (int s = 0; s < kShards; ++s) {
    EXPECT_GT((*counters)[s].issued_beside_other_direction, 0u) << "shard " << s << ": READs and WRITEs never "
                                                                << "shared the session's queue";
  }
  // Wrong sizes are errors naming the buffer, before any I/O.
  std::vector<std::byte> small(100);
  EXPECT_EQ(cluster->exchange(small, pulled).message(),
            "exchange: the gradient buffer holds 100 bytes, blocks [0, 32) are 2097152 bytes");
  EXPECT_EQ(cluster->exchange(pulled, small).message(),
            "exchange: the weights buffer holds 100 bytes, blocks [0, 32) are 2097152 bytes");
}

// Exchanges queued behind each other run on a shard as one batch: the next exchange's WRITEs go out while the
// READs before it are still in flight (each exchange alone drained the link first). 32 exchanges of one block each,
// queued at once: every pulled block holds its own push (a READ renumbered onto the wrong WRITE would return the
// weights before it), and the two directions shared the session's queue, which one-block exchanges run one at a
// time never do.
TEST_F(ClientTest, QueuedExchangesRunAsOneBatchEachReadingAfterItsOwnWrite) {
  const ModelShape m{2048 * K, 64 * K, LayoutKind::stripe};  // 32 blocks
  ASSERT_NO_FATAL_FAILURE(start_shards(m));
  auto cluster = open(cluster_file(m));
  ASSERT_TRUE(cluster);
  const std::size_t n = cluster->model_bytes() / 4, per_block = m.block / 4;
  const auto init = whole_numbers(n, 1);
  ASSERT_TRUE(cluster->write_weights(f32_bytes(init)).ok());
  auto before = cluster->grad_queue_counters();
  ASSERT_TRUE(before.ok()) << before.message();
  const auto g = whole_numbers(n, 7);
  const auto g_bytes = f32_bytes(g);
  std::vector<std::byte> pulled(cluster->model_bytes());
  const std::span<const std::byte> grads(g_bytes);
  // Queued behind each other for certain, not by how fast this thread posts them against how fast the shards answer
  // (on CI's loaded host a shard once ran its 16 one at a time): the callbacks of the first exchange of each shard
  // (blocks 0 and 1, stripe) run on that shard's I/O thread and hold it until all 32 are posted, so each shard's
  // other 15 queue up behind its first. (Bounded, should one finish on this thread with an error.)
  std::promise<void> all_posted;
  std::shared_future<void> posted = all_posted.get_future().share();
  std::vector<Operation> ops;
  const auto post = [&](std::uint64_t b, CompletionCallback on_done) {
    ops.push_back(cluster->exchange_blocks_async(b, 1, grads.subspan(b * m.block, m.block),
                                                 std::span(pulled).subspan(b * m.block, m.block), std::move(on_done)));
  };
  const auto hold_the_shard = [posted](const Status&) { posted.wait_for(std::chrono::seconds(10)); };
  for (std::uint64_t b = 0; b < 32; ++b)
    post(b, b < static_cast<std::uint64_t>(kShards) ? CompletionCallback(hold_the_shard) : nullptr);
  all_posted.set_value();
  for (const Operation& op : ops) ASSERT_TRUE(op.wait().ok());
  std::vector<float> expected(n);
  for (std::size_t i = 0; i < n; ++i) expected[i] = init[i] + g[i];
  EXPECT_EQ(f32_values(pulled), expected);
  auto after = cluster->grad_queue_counters();
  ASSERT_TRUE(after.ok()) << after.message();
  for (int s = 0; s < kShards; ++s) {
    EXPECT_GT((*after)[s].issued_beside_other_direction - (*before)[s].issued_beside_other_direction, 0u)
        << "shard " << s << ": no WRITE of a queued exchange went out beside a READ of the one before: they ran "
        << "one at a time (" << per_block << " elements per block)";
  }
}

// BLOCKPS_TRACE: every transfer is a span on its shard's lane with the bytes it moved, every double-buffer step
// a compute and a wait span on the loop's lane, and the file is a trace-event array that a JSON parser reads.
TEST_F(ClientTest, BlockpsTraceRecordsEachShardsTransfersAndTheLoopsSteps) {
  const ModelShape m{512 * K, 64 * K, LayoutKind::stripe};
  ASSERT_NO_FATAL_FAILURE(start_shards(m));
  const std::string prefix = dir_.path("trace");
  ASSERT_EQ(::setenv(Trace::kEnvironmentVariable, prefix.c_str(), 1), 0);
  auto cluster = open(cluster_file(m));
  ::unsetenv(Trace::kEnvironmentVariable);
  ASSERT_TRUE(cluster);
  ASSERT_NE(cluster->trace(), nullptr);
  const std::string path = cluster->trace()->path();
  EXPECT_EQ(path.rfind(prefix + "." + std::to_string(::getpid()) + ".", 0), 0u) << path;
  std::vector<std::byte> grads(cluster->model_bytes()), weights(cluster->model_bytes());
  ASSERT_TRUE(cluster->push(grads).ok());
  ASSERT_TRUE(cluster->pull(weights).ok());
  ASSERT_TRUE(cluster->exchange(grads, weights).ok());
  {
    PipelineOptions options;
    options.mode = PipelineMode::double_buffer;
    options.adaptive_pull = false;  // every step one exchange (no bubble splitting it into push and pull)
    auto db = DoubleBuffer::create(*cluster, options);
    ASSERT_TRUE(db.ok()) << db.message();
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(db.value()->step().ok());
  }
  cluster.reset();  // closes the trace
  // Off: no trace, nothing timed. A prefix whose file cannot be made: the open fails and says why.
  ASSERT_EQ(std::unique_ptr<Cluster>(open(cluster_file(m)))->trace(), nullptr);
  ASSERT_EQ(::setenv(Trace::kEnvironmentVariable, dir_.path("no-such-dir/trace").c_str(), 1), 0);
  const auto refused = Cluster::open(cluster_file(m));
  ::unsetenv(Trace::kEnvironmentVariable);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("BLOCKPS_TRACE: cannot create " + dir_.path("no-such-dir/trace")), std::string::npos)
      << refused.message();

  std::ifstream in(path);
  const nlohmann::json events = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(events.is_array()) << path << " is not a JSON array";
  std::map<int, std::string> lane_names;
  std::map<std::pair<int, std::string>, int> spans;  // (lane, name) -> count
  std::map<int, std::uint64_t> transfer_bytes;       // lane -> bytes of its push, pull and exchange spans
  std::map<int, std::uint64_t> span_bytes;           // lane -> bytes of all its spans (weights LU's included)
  std::map<int, std::uint64_t> command_bytes;        // command lane -> bytes of its READ and WRITE spans
  for (const auto& e : events) {
    if (e.at("ph") == "M") {
      lane_names[e.at("tid").get<int>()] = e.at("args").at("name").get<std::string>();
      continue;
    }
    ASSERT_EQ(e.at("ph"), "X") << e.dump();
    EXPECT_GE(e.at("dur").get<double>(), 0.0) << e.dump();
    EXPECT_GE(e.at("ts").get<double>(), 0.0) << e.dump();
    const int lane = e.at("tid").get<int>();
    const std::string name = e.at("name").get<std::string>();
    if (e.at("cat") == "command") {
      EXPECT_TRUE(name == "READ" || name == "WRITE") << e.dump();
      command_bytes[lane] += e.at("args").at("bytes").get<std::uint64_t>();
      continue;
    }
    ++spans[{lane, name}];
    if (lane != Trace::kLoopLane && e.contains("args"))
      span_bytes[lane] += e.at("args").value("bytes", std::uint64_t{0});
    if (lane != Trace::kLoopLane && name != "read_weights" && name != "write_weights")
      transfer_bytes[lane] += e.at("args").at("bytes").get<std::uint64_t>();
  }
  const auto count = [&spans](int lane, const std::string& name) { return spans[std::pair(lane, name)]; };
  const auto layout = make_layout(m.layout, m.size, m.block, kShards);
  for (int s = 0; s < kShards; ++s) {
    const int lane = Trace::shard_lane(static_cast<std::size_t>(s));
    EXPECT_EQ(lane_names[lane], "shard shard" + std::to_string(s));
    EXPECT_EQ(count(lane, "push"), 1);
    EXPECT_EQ(count(lane, "pull"), 1 + 1);  // DoubleBuffer::create pulls once for both buffers
    // The exchange and the double buffer's three: each an exchange span of its own, unless it was queued while the
    // shard's stream ran and joined that stream's span (issue 48). Their bytes, below, are every exchange's.
    EXPECT_GE(count(lane, "exchange"), 1);
    EXPECT_LE(count(lane, "exchange"), 1 + 3);
    // Shard bytes moved: push 1, pull 1, exchange 2 (its WRITEs and its READs), the double buffer's pull 1 and
    // three exchanges 6.
    EXPECT_EQ(transfer_bytes[lane], (1 + 1 + 2 + 1 + 6) * layout->shard_bytes(static_cast<std::size_t>(s)));
    // Every command of the shard's spans is on its command lane, once.
    const int commands = Trace::command_lane(static_cast<std::size_t>(s));
    EXPECT_EQ(lane_names[commands], "shard shard" + std::to_string(s) + ": commands");
    EXPECT_EQ(command_bytes[commands], span_bytes[lane]);
  }
  EXPECT_EQ(count(Trace::kLoopLane, "compute"), 3);
  EXPECT_EQ(count(Trace::kLoopLane, "wait"), 3);
}

TEST_F(ClientTest, ThreeConcurrentWorkersGiveExactlyTheSum) {
  const ModelShape m{1024 * K, 64 * K, LayoutKind::stripe};
  ASSERT_NO_FATAL_FAILURE(start_shards(m));
  const std::size_t n = m.size / 4;
  constexpr int kWorkers = 3, kRounds = 4;
  std::vector<std::string> errors(kWorkers);
  std::vector<std::thread> workers;
  for (int w = 0; w < kWorkers; ++w) {
    const std::string path =
        cluster_file(m, "initiator = \"iqn.2026-11.io.blockps:client-worker" + std::to_string(w) + "\"\n");
    workers.emplace_back([&, w, path] {
      auto c = Cluster::open(path);
      if (!c.ok()) {
        errors[w] = c.message();
        return;
      }
      const auto g = f32_bytes(whole_numbers(n, 100 + w));
      for (int r = 0; r < kRounds; ++r) {
        if (Status s = c.value()->push(g); !s.ok()) {
          errors[w] = s.message();
          return;
        }
      }
    });
  }
  for (std::thread& t : workers) t.join();
  for (int w = 0; w < kWorkers; ++w) ASSERT_EQ(errors[w], "") << "worker " << w;
  std::vector<float> expected(n, 0.0f);
  for (int w = 0; w < kWorkers; ++w) {
    const auto g = whole_numbers(n, 100 + w);
    for (std::size_t i = 0; i < n; ++i) expected[i] += kRounds * g[i];
  }
  auto cluster = open(cluster_file(m));
  ASSERT_TRUE(cluster);
  std::vector<std::byte> pulled(cluster->model_bytes());
  ASSERT_TRUE(cluster->pull(pulled).ok());
  EXPECT_EQ(f32_values(pulled), expected);
}

TEST_F(ClientTest, MismatchesWithTheShardsAreRefusedWithTheirMessage) {
  const ModelShape m{512 * K, 64 * K, LayoutKind::stripe};  // each shard 256K
  ASSERT_NO_FATAL_FAILURE(start_shards(m));
  {
    const std::string path = cluster_file({1024 * K, 64 * K, LayoutKind::stripe});
    auto c = Cluster::open(path);
    ASSERT_FALSE(c.ok());
    EXPECT_NE(c.message().find(path + ": shard 'shard0' grad LU (" + tgtd_[0].url(shard_iqn(0), 1) +
                               "): capacity is 262144 bytes, the layout gives this shard 524288"),
              std::string::npos)
        << c.message();
  }
  {
    const std::string path = cluster_file({512 * K, 128 * K, LayoutKind::stripe});  // shards still 256K each
    auto c = Cluster::open(path);
    ASSERT_FALSE(c.ok());
    EXPECT_NE(c.message().find(path + ": shard 'shard0': status page says block = 65536 bytes, the cluster file "
                                      "says block = 131072"),
              std::string::npos)
        << c.message();
  }
  {
    const std::string path = cluster_file({512 * K, 64 * K, LayoutKind::stripe}, {}, "bf16");
    auto c = Cluster::open(path);
    ASSERT_FALSE(c.ok());
    EXPECT_NE(c.message().find(path + ": shard 'shard0': status page says dtype = f32, the cluster file says "
                                      "dtype = bf16"),
              std::string::npos)
        << c.message();
  }
  {
    ModelShape wrong = m;
    wrong.layout = LayoutKind::range;  // the same sizes here: range must still agree with the shards
    auto c = Cluster::open(cluster_file(wrong));
    EXPECT_TRUE(c.ok()) << c.message();
  }
}

// With reconnect_s = 0 (test_reconnect.cpp has the default's recovery).
TEST_F(ClientTest, ADeadShardIsAnErrorNamingItNotACrash) {
  const ModelShape m{1024 * K, 64 * K, LayoutKind::stripe};
  ASSERT_NO_FATAL_FAILURE(start_shards(m));
  auto cluster = open(cluster_file(m, "reconnect_s = 0\n"));
  ASSERT_TRUE(cluster);
  std::vector<std::byte> buf(cluster->model_bytes());
  ASSERT_TRUE(cluster->pull(buf).ok());
  ASSERT_TRUE(tgtd_[1].kill9().ok());
  const Status s = cluster->pull(buf);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("shard 'shard1' grad LU (" + tgtd_[1].url(shard_iqn(1), 1) + "): read of "),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("at shard byte offset "), std::string::npos) << s.message();
  // The session stays down: later calls fail fast with the same shard named, and the other shard still works.
  const Status again = cluster->push(buf);
  EXPECT_NE(again.message().find("shard 'shard1'"), std::string::npos) << again.message();
  // An exchange fails the same way, naming the shard, and returns (nothing waits for the dead shard's READs).
  const Status exchanged = cluster->exchange(buf, buf);
  EXPECT_NE(exchanged.message().find("shard 'shard1'"), std::string::npos) << exchanged.message();
  // A cluster whose shard is unreachable does not open.
  auto c = Cluster::open(cluster_file(m));
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.message().find("shard 'shard1' grad LU"), std::string::npos) << c.message();
}

TEST_F(ClientTest, TheLibiscsiTransportReportsSenseAsAValue) {
  std::unique_ptr<LuTransport> lu;
  ASSERT_NO_FATAL_FAILURE(open_shard0_grad_lu(lu));
  ASSERT_EQ(lu->capacity_bytes(), 256 * K);
  // Three reads; the second runs past the end of the LU: the target answers CHECK CONDITION.
  std::vector<std::byte> buf(3 * 64 * K);
  const std::vector<LuCommand> commands{
      {IoDirection::read, 0, {{buf.data(), 64 * K}}},
      {IoDirection::read, 256 * K - 4096, {{buf.data() + 64 * K, 64 * K}}},
      {IoDirection::read, 64 * K, {{buf.data() + 128 * K, 64 * K}}},
  };
  const auto failure = lu->run(commands, {.depth = 1});
  ASSERT_TRUE(failure.has_value());
  EXPECT_EQ(failure->command, 1u);
  EXPECT_EQ(failure->reason(), "CHECK CONDITION ILLEGAL_REQUEST(0x05) LBA_OUT_OF_RANGE(0x2100)");
  EXPECT_EQ(failure->status.code(), StatusCode::io);
  // The session survives a SCSI error: the next batch works.
  EXPECT_FALSE(lu->run(std::span(commands).first(1), {.depth = 4}).has_value());
}

// A target that has something to report (here: LUs added to the target while the worker is logged in, as a
// restarted shard's weights and status LUs can come after a worker's grad session is back) answers the next
// command with a UNIT ATTENTION instead of running it, one per LU added (tgt). The command is sent again and runs,
// in a batch and alone, up to kUnitAttentionResends times; past that the UNIT ATTENTION is the command's failure,
// and the session goes on.
TEST_F(ClientTest, CommandsAnsweredWithUnitAttentionAreSentAgain) {
  std::unique_ptr<LuTransport> lu;
  ASSERT_NO_FATAL_FAILURE(open_shard0_grad_lu(lu));
  IscsiLun alone;
  ASSERT_TRUE(alone.connect(tgtd_[0].url(shard_iqn(0), 2), kTestInitiator).ok());
  int next_lun = 4;  // after the shard's grad, weights and status LUs
  const auto add_lus = [&](int n) {
    for (int i = 0; i < n; ++i) {
      const CommandResult r = tgtd_[0].add_lu(1, next_lun++, "null", "null");
      ASSERT_TRUE(r.ok()) << r.describe();
    }
  };
  std::vector<std::byte> buf(2 * 64 * K);
  const std::vector<LuCommand> reads{
      {IoDirection::read, 0, {{buf.data(), 64 * K}}},
      {IoDirection::read, 64 * K, {{buf.data() + 64 * K, 64 * K}}},
  };
  ASSERT_NO_FATAL_FAILURE(add_lus(2));
  const auto batch = lu->run(reads, {.depth = 2});
  EXPECT_FALSE(batch.has_value()) << batch->reason();
  EXPECT_EQ(lu->queue_counters().unit_attentions_resent, 2u) << "one per LU added";
  const ScsiResult read = alone.read(0, std::span(buf).first(64 * K));
  EXPECT_TRUE(read.ok()) << read.describe();

  ASSERT_NO_FATAL_FAILURE(add_lus(kUnitAttentionResends + 1));
  const auto failure = lu->run(std::span(reads).first(1), {.depth = 1});
  ASSERT_TRUE(failure.has_value()) << "a command answered UNIT ATTENTION " << kUnitAttentionResends + 1
                                   << " times in a row succeeded";
  EXPECT_EQ(failure->reason(), "CHECK CONDITION UNIT_ATTENTION(0x06) REPORTED_LUNS_DATA_HAS_CHANGED(0x3f0e)");
  EXPECT_EQ(lu->queue_counters().unit_attentions_resent, 2u + kUnitAttentionResends);
  EXPECT_FALSE(lu->run(reads, {.depth = 2}).has_value()) << "the session did not go on";
}

TEST_F(ClientTest, AnIserUrlWithoutRdmaIsAClearError) {
  const ModelShape m{512 * K, 64 * K, LayoutKind::stripe};
  ASSERT_NO_FATAL_FAILURE(start_shards(m));
  const std::string path = cluster_file(m);
  // The same shard through iSER: libiscsi (built with iSER) needs an RDMA device, which these hosts lack.
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string tcp = tgtd_[0].url(shard_iqn(0), 1);
  const std::string iser = "iser://" + tcp.substr(std::string("iscsi://").size());
  text.replace(text.find(tcp), tcp.size(), iser);
  std::ofstream(path) << text;
  auto c = Cluster::open(path);
  if (c.ok()) GTEST_SKIP() << "TEST SKIPPED: an iSER login worked: this host has RDMA (nothing to refuse)";
  EXPECT_NE(c.message().find("shard 'shard0' grad LU (" + iser + "): iSER "), std::string::npos) << c.message();
}

}  // namespace
}  // namespace blockps::testing
