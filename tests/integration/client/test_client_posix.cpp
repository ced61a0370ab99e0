// The posix transport (O_DIRECT) with each engine (psync, libaio, io_uring), through the whole Cluster: plain
// files on the local disk stand in for the shards' /dev/sdX devices (one file per shard serves as both its grad
// and its weights LU, a file holding a status page as its status LU). Files behave as plain disks (no
// optimizer), so what is pushed is what is pulled: the test pins the layout positions, the alignment bounce,
// the engines' queueing and the error path. As root, loop devices (direct I/O) over such files are real block
// devices for the transport's device path. The run against real /dev/sdX devices of a kernel initiator (the PS
// behind them) is in the VM issue (docs/ARCHITECTURE.md, "Facts about the machines"). The file tests need no root: they
// run wherever the disk supports O_DIRECT (not tmpfs).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/magic.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <vector>

#include "blockps/cluster.h"
#include "client/job_and_place.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"

namespace blockps::testing {
namespace {

constexpr std::uint64_t K = 1024;
constexpr std::size_t kShards = 2;

std::vector<std::byte> pattern(std::size_t bytes, int seed) {
  std::vector<std::byte> out(bytes);
  std::uint32_t x = 2463534242u + static_cast<std::uint32_t>(seed);
  for (std::byte& b : out) {
    x ^= x << 13, x ^= x >> 17, x ^= x << 5;  // xorshift: every byte differs from its neighbours
    b = static_cast<std::byte>(x);
  }
  return out;
}

std::vector<std::byte> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(raw.size());
  std::memcpy(out.data(), raw.data(), raw.size());
  return out;
}

void write_file(const std::string& path, std::span<const std::byte> data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
}

class PosixClientTest : public ::testing::TestWithParam<PosixEngine> {
 protected:
  void SetUp() override {
    ASSERT_TRUE(dir_.create("blockps-client-posix-").ok());
    struct statfs fs {};
    ASSERT_EQ(::statfs(dir_.path().c_str(), &fs), 0);
    if (fs.f_type == TMPFS_MAGIC)
      GTEST_SKIP() << "TEST SKIPPED: " << dir_.path() << " is tmpfs (no O_DIRECT); set TMPDIR to a disk";
  }

  // Shard files for `m` and a cluster config over them.
  ClusterConfig make_cluster(LayoutKind kind, std::uint64_t size, std::uint64_t block) {
    ClusterConfig c;
    c.source = "posix-test";
    c.model = {size, WireDtype::f32, block, /*name=*/{}};
    c.layout = kind;
    c.client.initiator = "iqn.2026-11.io.blockps:unused";
    c.client.queue_depth = 4;
    c.client.engine = GetParam();
    c.client.max_request_bytes = 256 * K;
    const auto layout = make_layout(kind, size, block, kShards);
    for (std::size_t s = 0; s < kShards; ++s) {
      const std::string dev = dir_.path("sd" + std::string(1, static_cast<char>('b' + s)));
      const std::string status = dev + ".status";
      write_file(dev, std::vector<std::byte>(layout->shard_bytes(s)));
      // A shard's page as the module writes it: its shape, no job, and the place this file gives it (so the cluster
      // has nothing to write to this "status LU", a plain file).
      std::string page =
          "{\"shard\": {\"size\": " + std::to_string(layout->shard_bytes(s)) +
          ", \"dtype\": \"f32\", \"block\": " + std::to_string(block) +
          ", \"opt\": \"sum\"}, \"counters\": {}, \"job\": {\"holder\": \"\"}, \"place\": {\"text\": \"" +
          format_place(place_in("m-posix", s, kShards, kind)) + "\"}}";
      std::vector<std::byte> padded(4096);
      std::memcpy(padded.data(), page.data(), page.size());
      write_file(status, padded);
      c.shards.push_back({"shard" + std::to_string(s),
                          {LuAddress::Kind::device_path, dev},
                          {LuAddress::Kind::device_path, dev},
                          {LuAddress::Kind::device_path, status}});
    }
    return c;
  }

  TempDir dir_;
};

TEST_P(PosixClientTest, PushAndPullLandInTheLayoutPositions) {
  for (LayoutKind kind : {LayoutKind::stripe, LayoutKind::range}) {
    SCOPED_TRACE(std::string(to_string(kind)));
    // 9 blocks of 64K and a short 4K one: runs of 4 blocks, several in flight per shard.
    const std::uint64_t size = 9 * 64 * K + 4 * K, block = 64 * K;
    const ClusterConfig config = make_cluster(kind, size, block);
    const auto layout = make_layout(kind, size, block, kShards);

    // Weights put on the "devices" directly: pull must find each block where the layout says.
    std::vector<std::vector<std::byte>> devices;
    for (std::size_t s = 0; s < kShards; ++s) {
      devices.push_back(pattern(layout->shard_bytes(s), static_cast<int>(s) + 1));
      write_file(config.shards[s].grad.text, devices.back());
    }
    auto cluster = Cluster::open(config);
    ASSERT_TRUE(cluster.ok()) << cluster.message();
    Cluster& c = *cluster.value();
    std::vector<std::byte> model(c.model_bytes());
    Status st = c.pull(model);
    ASSERT_TRUE(st.ok()) << st.message();
    for (std::uint64_t b = 0; b < layout->block_count(); ++b) {
      const BlockPlace p = layout->place(b);
      ASSERT_EQ(std::memcmp(model.data() + p.model_offset, devices[p.shard].data() + p.shard_offset, p.bytes), 0)
          << "block " << b;
    }

    // A push from memory that is not aligned (bounced), then an aligned pull and the devices' contents.
    const auto pushed = pattern(c.model_bytes(), 99);
    std::vector<std::byte> unaligned(pushed.size() + 3);
    std::memcpy(unaligned.data() + 3, pushed.data(), pushed.size());
    st = c.push(std::span<const std::byte>(unaligned).subspan(3));
    ASSERT_TRUE(st.ok()) << st.message();
    std::vector<std::byte> again(c.model_bytes());
    ASSERT_TRUE(c.pull_async(again).wait().ok());
    EXPECT_EQ(again, pushed);
    for (std::size_t s = 0; s < kShards; ++s) devices[s] = read_file(config.shards[s].grad.text);
    for (std::uint64_t b = 0; b < layout->block_count(); ++b) {
      const BlockPlace p = layout->place(b);
      ASSERT_EQ(std::memcmp(pushed.data() + p.model_offset, devices[p.shard].data() + p.shard_offset, p.bytes), 0)
          << "block " << b << " on the device after the push";
    }
    auto pages = c.status_pages();
    ASSERT_TRUE(pages.ok()) << pages.message();
    EXPECT_EQ(pages->size(), kShards);
    EXPECT_NE(pages->at(1).json.find("\"dtype\": \"f32\""), std::string::npos);
  }
}

// A loop device (direct I/O) over a plain file: a real block device, so the transport's device path runs
// (BLKGETSIZE64, BLKSSZGET, O_DIRECT on a device). Root only; detached whatever happens.
class LoopDevice {
 public:
  ~LoopDevice() {
    if (!path_.empty()) run_command({"losetup", "-d", path_});
  }
  Status attach(const std::string& file) {
    const CommandResult r = run_command({"losetup", "--find", "--show", "--direct-io=on", file});
    if (!r.ok()) return Status::Error(r.describe());
    const auto at = r.output.find("/dev/loop");  // the output also holds stderr: find the device's line
    if (at == std::string::npos) return Status::Error("losetup printed no device: " + r.output);
    path_ = r.output.substr(at, r.output.find('\n', at) - at);
    return Status::Ok();
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST_P(PosixClientTest, LoopDevicesStandInForTheShardDevices) {
  if (::geteuid() != 0) GTEST_SKIP() << "INTEGRATION TEST SKIPPED: loop devices need root";
  const std::uint64_t size = 8 * 64 * K, block = 64 * K;
  ClusterConfig config = make_cluster(LayoutKind::stripe, size, block);
  LoopDevice loops[kShards];
  std::vector<std::string> files;
  for (std::size_t s = 0; s < kShards; ++s) {
    if (Status st = loops[s].attach(config.shards[s].grad.text); !st.ok())
      GTEST_SKIP() << "INTEGRATION TEST SKIPPED: no loop device here: " << st.message();
    files.push_back(config.shards[s].grad.text);
    config.shards[s].grad.text = config.shards[s].weights.text = loops[s].path();
  }
  auto cluster = Cluster::open(config);
  ASSERT_TRUE(cluster.ok()) << cluster.message();
  const auto pushed = pattern(size, 7);
  Status st = cluster.value()->push(pushed);
  ASSERT_TRUE(st.ok()) << st.message();
  std::vector<std::byte> pulled(size);
  st = cluster.value()->pull(pulled);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(pulled, pushed);
  const auto layout = make_layout(LayoutKind::stripe, size, block, kShards);
  for (std::uint64_t b = 0; b < layout->block_count(); ++b) {
    const BlockPlace p = layout->place(b);
    const auto device = read_file(files[p.shard]);
    ASSERT_EQ(std::memcmp(pushed.data() + p.model_offset, device.data() + p.shard_offset, p.bytes), 0) << "block " << b;
  }
}

// The exchange on the /dev path: a device returns what was written, so every block read back must be this
// exchange's own push of it (a READ issued before its WRITE completed could return the old bytes); libaio and
// io_uring keep WRITEs and READs in flight together (the transport's counters), psync runs one at a time.
TEST_P(PosixClientTest, ExchangeReadsEveryBlockAfterItsWrite) {
  // 16 blocks of 64K, 64K requests: 8 WRITEs and 8 READs per shard at queue depth 4.
  ClusterConfig config = make_cluster(LayoutKind::stripe, 16 * 64 * K, 64 * K);
  config.client.max_request_bytes = 64 * K;
  auto cluster = Cluster::open(config);
  ASSERT_TRUE(cluster.ok()) << cluster.message();
  Cluster& c = *cluster.value();
  for (int round = 0; round < 5; ++round) {
    const auto pushed = pattern(c.model_bytes(), 200 + round);
    std::vector<std::byte> pulled(c.model_bytes());
    const Status st = c.exchange(pushed, pulled);
    ASSERT_TRUE(st.ok()) << st.message();
    ASSERT_EQ(pulled, pushed) << "round " << round;
  }
  auto counters = c.grad_queue_counters();
  ASSERT_TRUE(counters.ok()) << counters.message();
  for (std::size_t s = 0; s < kShards; ++s) {
    if (GetParam() == PosixEngine::psync) {
      EXPECT_EQ((*counters)[s].issued_beside_other_direction, 0u) << "psync has one command in flight";
    } else {
      EXPECT_GT((*counters)[s].issued_beside_other_direction, 0u) << "shard " << s;
    }
  }
}

TEST_P(PosixClientTest, AShrunkDeviceIsAnErrorNamingTheShardAndOffset) {
  const ClusterConfig config = make_cluster(LayoutKind::stripe, 1024 * K, 64 * K);
  auto cluster = Cluster::open(config);
  ASSERT_TRUE(cluster.ok()) << cluster.message();
  // The device loses its second half after open: reads there come back short. Shard 1's local block 4 is
  // global block 4 * 2 + 1 = 9, at model byte 9 * 64K.
  ASSERT_EQ(::truncate(config.shards[1].grad.text.c_str(), 256 * K), 0);
  std::vector<std::byte> model(cluster.value()->model_bytes());
  const Status s = cluster.value()->pull(model);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("shard 'shard1' grad LU (" + config.shards[1].grad.text +
                             "): read of 262144 bytes at shard byte offset 262144 (model byte offset 589824) failed: "),
            std::string::npos)
      << s.message();
}

TEST_P(PosixClientTest, CapacityMismatchIsRefused) {
  ClusterConfig config = make_cluster(LayoutKind::stripe, 1024 * K, 64 * K);
  config.model.size_bytes = 2048 * K;
  auto cluster = Cluster::open(config);
  ASSERT_FALSE(cluster.ok());
  EXPECT_NE(cluster.message().find("posix-test: shard 'shard0' grad LU (" + config.shards[0].grad.text +
                                   "): capacity is 524288 bytes, the layout gives this shard 1048576"),
            std::string::npos)
      << cluster.message();
}

INSTANTIATE_TEST_SUITE_P(Engines, PosixClientTest,
                         ::testing::Values(PosixEngine::psync, PosixEngine::libaio, PosixEngine::io_uring),
                         [](const auto& info) { return std::string(to_string(info.param)); });

}  // namespace
}  // namespace blockps::testing
