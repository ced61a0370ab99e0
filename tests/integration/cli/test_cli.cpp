// The `blockps` command (client/cli/) as a user runs it: a subprocess against a 2-shard cluster (each shard its
// own tgtd with grad, weights and status blockps LUs, opt=sum) opened from a generated cluster file. status
// as a table and as JSON (counters after a push, BLOCKPS_CLUSTER), init then save gives the same bytes, a
// wrong-size init writes nothing, bench prints its progress and summary, a down shard still shows the others,
// and the command line's and the cluster file's mistakes get their messages and exit statuses. Without a cluster:
// `conf expand` of a shard config, and `status --page FILE --field POINTER` of a status page.
#include <dirent.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "blockps/cluster.h"
#include "tests/support/blockps_shard.h"
#include "tests/support/process.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tgtd_instance.h"

namespace blockps::testing {
namespace {

constexpr std::uint64_t K = 1024;
constexpr int kShards = 2;
constexpr std::uint64_t kModelBytes = 1024 * K;  // 16 blocks of 64K, 512K per shard
constexpr std::uint64_t kBlockBytes = 64 * K;

std::string shard_iqn(int s) { return "iqn.2026-11.io.blockps:cli-shard" + std::to_string(s); }

CommandResult cli(std::vector<std::string> args) {
  args.insert(args.begin(), BLOCKPS_CLI_PATH);
  // No inherited BLOCKPS_CLUSTER: each test says which cluster file it means.
  args.insert(args.begin(), {"env", "-u", "BLOCKPS_CLUSTER"});
  return run_command(args, {.timeout = std::chrono::milliseconds(60'000), .cwd = {}});
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
void write_file(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

// Finite f32 values (a NaN pattern need not survive the shard's f32 master copy bit for bit).
std::string random_f32_model(std::uint64_t bytes, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-100.0f, 100.0f);
  std::string out(bytes, '\0');
  for (std::uint64_t i = 0; i < bytes; i += 4) {
    const float v = dist(rng);
    std::memcpy(out.data() + i, &v, 4);
  }
  return out;
}

// The JSON document in the output: from the first line that starts with '{' (errors come before it).
nlohmann::json json_in(const std::string& output) {
  std::size_t at = output.rfind("\n{");
  at = output.starts_with("{") ? 0 : (at == std::string::npos ? std::string::npos : at + 1);
  if (at == std::string::npos) return nlohmann::json();
  return nlohmann::json::parse(output.substr(at), nullptr, false);
}

std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) names.push_back(entry.path().filename());
  return names;
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    BLOCKPS_REQUIRE_TGTD_AND_MODULE();
    ASSERT_TRUE(dir_.create("blockps-cli-").ok());
    ASSERT_TRUE(files_.create("blockps-cli-files-").ok());
    ASSERT_NO_FATAL_FAILURE(start_shards());
    cluster_file_ = write_cluster_file();
  }
  void TearDown() override {
    if (!HasFailure()) return;
    for (int s = 0; s < kShards; ++s)
      if (tgtd_[s].running()) std::cerr << "---- shard " << s << " tgtd log ----\n" << tgtd_[s].log_text() << "\n";
  }

  void start_shards() {
    const std::uint64_t shard_bytes = kModelBytes / kShards;  // stripe over 2 shards of an even block count
    for (int s = 0; s < kShards; ++s) {
      const std::string shape =
          "size=" + std::to_string(shard_bytes) + ";block=" + std::to_string(kBlockBytes) + ";dtype=f32;opt=sum";
      const Status st =
          add_blockps_shard(tgtd_[s], 1, shard_iqn(s), dir_.path("shard" + std::to_string(s) + ".ckpt"), shape);
      ASSERT_TRUE(st.ok()) << st.message();
    }
  }

  std::string write_cluster_file() {
    std::string text = "[model]\nsize = " + std::to_string(kModelBytes) +
                       "\ndtype = \"f32\"\nblock = " + std::to_string(kBlockBytes) + "\n[client]\nqueue_depth = 4\n";
    for (int s = 0; s < kShards; ++s) {
      text += "[[shard]]\nname = \"shard" + std::to_string(s) + "\"\n";
      text += "grad = \"" + tgtd_[s].url(shard_iqn(s), 1) + "\"\n";
      text += "weights = \"" + tgtd_[s].url(shard_iqn(s), 2) + "\"\n";
      text += "status = \"" + tgtd_[s].url(shard_iqn(s), 3) + "\"\n";
    }
    std::string path = dir_.path("cluster.toml");
    write_file(path, text);
    return path;
  }

  TempDir dir_;
  TempDir files_;  // init/save files only: the test checks that save leaves no temporary file here
  TgtdInstance tgtd_[kShards];
  std::string cluster_file_;
};

TEST_F(CliTest, StatusShowsEveryShardAndCountsAPush) {
  // --cluster may follow the subcommand.
  const CommandResult table = cli({"status", "--cluster", cluster_file_});
  ASSERT_TRUE(table.ok()) << table.describe();
  for (const char* heading : {"shard", "size", "dtype", "block", "opt", "lr", "pushes", "pulls", "push bytes",
                              "pull bytes", "mean agg us", "checkpoints", "last checkpoint error"})
    EXPECT_TRUE(contains(table.output, heading)) << heading << " missing in\n" << table.output;
  // Each shard's row: name, size 512K, dtype, block 64K, opt.
  EXPECT_TRUE(contains(table.output, "\nshard0  512K  f32      64K  sum  0.01       0")) << table.output;
  EXPECT_TRUE(contains(table.output, "\nshard1  512K  f32      64K  sum  0.01       0")) << table.output;
  EXPECT_TRUE(contains(table.output, "\ntotal     1M")) << table.output;

  auto pushes_of = [&](const nlohmann::json& page) { return page["counters"]["pushes"].get<std::uint64_t>(); };
  {
    const CommandResult before = cli({"-c", cluster_file_, "status", "--json"});
    ASSERT_TRUE(before.ok()) << before.describe();
    const nlohmann::json j = json_in(before.output);
    ASSERT_TRUE(j.is_object() && j.contains("shards")) << before.output;
    ASSERT_EQ(j["shards"].size(), 2u) << before.output;
    EXPECT_EQ(pushes_of(j["shards"][0]), 0u);
  }
  {
    auto cluster = Cluster::open(cluster_file_);
    ASSERT_TRUE(cluster.ok()) << cluster.message();
    std::vector<std::byte> grads(kModelBytes);
    const Status s = cluster.value()->push(grads);
    ASSERT_TRUE(s.ok()) << s.message();
  }
  // The cluster file from the environment this time.
  const CommandResult after =
      run_command({"env", "BLOCKPS_CLUSTER=" + cluster_file_, BLOCKPS_CLI_PATH, "status", "--json"});
  ASSERT_TRUE(after.ok()) << after.describe();
  const nlohmann::json j = json_in(after.output);
  ASSERT_TRUE(j.is_object() && j.contains("shards")) << after.output;
  ASSERT_EQ(j["shards"].size(), 2u);
  for (int s = 0; s < kShards; ++s) {
    const nlohmann::json& page = j["shards"][static_cast<std::size_t>(s)];
    EXPECT_EQ(page["name"], "shard" + std::to_string(s));
    EXPECT_GE(pushes_of(page), 1u) << page.dump();
    EXPECT_EQ(page["counters"]["push_bytes"].get<std::uint64_t>(), kModelBytes / kShards) << page.dump();
    EXPECT_EQ(page["shard"]["opt"], "sum");
  }
}

TEST_F(CliTest, InitThenSaveGivesTheSameBytes) {
  const std::string model = random_f32_model(kModelBytes, 7);
  const std::string in = files_.path("in.bin"), out = files_.path("out.bin");
  write_file(in, model);
  write_file(out, "an older snapshot, replaced whole");
  const CommandResult init = cli({"-c", cluster_file_, "init", "--from", in});
  ASSERT_TRUE(init.ok()) << init.describe();
  EXPECT_TRUE(contains(init.output, "init: assigned 1M of weights")) << init.output;
  const CommandResult save = cli({"-c", cluster_file_, "save", "--to", out});
  ASSERT_TRUE(save.ok()) << save.describe();
  EXPECT_TRUE(contains(save.output, "save: wrote 1M of weights")) << save.output;
  EXPECT_TRUE(read_file(out) == model) << "save did not return what init wrote";
  const auto names = files_in(files_.path());
  EXPECT_EQ(names.size(), 2u) << "a temporary file was left behind";
  // A pull through the grad LUs sees the same weights.
  auto cluster = Cluster::open(cluster_file_);
  ASSERT_TRUE(cluster.ok()) << cluster.message();
  std::string pulled(kModelBytes, '\0');
  ASSERT_TRUE(cluster.value()->pull(std::as_writable_bytes(std::span(pulled))).ok());
  EXPECT_TRUE(pulled == model);
}

TEST_F(CliTest, InitWithAWrongSizeFileIsRefusedAndWritesNothing) {
  const std::string model = random_f32_model(kModelBytes, 3);
  const std::string good = files_.path("good.bin"), short_file = files_.path("short.bin");
  write_file(good, model);
  ASSERT_TRUE(cli({"-c", cluster_file_, "init", "--from", good}).ok());
  write_file(short_file, random_f32_model(kModelBytes - 512, 4));
  const CommandResult r = cli({"-c", cluster_file_, "init", "--from", short_file});
  EXPECT_EQ(r.exit_code, 1) << r.describe();
  EXPECT_TRUE(contains(r.output, "blockps: ERROR: --from " + short_file + " holds " +
                                     std::to_string(kModelBytes - 512) + " bytes, the model is " +
                                     std::to_string(kModelBytes) + " bytes ([model] size of " + cluster_file_ +
                                     ", dtype f32): nothing was written"))
      << r.output;
  const CommandResult missing = cli({"-c", cluster_file_, "init", "--from", files_.path("none.bin")});
  EXPECT_EQ(missing.exit_code, 1) << missing.describe();
  EXPECT_TRUE(contains(missing.output, files_.path("none.bin") + ": cannot read it: No such file or directory"))
      << missing.output;
  const std::string saved = files_.path("saved.bin");
  ASSERT_TRUE(cli({"-c", cluster_file_, "save", "--to", saved}).ok());
  EXPECT_TRUE(read_file(saved) == model) << "a refused init changed the weights";
}

TEST_F(CliTest, BenchRunsBothOpsWithProgressAndSummary) {
  const CommandResult r = cli({"-c", cluster_file_, "bench", "--seconds", "0.5"});
  ASSERT_TRUE(r.ok()) << r.describe();
  EXPECT_TRUE(contains(r.output, "bench push: ")) << r.output;
  EXPECT_TRUE(contains(r.output, "bench pull: ")) << r.output;
  EXPECT_TRUE(contains(r.output, "MB/s so far")) << r.output;
  EXPECT_TRUE(contains(r.output, "op    iterations")) << r.output;
  for (const char* heading : {"bytes", "seconds", "MB/s", "mean ms", "p50 ms", "p99 ms"})
    EXPECT_TRUE(contains(r.output, heading)) << heading << " missing in\n" << r.output;
  EXPECT_TRUE(contains(r.output, "\npush  ")) << r.output;
  EXPECT_TRUE(contains(r.output, "\npull  ")) << r.output;
  // A zero gradient under opt=sum leaves the weights as they were (zeros).
  auto cluster = Cluster::open(cluster_file_);
  ASSERT_TRUE(cluster.ok()) << cluster.message();
  std::vector<std::byte> pulled(kModelBytes, std::byte{1});
  ASSERT_TRUE(cluster.value()->pull(pulled).ok());
  EXPECT_EQ(pulled, std::vector<std::byte>(kModelBytes));

  const CommandResult quiet = cli({"-c", cluster_file_, "bench", "--seconds", "0.1", "--op", "pull", "--no-progress"});
  ASSERT_TRUE(quiet.ok()) << quiet.describe();
  EXPECT_FALSE(contains(quiet.output, "so far")) << quiet.output;
  EXPECT_FALSE(contains(quiet.output, "\npush  ")) << quiet.output;
  EXPECT_TRUE(contains(quiet.output, "\npull  ")) << quiet.output;
}

// step and exchange, counted by iterations after a warm-up, as the JSON lines bench/cluster reads.
TEST_F(CliTest, BenchStepAndExchangeByIterationsAsJson) {
  auto cluster = Cluster::open(cluster_file_);
  ASSERT_TRUE(cluster.ok()) << cluster.message();
  auto pushes = [&] {
    std::vector<std::uint64_t> n;
    auto pages = cluster.value()->status_pages();
    EXPECT_TRUE(pages.ok()) << pages.message();
    if (pages.ok())
      for (const auto& page : pages.value()) n.push_back(nlohmann::json::parse(page.json)["counters"]["pushes"]);
    return n;
  };
  const auto before = pushes();
  for (const char* op : {"step", "exchange"}) {
    const CommandResult r = cli(
        {"-c", cluster_file_, "bench", "--op", op, "--iterations", "3", "--warmup", "1", "--json", "--no-progress"});
    ASSERT_TRUE(r.ok()) << r.describe();
    const nlohmann::json j = nlohmann::json::parse(r.output, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << "not one JSON object: " << r.output;
    EXPECT_EQ(j["op"], op);
    EXPECT_EQ(j["iterations"], 3);
    EXPECT_EQ(j["warmup"], 1);
    EXPECT_EQ(j["model_bytes"], kModelBytes);
    ASSERT_EQ(j["seconds"].size(), 3u);
    EXPECT_GT(j["median_s"].get<double>(), 0);
  }
  // Each op pushed the whole model 1 + 3 times: every shard counted the same number of WRITEs for each.
  const auto after = pushes();
  ASSERT_EQ(after.size(), before.size());
  for (std::size_t s = 0; s < after.size(); ++s) {
    EXPECT_GT(after[s], before[s]) << "shard " << s;
    EXPECT_EQ((after[s] - before[s]) % 8, 0u) << "shard " << s << ": " << after[s] - before[s] << " pushes";
  }
}

TEST_F(CliTest, StatusFieldPrintsEachShardsValues) {
  const CommandResult r = cli({"-c", cluster_file_, "status", "--field", "/shard/size", "--field", "/shard/dtype"});
  ASSERT_TRUE(r.ok()) << r.describe();
  EXPECT_EQ(r.output, "shard0\t524288\tf32\nshard1\t524288\tf32\n");
}

TEST_F(CliTest, StatusWithADownShardShowsTheOthersAndFails) {
  ASSERT_TRUE(tgtd_[1].stop().ok());
  const CommandResult table = cli({"-c", cluster_file_, "status"});
  EXPECT_EQ(table.exit_code, 1) << table.describe();
  EXPECT_TRUE(
      contains(table.output, "blockps: ERROR: shard 'shard1' grad LU (" + tgtd_[1].url(shard_iqn(1), 1) + "): "))
      << table.output;
  EXPECT_TRUE(contains(table.output, "\nshard0  512K  f32")) << table.output;
  EXPECT_TRUE(contains(table.output, "(no status page: see the error)")) << table.output;

  const CommandResult json = cli({"-c", cluster_file_, "status", "--json"});
  EXPECT_EQ(json.exit_code, 1) << json.describe();
  const nlohmann::json j = json_in(json.output);
  ASSERT_TRUE(j.is_object() && j.contains("shards")) << json.output;
  ASSERT_EQ(j["shards"].size(), 2u);
  EXPECT_EQ(j["shards"][0]["name"], "shard0");
  EXPECT_TRUE(j["shards"][0].contains("counters")) << j.dump();
  EXPECT_EQ(j["shards"][1]["name"], "shard1");
  EXPECT_TRUE(contains(j["shards"][1].value("error", ""), "shard 'shard1'")) << j.dump();
}

// The command line and the cluster file: no tgtd needed.
class CliUsageTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(dir_.create("blockps-cli-usage-").ok()); }
  TempDir dir_;
};

TEST_F(CliUsageTest, AMissingOrBadClusterFileGivesItsError) {
  const std::string missing = dir_.path("missing.toml");
  const CommandResult r = cli({"-c", missing, "status"});
  EXPECT_EQ(r.exit_code, 1) << r.describe();
  EXPECT_TRUE(contains(r.output, "blockps: ERROR: " + missing + ": cannot read the cluster file: No such file"))
      << r.output;

  const std::string bad = dir_.path("bad.toml");
  write_file(bad,
             "[model]\nsize = \"1M\"\ndtype = \"f64\"\n[[shard]]\ngrad = \"/dev/null\"\nweights = \"/dev/null\"\n"
             "status = \"/dev/null\"\n");
  for (const char* sub : {"status", "save", "bench"}) {
    std::vector<std::string> args{"-c", bad, sub};
    if (std::string(sub) == "save") args.insert(args.end(), {"--to", dir_.path("x.bin")});
    const CommandResult b = cli(args);
    EXPECT_EQ(b.exit_code, 1) << b.describe();
    EXPECT_TRUE(contains(b.output, "blockps: ERROR: " + bad + ": [model] dtype")) << sub << ": " << b.output;
  }
  EXPECT_EQ(files_in(dir_.path()).size(), 1u) << "save wrote something for a bad cluster file";
}

TEST_F(CliUsageTest, UsageErrorsExitWithTwo) {
  const std::string file = dir_.path("c.toml");
  struct Case {
    std::vector<std::string> args;
    const char* says;
  };
  const Case cases[] = {
      {{"status"}, "--cluster is required"},
      {{"-c", file}, "subcommand is required"},
      {{"-c", file, "frobnicate"}, "subcommand is required"},
      {{"-c", file, "init"}, "--from is required"},
      {{"-c", file, "save"}, "--to is required"},
      {{"-c", file, "bench", "--op", "sideways"}, "sideways"},
      {{"-c", file, "bench", "--seconds", "0"}, "0"},
      {{"-c", file, "bench", "--seconds", "soon"}, "soon"},
  };
  for (const Case& c : cases) {
    const CommandResult r = cli(c.args);
    EXPECT_EQ(r.exit_code, 2) << r.describe();
    EXPECT_TRUE(contains(r.output, c.says)) << r.describe();
  }
  const CommandResult help = cli({"--help"});
  EXPECT_EQ(help.exit_code, 0) << help.describe();
  for (const char* sub : {"status", "init", "save", "bench"}) EXPECT_TRUE(contains(help.output, sub)) << help.output;
}

// The source tree (this file is tests/integration/cli/test_cli.cpp): the example configs and the contract.
std::filesystem::path repo_path(const std::string& relative) {
  return std::filesystem::path(__FILE__).parent_path().parent_path().parent_path().parent_path() / relative;
}

// `conf expand` (client/cli/targets_conf.h): the shard line made into its LUs, every other line kept.
// tests/integration/scripts/test_shard_stanza.sh checks each refusal through ps-up.sh.
TEST_F(CliUsageTest, ConfExpandMakesTheShardLineIntoItsThreeLus) {
  const CommandResult r = cli({"conf", "expand", repo_path("configs/shard0.conf")});
  ASSERT_TRUE(r.ok()) << r.describe();
  for (const char* line :
       {"\n    <backing-store /var/lib/blockps/shard0/model.ckpt>\n        lun 1\n        bs-type blockps\n"
        "        bsopts 'role=grad;",
        "\n    <backing-store /var/lib/blockps/shard0/./model.ckpt>\n        lun 2\n",
        "\n    <backing-store /var/lib/blockps/shard0//model.ckpt>\n        lun 3\n        bs-type blockps\n"
        "        bsopts 'role=status;",
        "    # blockps-shard /var/lib/blockps/shard0/model.ckpt (line "})
    EXPECT_TRUE(contains(r.output, line)) << line << " missing in\n" << r.output;
  EXPECT_FALSE(contains(r.output, "\n    blockps-shard ")) << r.output;

  // A file without the line comes back as it is, byte for byte (a missing last newline added).
  const std::string plain = dir_.path("plain.conf");
  const std::string text =
      "# a comment\nblockps-control 3\n<target iqn.2026-11.io.blockps:x>\n\tbacking-store /d/x.img\r\n"
      "</target>";
  write_file(plain, text);
  const CommandResult same = cli({"conf", "expand", plain});
  ASSERT_TRUE(same.ok()) << same.describe();
  EXPECT_EQ(same.output, text + "\n");
}

TEST_F(CliUsageTest, ConfExpandNamesTheWrongLineAndPrintsNothing) {
  const std::string bad = dir_.path("bad.conf");
  write_file(bad, "<target iqn.2026-11.io.blockps:x>\n    blockps-shard model.ckpt 'size=1M'\n</target>\n");
  const CommandResult r = cli({"conf", "expand", bad});
  EXPECT_EQ(r.exit_code, 1) << r.describe();
  EXPECT_EQ(r.output, "blockps: ERROR: " + bad + ":2: checkpoint path 'model.ckpt' must be absolute\n");

  const CommandResult missing = cli({"conf", "expand", dir_.path("missing.conf")});
  EXPECT_EQ(missing.exit_code, 1) << missing.describe();
  EXPECT_TRUE(contains(missing.output, "missing.conf: cannot read the shard config: No such file")) << missing.output;
  const CommandResult no_file = cli({"conf", "expand"});
  EXPECT_EQ(no_file.exit_code, 2) << no_file.describe();
  EXPECT_TRUE(contains(no_file.output, "FILE is required")) << no_file.output;
}

// The readers ps-up.sh and attach.sh --conf call (`conf value`, `lus`, `for-tgt-admin`, `shard`) on the example
// config; tests/unit/client/cli/test_targets_conf.cpp has the cases of the functions under them.
TEST_F(CliUsageTest, ConfReadersPrintWhatTheScriptsRead) {
  const std::string shard0 = repo_path("configs/shard0.conf");
  const std::string iqn = "iqn.2026-11.io.blockps:shard0", ckpt = "/var/lib/blockps/shard0";
  const CommandResult portal = cli({"conf", "value", shard0, "blockps-portal"});
  ASSERT_TRUE(portal.ok()) << portal.describe();
  EXPECT_EQ(portal.output, "127.0.0.1:3261\n");
  const CommandResult no_key = cli({"conf", "value", shard0, "blockps-nop-in"});
  EXPECT_TRUE(no_key.ok() && no_key.output.empty()) << no_key.describe();

  const CommandResult lus = cli({"conf", "lus", shard0});
  ASSERT_TRUE(lus.ok()) << lus.describe();
  EXPECT_EQ(lus.output, iqn + " 1 blockps " + ckpt + "/model.ckpt\n" + iqn + " 2 blockps " + ckpt + "/./model.ckpt\n" +
                            iqn + " 3 blockps " + ckpt + "//model.ckpt\n");
  const CommandResult shard = cli({"conf", "shard", shard0});
  ASSERT_TRUE(shard.ok()) << shard.describe();
  EXPECT_EQ(shard.output, "127.0.0.1:3261 " + iqn + " 1 2 3\n");

  // What ps-up.sh gives tgt-admin -C N: no control-port line; with --iser the copy attach.sh finds by the suffix
  // scripts/lib/blockps-tgt.sh names (the one the CLI adds must be the same).
  const std::string with_port = dir_.path("control-port.conf");
  write_file(with_port, "control-port 4\n" + read_file(shard0));
  const CommandResult tcp = cli({"conf", "for-tgt-admin", with_port});
  ASSERT_TRUE(tcp.ok()) << tcp.describe();
  EXPECT_TRUE(tcp.output.starts_with("# (control-port given to tgt-admin as -C by ps-up.sh)\n")) << tcp.output;
  EXPECT_TRUE(contains(tcp.output, "\n    <backing-store " + ckpt + "/model.ckpt>\n")) << tcp.output;
  EXPECT_FALSE(contains(tcp.output, "driver iser")) << tcp.output;
  const std::string lib = read_file(repo_path("scripts/lib/blockps-tgt.sh"));
  const std::string key = "\nBLOCKPS_ISER_SUFFIX=";
  const std::size_t at = lib.find(key);
  ASSERT_NE(at, std::string::npos) << "scripts/lib/blockps-tgt.sh sets no BLOCKPS_ISER_SUFFIX";
  const std::string suffix = lib.substr(at + key.size(), lib.find('\n', at + 1) - at - key.size());
  const CommandResult iser = cli({"conf", "for-tgt-admin", with_port, "--iser"});
  ASSERT_TRUE(iser.ok()) << iser.describe();
  EXPECT_TRUE(iser.output.starts_with(tcp.output)) << iser.output;
  EXPECT_TRUE(contains(iser.output, "\n<target " + iqn + suffix + ">\n    driver iser\n")) << iser.output;

  // A wrong file: FILE[:LINE] and what is wrong, nothing on stdout, exit 1.
  const std::string two_portals = dir_.path("two-portals.conf");
  const std::string text = read_file(shard0);
  write_file(two_portals, text + "blockps-portal 127.0.0.1:3262\n");
  const CommandResult twice = cli({"conf", "shard", two_portals});
  EXPECT_EQ(twice.exit_code, 1) << twice.describe();
  EXPECT_EQ(twice.output, "blockps: ERROR: " + two_portals + ":" +
                              std::to_string(std::count(text.begin(), text.end(), '\n') + 1) +
                              ": needs exactly one blockps-portal line (found 2)\n");
  const std::string bad = dir_.path("bad.conf");
  write_file(bad, "<target iqn.2026-11.io.blockps:x>\n    blockps-shard model.ckpt 'size=1M'\n</target>\n");
  for (const char* sub : {"lus", "for-tgt-admin", "shard"}) {
    const CommandResult r = cli({"conf", sub, bad});
    EXPECT_EQ(r.exit_code, 1) << r.describe();
    EXPECT_EQ(r.output, "blockps: ERROR: " + bad + ":2: checkpoint path 'model.ckpt' must be absolute\n") << sub;
  }
  const CommandResult no_key_given = cli({"conf", "value", shard0});
  EXPECT_EQ(no_key_given.exit_code, 2) << no_key_given.describe();
  EXPECT_TRUE(contains(no_key_given.output, "KEY is required")) << no_key_given.output;
}

// `status --page FILE --field POINTER`: a page's values without a cluster, as scripts/attach.sh reads them.
TEST_F(CliUsageTest, StatusFieldPrintsAPagesValues) {
  const std::string page = dir_.path("page.json");
  write_file(page, std::string(R"({"shard": {"size": 1048576, "dtype": "f32", "block": 65536, "lr": 0.05},
    "rounds": {"degraded": false, "live_workers": [{"iqn": "iqn.w 0"}]},
    "aggregation": {"latency": {"p50_ns": 3}}})") +
                       std::string(100, '\0'));
  const CommandResult r =
      cli({"status", "--page", page, "--field", "/shard/size", "--field", "/shard/dtype", "--field", "/shard/lr",
           "--field", "/rounds/degraded", "--field", "/rounds/live_workers/0/iqn", "--field", "/aggregation/latency"});
  ASSERT_TRUE(r.ok()) << r.describe();
  EXPECT_EQ(r.output, "1048576\tf32\t0.05\tfalse\tiqn.w 0\t{\"p50_ns\":3}\n");

  const CommandResult from_stdin =
      run_command({"sh", "-c", "exec \"$0\" status --page - --field /shard/block <\"$1\"", BLOCKPS_CLI_PATH, page});
  ASSERT_TRUE(from_stdin.ok()) << from_stdin.describe();
  EXPECT_EQ(from_stdin.output, "65536\n");

  struct Case {
    std::vector<std::string> args;
    int exit_code;
    std::string says;
  };
  const Case cases[] = {
      {{"--field", "/shard/sise"},
       2,
       "--field: '/shard/sise' is not a field of the status page: "
       "contract/status_page.h names /blockps/status_format, /shard, "},
      {{"--field", "/aggregation/latency/p51_ns"}, 2, "is not a field of the status page"},
      {{"--field", "/rounds/workers"},
       1,
       "blockps: ERROR: " + page + ": the status page has no /rounds/workers (a field of another mode"},
      {{}, 2, "--page requires --field"},
      {{"--field", "/shard/size", "--json"}, 2, "--json excludes --field"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args{"status", "--page", page};
    args.insert(args.end(), c.args.begin(), c.args.end());
    const CommandResult bad = cli(args);
    EXPECT_EQ(bad.exit_code, c.exit_code) << bad.describe();
    EXPECT_TRUE(contains(bad.output, c.says)) << c.says << " missing in " << bad.describe();
  }
  const std::string not_a_page = dir_.path("not-a-page");
  write_file(not_a_page, "garbage");
  const CommandResult garbage = cli({"status", "--page", not_a_page, "--field", "/shard/size"});
  EXPECT_EQ(garbage.exit_code, 1) << garbage.describe();
  EXPECT_TRUE(contains(garbage.output, "not a status page (not a JSON object")) << garbage.output;
}

// Every pointer contract/status_page.h names is a --field (the CLI's list of them must not fall behind).
TEST_F(CliUsageTest, EveryPointerOfTheContractIsAField) {
  const std::string header = read_file(repo_path("contract/status_page.h"));
  ASSERT_FALSE(header.empty());
  std::vector<std::string> pointers;
  for (std::size_t at = 0; (at = header.find("[] = \"/", at)) != std::string::npos;) {
    at += 6;
    pointers.push_back(header.substr(at, header.find('"', at) - at));
  }
  ASSERT_GT(pointers.size(), 60u);
  // A value at each leaf; the objects (/shard, /rounds, ...) come with their members.
  nlohmann::json page = nlohmann::json::object();
  for (const std::string& p : pointers)
    if (std::none_of(pointers.begin(), pointers.end(), [&](const std::string& q) { return q.starts_with(p + "/"); }))
      page[nlohmann::json::json_pointer(p)] = 1;
  const std::string file = dir_.path("every.json");
  write_file(file, page.dump());
  std::vector<std::string> args{"status", "--page", file};
  for (const std::string& p : pointers) args.insert(args.end(), {"--field", p});
  const CommandResult r = cli(args);
  EXPECT_TRUE(r.ok()) << r.describe();
}

}  // namespace
}  // namespace blockps::testing
