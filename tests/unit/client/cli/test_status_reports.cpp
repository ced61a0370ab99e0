// client/cli/status_reports.cpp: every shard's status page read at once, in the cluster file's order; when the
// cluster cannot be opened as a whole (a shard is down, or disagrees with the file), why, and each shard read alone
// (a one-shard cluster of the bytes the layout gives it), so that the pages of the others still arrive. The shards
// here are regular files standing in for their LUs (the posix transport), with a status page written into the status
// file: no tgtd, no network. Against real shards: `blockps status` in tests/integration/cli/test_cli.cpp.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "blockps/layout.h"
#include "client/cli/status_reports.h"
#include "tests/unit/client/shard_files.h"

namespace blockps::cli {
namespace {

constexpr std::uint64_t kBlock = 4096;
constexpr std::uint64_t kModel = 10 * 1024;  // 3 blocks, the last one short

class StatusReportsTest : public ::testing::Test {
 protected:
  std::string path(const std::string& shard, const std::string& role) const { return files_.path(shard, role); }
  void make_shard(const std::string& name, std::uint64_t bytes, const std::string& page) const {
    files_.make(name, bytes, page);
  }
  static std::string page(std::uint64_t size, const std::string& dtype = "f32") {
    return R"({"shard":{"size":)" + std::to_string(size) + R"(,"dtype":")" + dtype + R"(","block":4096},)" +
           R"("counters":{"pushes":0}})";
  }
  ClusterConfig config(const std::string& layout, std::initializer_list<std::string> shards) const {
    std::string text = "[model]\nsize = \"10K\"\ndtype = \"f32\"\nblock = \"4K\"\n[layout]\nkind = \"" + layout +
                       "\"\n[client]\nengine = \"psync\"\n";
    for (const std::string& name : shards) text += files_.shard_table(name);
    auto parsed = parse_cluster_text(text, "cluster.toml");
    EXPECT_TRUE(parsed.ok()) << parsed.message();
    return parsed.ok() ? parsed.value() : ClusterConfig{};
  }
  bool direct_io_works() const { return files_.direct_io_works(); }

  ShardFiles files_;
};

#define SKIP_WITHOUT_DIRECT_IO() \
  if (!direct_io_works()) GTEST_SKIP() << files_.folder() << ": this file system refuses O_DIRECT"

TEST_F(StatusReportsTest, EveryShardsPageInTheFilesOrderWhenTheClusterOpens) {
  SKIP_WITHOUT_DIRECT_IO();
  const auto layout = make_layout(LayoutKind::stripe, kModel, kBlock, 2);
  make_shard("s0", layout->shard_bytes(0), page(layout->shard_bytes(0)));
  make_shard("s1", layout->shard_bytes(1), page(layout->shard_bytes(1)));
  const StatusReports read = read_status_reports(config("stripe", {"s0", "s1"}));
  EXPECT_EQ(read.cluster_error, "");
  ASSERT_EQ(read.shards.size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    const ShardReport& shard = read.shards[i];
    EXPECT_EQ(shard.name, "s" + std::to_string(i));
    EXPECT_EQ(shard.error, "");
    ASSERT_TRUE(shard.page.has_value()) << shard.name;
    EXPECT_EQ((*shard.page)["shard"]["size"], layout->shard_bytes(i));
    EXPECT_EQ((*shard.page)["counters"]["pushes"], 0);
  }
}

TEST_F(StatusReportsTest, AShardThatIsDownLeavesTheOthersPagesAndSaysWhy) {
  SKIP_WITHOUT_DIRECT_IO();
  // The range layout gives the shards different sizes: each one read alone is opened with its own.
  const auto layout = make_layout(LayoutKind::range, kModel, kBlock, 3);
  ASSERT_NE(layout->shard_bytes(0), layout->shard_bytes(2));
  make_shard("s0", layout->shard_bytes(0), page(layout->shard_bytes(0)));
  make_shard("s2", layout->shard_bytes(2), page(layout->shard_bytes(2)));  // s1 has no LUs at all
  const StatusReports read = read_status_reports(config("range", {"s0", "s1", "s2"}));
  EXPECT_NE(read.cluster_error.find(path("s1", "grad")), std::string::npos) << read.cluster_error;
  ASSERT_EQ(read.shards.size(), 3u);
  for (std::size_t i : {0u, 2u}) {
    const ShardReport& shard = read.shards[i];
    EXPECT_EQ(shard.name, "s" + std::to_string(i));
    EXPECT_EQ(shard.error, "") << shard.name;
    ASSERT_TRUE(shard.page.has_value()) << shard.name;
    EXPECT_EQ((*shard.page)["shard"]["size"], layout->shard_bytes(i));
  }
  const ShardReport& down = read.shards[1];
  EXPECT_EQ(down.name, "s1");
  EXPECT_FALSE(down.page.has_value());
  EXPECT_NE(down.error.find(path("s1", "grad") + ": open with O_DIRECT failed: No such file or directory"),
            std::string::npos)
      << down.error;
}

TEST_F(StatusReportsTest, AShardThatDisagreesWithTheFileIsReportedWithItsMismatch) {
  SKIP_WITHOUT_DIRECT_IO();
  const auto layout = make_layout(LayoutKind::stripe, kModel, kBlock, 2);
  make_shard("s0", layout->shard_bytes(0), page(layout->shard_bytes(0), "bf16"));
  make_shard("s1", layout->shard_bytes(1), page(layout->shard_bytes(1)));
  const StatusReports read = read_status_reports(config("stripe", {"s0", "s1"}));
  const std::string mismatch =
      "cluster.toml: shard 's0': status page says dtype = bf16, the cluster file says dtype = f32";
  EXPECT_EQ(read.cluster_error, mismatch);
  ASSERT_EQ(read.shards.size(), 2u);
  EXPECT_EQ(read.shards[0].error, mismatch);
  EXPECT_FALSE(read.shards[0].page.has_value());
  EXPECT_EQ(read.shards[1].error, "");
  ASSERT_TRUE(read.shards[1].page.has_value());
  EXPECT_EQ((*read.shards[1].page)["shard"]["size"], layout->shard_bytes(1));
}

TEST_F(StatusReportsTest, NoShardsIsTheClustersErrorAndNoReport) {
  ClusterConfig none;
  none.source = "empty.toml";
  const StatusReports read = read_status_reports(none);
  EXPECT_TRUE(read.shards.empty());
  EXPECT_EQ(read.cluster_error, "empty.toml: no shards");
}

}  // namespace
}  // namespace blockps::cli
