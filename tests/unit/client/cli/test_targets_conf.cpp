// What the scripts read from a shard config (client/cli/targets_conf.h): top-level keys, the LUs of the targets, the
// text tgt-admin is given (without control-port, with the iSER copies) and the endpoint attach.sh logs in to. The
// `blockps conf` commands over these run in tests/integration/cli/test_cli.cpp; ps-up.sh and attach.sh through them in
// tests/integration/scripts/test_ps_scripts.sh, test_shard_stanza.sh and test_attach.sh.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "client/cli/targets_conf.h"

namespace blockps::cli {
namespace {

// Top-level keys among comments and blocks whose lines use the same words; a target-level bs-type after its LUs;
// one LU with its own bs-type, one block LU without a lun, a line LU, a direct-store.
constexpr std::string_view kConf =
    "# a shard # with comments\n"
    "blockps-control 7   # tgtd -C\n"
    "control-port 9\n"
    "  blockps-portal\t127.0.0.1:3261   # where it listens\n"
    "blockps-nop-in 5    3\n"
    "<target iqn.2026-11.io.blockps:a >\n"
    "    blockps-portal 10.0.0.1:1 # not top level\n"
    "    driver iscsi\n"
    "    InitialR2T No\n"
    "    ImmediateData Yes # tgt's iSER has none\n"
    "    <backing-store /d/grad.ckpt>\n"
    "        lun 1\n"
    "        bsopts 'role=grad;size=1M'\n"
    "        control-port 3\n"
    "    </backing-store>\n"
    "    <backing-store /d/rdwr.img> # a comment\n"
    "        bs-type rdwr\n"
    "    </backing-store>\n"
    "    backing-store /d/line.img\n"
    "    <direct-store /dev/sdz>\n"
    "        lun 9\n"
    "    </direct-store>\n"
    "    bs-type blockps\n"
    "</target>\n"
    "blockps-portal 127.0.0.2:3262\n"
    "<target iqn.2026-11.io.blockps:b>\n"
    "\tbacking-store /d/b.img\r\n"
    "</target>";

// One shard as attach.sh reads it: its blockps-shard line makes LUN 1 grad, 2 weights, 3 status.
constexpr std::string_view kShard =
    "blockps-control 1\n"
    "blockps-portal 127.0.0.1:3261 # TCP\n"
    "<target iqn.2026-11.io.blockps:shard0>\n"
    "    blockps-shard /var/lib/blockps/shard0/model.ckpt 'size=16M;dtype=f32'\n"
    "</target>\n";

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  for (std::size_t begin = 0; begin < text.size();) {
    const std::size_t end = text.find('\n', begin);
    lines.push_back(text.substr(begin, end - begin));
    begin = end == std::string::npos ? text.size() : end + 1;
  }
  return lines;
}

TEST(TargetsConf, TopLevelValuesSkipCommentsAndBlocksAndJoinWordsByOneBlank) {
  EXPECT_EQ(top_level_values(kConf, "blockps-portal"), (std::vector<std::string>{"127.0.0.1:3261", "127.0.0.2:3262"}));
  EXPECT_EQ(top_level_values(kConf, "blockps-control"), std::vector<std::string>{"7"});
  EXPECT_EQ(top_level_values(kConf, "control-port"), std::vector<std::string>{"9"});
  EXPECT_EQ(top_level_values(kConf, "blockps-nop-in"), std::vector<std::string>{"5 3"});
  EXPECT_TRUE(top_level_values(kConf, "driver").empty()) << "a key of a <target> is not top level";
  EXPECT_TRUE(top_level_values(kConf, "blockps-iser").empty());
  EXPECT_TRUE(top_level_values(kConf, "#").empty()) << "a comment is no key";
  EXPECT_EQ(top_level_values("blockps-iser\n", "blockps-iser"), std::vector<std::string>{""}) << "the key alone";
}

TEST(TargetsConf, TargetLusTakeTheTargetsBsTypeWhereTheirOwnIsMissing) {
  const std::vector<TargetLu> lus = target_lus(kConf);
  ASSERT_EQ(lus.size(), 5u);
  const std::string a = "iqn.2026-11.io.blockps:a";
  EXPECT_EQ(lus[0].iqn, a);
  EXPECT_EQ(lus[0].lun, "1");
  EXPECT_EQ(lus[0].bs_type, "blockps") << "the target's bs-type, given after the LU";
  EXPECT_EQ(lus[0].path, "/d/grad.ckpt");
  EXPECT_EQ(lus[0].role, "grad");
  EXPECT_EQ(lus[1].path, "/d/rdwr.img");
  EXPECT_EQ(lus[1].lun, "") << "no lun line: tgt-admin numbers it";
  EXPECT_EQ(lus[1].bs_type, "rdwr") << "its own bs-type wins";
  EXPECT_EQ(lus[1].role, "");
  EXPECT_EQ(lus[2].path, "/d/line.img");
  EXPECT_EQ(lus[2].bs_type, "blockps");
  EXPECT_EQ(lus[3].path, "/dev/sdz");
  EXPECT_EQ(lus[3].lun, "9");
  EXPECT_EQ(lus[4].iqn, "iqn.2026-11.io.blockps:b");
  EXPECT_EQ(lus[4].path, "/d/b.img") << "a CR ends no path";
  EXPECT_EQ(lus[4].bs_type, "") << "no bs-type anywhere: tgt's default";

  // The role among other options, double-quoted, with blanks; an unclosed target has no LUs yet.
  const std::vector<TargetLu> quoted = target_lus(
      "<target t>\n<backing-store /x>\nbsopts \"size=1M; role = status ;opt=sgd\"\n</backing-store>\n</target>\n"
      "<target u>\nbacking-store /y\n");
  ASSERT_EQ(quoted.size(), 1u);
  EXPECT_EQ(quoted[0].role, "status");
}

TEST(TargetsConf, WithoutControlPortDropsTheTopLevelLineAlone) {
  const std::string text = without_control_port(kConf);
  const std::vector<std::string> lines = lines_of(text);
  const std::vector<std::string> was = lines_of(std::string(kConf));
  ASSERT_EQ(lines.size(), was.size()) << text;
  for (std::size_t i = 0; i < lines.size(); ++i)
    EXPECT_EQ(lines[i], i == 2 ? "# (control-port given to tgt-admin as -C by ps-up.sh)" : was[i]) << "line " << i + 1;
  EXPECT_TRUE(text.ends_with("</target>\n")) << "every line ends in a newline";
}

TEST(TargetsConf, WithIserTargetsAddsACopyOfEachTargetWithoutWhatTgtsIserRefuses) {
  const std::string text = with_iser_targets(kConf);
  const std::string_view first_target = kConf.substr(0, kConf.find("</target>\n") + 10);
  ASSERT_TRUE(text.starts_with(first_target)) << "the text as written comes first:\n" << text;
  EXPECT_NE(text.find(std::string(kConf.substr(first_target.size())) + "\n"), std::string::npos)
      << "the rest after the copy:\n"
      << text;
  const std::string copy_a = text.substr(text.find("\n# iSER copy of iqn.2026-11.io.blockps:a "));
  EXPECT_TRUE(
      copy_a.starts_with("\n# iSER copy of iqn.2026-11.io.blockps:a (ps-up.sh, blockps-iser)\n"
                         "<target iqn.2026-11.io.blockps:a-iser>\n"
                         "    driver iser\n"
                         "    blockps-portal 10.0.0.1:1 # not top level\n"
                         "    <backing-store /d/grad.ckpt>\n"))
      << copy_a;
  const std::string first_copy = copy_a.substr(0, copy_a.find("</target>\n") + 10);
  EXPECT_EQ(first_copy.find("InitialR2T"), std::string::npos) << first_copy;
  EXPECT_EQ(first_copy.find("ImmediateData"), std::string::npos) << first_copy;
  EXPECT_EQ(first_copy.find("driver iscsi"), std::string::npos) << first_copy;
  EXPECT_NE(first_copy.find("        control-port 3\n"), std::string::npos) << "the LU blocks as written";
  EXPECT_NE(first_copy.find("    bs-type blockps\n</target>\n"), std::string::npos) << first_copy;
  EXPECT_TRUE(
      text.ends_with("\n# iSER copy of iqn.2026-11.io.blockps:b (ps-up.sh, blockps-iser)\n"
                     "<target iqn.2026-11.io.blockps:b-iser>\n    driver iser\n\tbacking-store /d/b.img\r\n"
                     "</target>\n"))
      << text;
  EXPECT_EQ(std::string(kIserTargetSuffix), "-iser") << "scripts/lib/blockps-tgt.sh's BLOCKPS_ISER_SUFFIX";

  // The copies serve the same LUs under the new IQN, each right after its target.
  const std::vector<TargetLu> lus = target_lus(text);
  ASSERT_EQ(lus.size(), 10u);
  EXPECT_EQ(lus[4].iqn, "iqn.2026-11.io.blockps:a-iser");
  EXPECT_EQ(lus[4].path, "/d/grad.ckpt");
  EXPECT_EQ(lus[4].bs_type, "blockps");
  EXPECT_EQ(lus[9].iqn, "iqn.2026-11.io.blockps:b-iser");
}

TEST(TargetsConf, ShardEndpointOfAShardLine) {
  const Result<ShardEndpoint> e = shard_endpoint(kShard, "s.conf");
  ASSERT_TRUE(e.ok()) << e.message();
  EXPECT_EQ(e->portal, "127.0.0.1:3261");
  EXPECT_EQ(e->iqn, "iqn.2026-11.io.blockps:shard0");
  EXPECT_EQ(e->luns, (std::array<std::string, 3>{"1", "2", "3"}));
}

TEST(TargetsConf, ShardEndpointOfThreeBackingStoresByTheirRoles) {
  const Result<ShardEndpoint> e = shard_endpoint(
      "blockps-portal host:3260 extra\n<target iqn.x:y>\n"
      "<backing-store /c/s>\nlun 7\nbsopts 'role=status'\n</backing-store>\n"
      "<backing-store /c/g>\n  # lun 1\n  lun 5\n  bsopts 'size=1M;role=grad'\n</backing-store>\n"
      "<backing-store /c/w>\nlun 6\nbsopts 'role=weights'\n</backing-store>\n</target>\n",
      "s.conf");
  ASSERT_TRUE(e.ok()) << e.message();
  EXPECT_EQ(e->portal, "host:3260") << "the first word";
  EXPECT_EQ(e->iqn, "iqn.x:y");
  EXPECT_EQ(e->luns, (std::array<std::string, 3>{"5", "6", "7"}));
}

TEST(TargetsConf, ShardEndpointNamesTheFileAndLineOfWhatIsWrong) {
  const std::string target = "<target iqn.x:y>\n    blockps-shard /c/m.ckpt 'size=1M'\n</target>\n";
  struct Case {
    std::string text;
    std::string says;
  };
  const Case cases[] = {
      {target, "s.conf: needs exactly one blockps-portal line (found 0)"},
      {"blockps-portal a:1\n" + target + "blockps-portal a:2\n",
       "s.conf:5: needs exactly one blockps-portal line (found 2)"},
      {"blockps-portal a:1\n", "s.conf: needs exactly one <target IQN> (found 0)"},
      {"blockps-portal a:1\n" + target + target, "s.conf:5: needs exactly one <target IQN> (found 2)"},
      {"blockps-portal a:1\n<target iqn.x:y>\n<backing-store /c/g>\nlun 1\nbsopts 'role=grad'\n</backing-store>\n"
       "<backing-store /c/w>\nlun 2\nbsopts 'role=weights'\n</backing-store>\n"
       "<backing-store /c/s>\nbsopts 'role=status'\n</backing-store>\n</target>\n",
       "s.conf:2: needs a blockps-shard line in its <target>, or one LU each with role=grad, role=weights and "
       "role=status (a lun line and a bsopts line)"},
      {"blockps-portal a:1\n<target iqn.x:y>\n    blockps-shard m.ckpt 'size=1M'\n</target>\n",
       "s.conf:3: checkpoint path 'm.ckpt' must be absolute"},
  };
  for (const Case& c : cases) {
    const Result<ShardEndpoint> e = shard_endpoint(c.text, "s.conf");
    ASSERT_FALSE(e.ok()) << c.text;
    EXPECT_EQ(e.status().code(), StatusCode::config);
    EXPECT_EQ(e.message(), c.says) << c.text;
  }
}

}  // namespace
}  // namespace blockps::cli
