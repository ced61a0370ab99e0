// The cluster file: a valid file and its defaults, and every mistake refused with a message that names the
// file, the key (and the shard), the value seen and what is allowed.
#include <gtest/gtest.h>

#include <string>

#include "blockps/cluster_file.h"
#include "contract/byte_size.h"

namespace blockps {
namespace {

constexpr const char* kShards = R"(
[[shard]]
name = "a"
grad = "iscsi://127.0.0.1:3260/iqn.2026-11.io.blockps:a/1"
weights = "iscsi://127.0.0.1:3260/iqn.2026-11.io.blockps:a/2"
status = "iscsi://127.0.0.1:3260/iqn.2026-11.io.blockps:a/3"
[[shard]]
name = "b"
grad = "/dev/disk/by-path/ip-10.0.0.2:3260-iscsi-iqn.2026-11.io.blockps:b-lun-1"
weights = "iser://10.0.0.2:3260/iqn.2026-11.io.blockps:b/2"
status = "/dev/sdc"
)";

std::string file(const std::string& head) { return head + kShards; }

TEST(ClusterFile, ParsesAValidFile) {
  auto c = parse_cluster_text(file(R"(
[model]
name = "resnet50/run-7"
size = "32M"
dtype = "bf16"
block = "128K"
[layout]
kind = "range"
[client]
job = "torchrun:abc-1@host+2"
initiator = "iqn.2026-11.io.blockps:me"
queue_depth = 8
exchange_writes = 3
send_order = "queue"
engine = "io_uring"
max_request = "2M"
reconnect_s = 2.5
timeout_s = 7
)"),
                              "c.toml");
  ASSERT_TRUE(c.ok()) << c.message();
  EXPECT_EQ(c->model.name, "resnet50/run-7");
  EXPECT_EQ(c->model.size_bytes, 32u << 20);
  EXPECT_EQ(c->model.dtype, WireDtype::bf16);
  EXPECT_EQ(c->model.block_bytes, 128u << 10);
  EXPECT_EQ(c->layout, LayoutKind::range);
  EXPECT_EQ(c->client.job, "torchrun:abc-1@host+2");
  EXPECT_EQ(c->client.initiator, "iqn.2026-11.io.blockps:me");
  EXPECT_EQ(c->client.queue_depth, 8);
  EXPECT_EQ(c->client.exchange_writes, 3);
  EXPECT_EQ(c->client.send_order, SendOrder::queue);
  EXPECT_EQ(c->client.engine, PosixEngine::io_uring);
  EXPECT_EQ(c->client.max_request_bytes, 2u << 20);
  EXPECT_EQ(c->client.reconnect_s, 2.5);
  EXPECT_EQ(c->client.timeout_s, 7);
  ASSERT_EQ(c->shards.size(), 2u);
  EXPECT_EQ(c->shards[0].name, "a");
  EXPECT_EQ(c->shards[0].grad.kind, LuAddress::Kind::iscsi_url);
  EXPECT_EQ(c->shards[1].grad.kind, LuAddress::Kind::device_path);
  EXPECT_EQ(c->shards[1].weights.kind, LuAddress::Kind::iser_url);
  EXPECT_EQ(c->shards[1].status.text, "/dev/sdc");
}

TEST(ClusterFile, Defaults) {
  auto c = parse_cluster_text(file("[model]\nsize = 1048576\n"), "c.toml");
  ASSERT_TRUE(c.ok()) << c.message();
  EXPECT_EQ(c->model.dtype, WireDtype::f32);
  EXPECT_EQ(c->model.block_bytes, 256u << 10);
  EXPECT_EQ(c->model.name, "") << "no [model] name: the shards' own, or a new identity";
  EXPECT_EQ(c->client.job, "") << "no [client] job: OpenOptions, BLOCKPS_JOB, or none";
  EXPECT_EQ(c->layout, LayoutKind::stripe);
  EXPECT_EQ(c->client.queue_depth, 16);
  EXPECT_EQ(c->client.exchange_writes, 2);
  EXPECT_EQ(c->client.send_order, std::nullopt) << "the opener's choice (Cluster::prefer_send_order)";
  EXPECT_EQ(c->client.engine, PosixEngine::libaio);
  EXPECT_EQ(c->client.max_request_bytes, 1u << 20);
  EXPECT_EQ(c->client.reconnect_s, 60);
  EXPECT_EQ(c->client.timeout_s, 30);
  EXPECT_EQ(c->client.initiator.rfind("iqn.2026-11.io.blockps:worker-", 0), 0u) << c->client.initiator;
  EXPECT_EQ(c->client.initiator.find_first_of("ABCDEFGHIJKLMNOPQRSTUVWXYZ_ "), std::string::npos);
}

// The one byte-size grammar (contract/byte_size.h), as cluster files and bsopts both read it: a
// lower-case suffix, refused here before the grammar had one home, is now what bsopts always took.
TEST(ClusterFile, ByteCounts) {
  std::uint64_t n = 0;
  EXPECT_TRUE(parse_byte_size("512", n) && n == 512);
  EXPECT_TRUE(parse_byte_size("4K", n) && n == 4096);
  EXPECT_TRUE(parse_byte_size("3G", n) && n == 3ull << 30);
  EXPECT_TRUE(parse_byte_size("4k", n) && n == 4096);
  EXPECT_FALSE(parse_byte_size("", n));
  EXPECT_FALSE(parse_byte_size("K", n));
  EXPECT_FALSE(parse_byte_size("4KB", n));
  EXPECT_FALSE(parse_byte_size("-4K", n));
  EXPECT_FALSE(parse_byte_size("+4K", n));
  EXPECT_FALSE(parse_byte_size("1.5M", n));
  EXPECT_FALSE(parse_byte_size("99999999999999999999", n));
  EXPECT_FALSE(parse_byte_size("17179869184G", n));
  EXPECT_EQ(format_byte_size(64ull << 20), "64M");
  EXPECT_EQ(format_byte_size(3072), "3K");
  EXPECT_EQ(format_byte_size(1536), "1536");
  EXPECT_EQ(format_byte_size(1000), "1000");
}

TEST(ClusterFile, AModelSizeReadsAsBsoptsReadIt) {
  auto c = parse_cluster_text(
      "[model]\nsize = \"1m\"\n[[shard]]\ngrad = \"/dev/a\"\nweights = \"/dev/b\"\n"
      "status = \"/dev/c\"\n",
      "m.toml");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->model.size_bytes, 1u << 20);
}

struct Mistake {
  const char* what;
  std::string text;
  std::string message;  // the exact message after "m.toml"
};

constexpr const char* kGoodModel = "[model]\nsize = \"1M\"\n";

TEST(ClusterFile, EveryMistakeHasItsMessage) {
  const std::string grad = "grad = \"iscsi://h:3260/iqn.x:y/1\"\n";
  const std::string weights = "weights = \"iscsi://h:3260/iqn.x:y/2\"\n";
  const std::string status = "status = \"iscsi://h:3260/iqn.x:y/3\"\n";
  const std::string one_shard = "[[shard]]\nname = \"s0\"\n" + grad + weights + status;
  const Mistake mistakes[] = {
      {"not TOML", "[model\n", ":1:7: not valid TOML: "},
      {"unknown section", kGoodModel + std::string("[modle]\n") + one_shard,
       ": [top level] unknown key 'modle' (known: model, layout, client, shard)"},
      {"no model", one_shard, ": [model] is required (size, dtype, block)"},
      {"model not a table", "model = 3\n" + one_shard, ": 'model' must be a table ([model]), not 3"},
      {"unknown model key", "[model]\nsize = \"1M\"\nelements = 4\n" + one_shard,
       ": [model] unknown key 'elements' (known: name, size, dtype, block)"},
      {"model name with a blank", "[model]\nsize = \"1M\"\nname = \"my model\"\n" + one_shard,
       ": [model] name = \"my model\": must be the model's name, the same in every cluster file of this model: 1 to "
       "128 characters of A-Z a-z 0-9 . _ : @ / + -"},
      {"model name empty", "[model]\nsize = \"1M\"\nname = \"\"\n" + one_shard,
       ": [model] name = \"\": must be the model's name"},
      {"model name a number", "[model]\nsize = \"1M\"\nname = 7\n" + one_shard, ": [model] name = 7: must be"},
      {"job with '='", kGoodModel + std::string("[client]\njob = \"a=b\"\n") + one_shard,
       ": [client] job = \"a=b\": must be the job's name, the same for every worker of the job: 1 to 128 characters "
       "of A-Z a-z 0-9 . _ : @ / + -"},
      {"job too long", kGoodModel + std::string("[client]\njob = \"") + std::string(129, 'j') + "\"\n" + one_shard,
       ": [client] job = \"" + std::string(129, 'j') + "\": must be the job's name"},
      {"job with a newline", kGoodModel + std::string("[client]\njob = \"a\\nreset-rounds\"\n") + one_shard,
       ": [client] job = \"a\nreset-rounds\": must be the job's name"},
      {"no size", "[model]\ndtype = \"f32\"\n" + one_shard,
       ": [model] size is required (must be a byte count > 0, a multiple of 512, with an optional K, M, G or T "
       "suffix (e.g. \"32M\"))"},
      {"bad size suffix", "[model]\nsize = \"32MB\"\n" + one_shard,
       ": [model] size = \"32MB\": must be a byte count > 0, a multiple of 512, with an optional K, M, G or T suffix "
       "(e.g. \"32M\")"},
      {"size not a multiple of 512", "[model]\nsize = 1000\n" + one_shard,
       ": [model] size = 1000: must be a byte count > 0, a multiple of 512, with an optional K, M, G or T suffix "
       "(e.g. \"32M\")"},
      {"negative size", "[model]\nsize = -4096\n" + one_shard, ": [model] size = -4096: must be a byte count > 0"},
      {"bad dtype", "[model]\nsize = \"1M\"\ndtype = \"f64\"\n" + one_shard,
       ": [model] dtype = \"f64\": must be one of \"f32\" \"bf16\" \"f16\""},
      {"dtype not a string", "[model]\nsize = \"1M\"\ndtype = 32\n" + one_shard,
       ": [model] dtype = 32: must be one of \"f32\" \"bf16\" \"f16\""},
      {"block too big", "[model]\nsize = \"4M\"\nblock = \"1M\"\n" + one_shard,
       ": [model] block = \"1M\": must be a byte count from 512 to 512K, a multiple of 512 (e.g. \"256K\")"},
      {"block not a multiple", "[model]\nsize = \"4M\"\nblock = 1000\n" + one_shard,
       ": [model] block = 1000: must be a byte count from 512 to 512K, a multiple of 512"},
      {"too few blocks",
       "[model]\nsize = \"256K\"\n" + one_shard + "[[shard]]\nname = \"s1\"\n" + grad + weights + status,
       ": [model] size = 262144 is 1 block(s) of 262144 bytes: too few for 2 shards (each shard needs at least one "
       "block)"},
      {"bad layout", kGoodModel + std::string("[layout]\nkind = \"mirror\"\n") + one_shard,
       ": [layout] kind = \"mirror\": must be one of \"stripe\" \"range\""},
      {"unknown layout key", kGoodModel + std::string("[layout]\nshards = 2\n") + one_shard,
       ": [layout] unknown key 'shards' (known: kind)"},
      {"unknown client key", kGoodModel + std::string("[client]\ndepth = 2\n") + one_shard,
       ": [client] unknown key 'depth' (known: job, initiator, queue_depth, exchange_writes, send_order, engine, "
       "max_request, reconnect_s, timeout_s)"},
      {"send order unknown", kGoodModel + std::string("[client]\nsend_order = \"fifo\"\n") + one_shard,
       ": [client] send_order = \"fifo\": must be one of \"ascending\" \"descending\" \"queue\""},
      {"reconnect below 0", kGoodModel + std::string("[client]\nreconnect_s = -1\n") + one_shard,
       ": [client] reconnect_s = -1: must be a number of seconds from 0 (never reconnect) to 86400"},
      {"reconnect in milliseconds", kGoodModel + std::string("[client]\nreconnect_s = 60000000\n") + one_shard,
       ": [client] reconnect_s = 60000000: must be a number of seconds from 0 (never reconnect) to 86400"},
      {"reconnect as text", kGoodModel + std::string("[client]\nreconnect_s = \"60s\"\n") + one_shard,
       ": [client] reconnect_s = \"60s\": must be a number of seconds from 0 (never reconnect) to 86400"},
      {"timeout 0", kGoodModel + std::string("[client]\ntimeout_s = 0\n") + one_shard,
       ": [client] timeout_s = 0: must be a whole number of seconds from 1 to 3600"},
      {"timeout fractional", kGoodModel + std::string("[client]\ntimeout_s = 1.5\n") + one_shard,
       ": [client] timeout_s = 1.5: must be a whole number of seconds from 1 to 3600"},
      {"exchange writes above the queue depth",
       kGoodModel + std::string("[client]\nqueue_depth = 4\nexchange_writes = 5\n") + one_shard,
       ": [client] exchange_writes = 5: must be a whole number from 1 to queue_depth (4)"},
      {"exchange writes 0", kGoodModel + std::string("[client]\nexchange_writes = 0\n") + one_shard,
       ": [client] exchange_writes = 0: must be a whole number from 1 to queue_depth (16)"},
      {"bad initiator", kGoodModel + std::string("[client]\ninitiator = \"worker1\"\n") + one_shard,
       ": [client] initiator = \"worker1\": must be an iSCSI name \"iqn.YYYY-MM.domain:name\" of at most 223 bytes"},
      {"queue depth 0", kGoodModel + std::string("[client]\nqueue_depth = 0\n") + one_shard,
       ": [client] queue_depth = 0: must be a whole number from 1 to 1024"},
      {"queue depth string", kGoodModel + std::string("[client]\nqueue_depth = \"16\"\n") + one_shard,
       ": [client] queue_depth = \"16\": must be a whole number from 1 to 1024"},
      {"bad engine", kGoodModel + std::string("[client]\nengine = \"spdk\"\n") + one_shard,
       ": [client] engine = \"spdk\": must be one of \"psync\" \"libaio\" \"io_uring\""},
      {"max_request under a block", kGoodModel + std::string("[client]\nmax_request = \"64K\"\n") + one_shard,
       ": [client] max_request = \"64K\": must be a byte count from the model block (262144) to 16M"},
      {"no shards", std::string(kGoodModel),
       ": no [[shard]] sections: a cluster needs at least one shard (name, grad, weights, status)"},
      {"shard not an array of tables", "shard = \"x\"\n" + std::string(kGoodModel),
       ": 'shard' must be an array of tables ([[shard]] sections), not \"x\""},
      {"unknown shard key", kGoodModel + one_shard + "lun = 1\n",
       ": [shard 's0'] unknown key 'lun' (known: name, grad, weights, status)"},
      {"missing grad", kGoodModel + std::string("[[shard]]\nname = \"s0\"\n") + weights + status,
       ": [shard 's0'] grad is required (must be an iscsi://HOST:PORT/IQN/LUN or iser://HOST:PORT/IQN/LUN URL, or "
       "an absolute device path)"},
      {"relative device path",
       kGoodModel + std::string("[[shard]]\nname = \"s0\"\ngrad = \"dev/sdb\"\n") + weights + status,
       ": [shard 's0'] grad = \"dev/sdb\": must be an iscsi://HOST:PORT/IQN/LUN or iser://HOST:PORT/IQN/LUN URL, or "
       "an absolute device path"},
      {"URL without a LUN",
       kGoodModel + std::string("[[shard]]\nname = \"s0\"\n") + grad + "weights = \"iscsi://h:3260/iqn.x:y\"\n" +
           status,
       ": [shard 's0'] weights = \"iscsi://h:3260/iqn.x:y\": must be an iscsi://HOST:PORT/IQN/LUN"},
      {"URL with a bad LUN",
       kGoodModel + std::string("[[shard]]\nname = \"s0\"\n") + grad + weights +
           "status = \"iser://h:3260/iqn.x:y/three\"\n",
       ": [shard 's0'] status = \"iser://h:3260/iqn.x:y/three\": must be an iscsi://HOST:PORT/IQN/LUN"},
      {"unknown scheme",
       kGoodModel + std::string("[[shard]]\nname = \"s0\"\ngrad = \"nbd://h/x\"\n") + weights + status,
       ": [shard 's0'] grad = \"nbd://h/x\": must be an iscsi://"},
      {"address not a string", kGoodModel + std::string("[[shard]]\nname = \"s0\"\ngrad = 1\n") + weights + status,
       ": [shard 's0'] grad = 1: must be an iscsi://"},
      {"empty name", kGoodModel + std::string("[[shard]]\nname = \"\"\n") + grad + weights + status,
       ": [shard #1] name = \"\": must be a non-empty string"},
      {"duplicate name", "[model]\nsize = \"1M\"\n" + one_shard + one_shard,
       ": [[shard]] name = \"s0\" is given twice: names must be unique"},
  };
  for (const Mistake& m : mistakes) {
    SCOPED_TRACE(m.what);
    auto c = parse_cluster_text(m.text, "m.toml");
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.message().rfind("m.toml", 0), 0u) << c.message();
    EXPECT_NE(c.message().find(m.message), std::string::npos)
        << "got:      " << c.message() << "\nexpected: m.toml" << m.message;
  }
}

// The longest job name the shards take (128 characters) and every character they allow.
TEST(ClusterFile, AJobNameMayUseTheWholeCharset) {
  const std::string longest(128, 'x');
  const std::string every = "AZaz09._:@/+-";
  auto c = parse_cluster_text(std::string(kGoodModel) + "name = \"" + every + "\"\n[client]\njob = \"" + longest +
                                  "\"\n[[shard]]\ngrad = \"/dev/a\"\nweights = \"/dev/b\"\nstatus = \"/dev/c\"\n",
                              "j.toml");
  ASSERT_TRUE(c.ok()) << c.message();
  EXPECT_EQ(c->client.job, longest);
  EXPECT_EQ(c->model.name, every);
}

TEST(ClusterFile, MissingFileNamesThePath) {
  auto c = load_cluster_file("/nonexistent/cluster.toml");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.message(), "/nonexistent/cluster.toml: cannot read the cluster file: No such file or directory");
}

}  // namespace
}  // namespace blockps
