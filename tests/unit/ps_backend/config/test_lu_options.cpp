#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "ps_backend/config/lu_options.h"
#include "tests/support/status_text.h"

namespace blockps {
namespace {

LuOptions parse_ok(const std::string& s, std::uint32_t lu_block = 512) {
  auto r = parse_lu_options(s, lu_block);
  if (!r.ok()) ADD_FAILURE() << s << ": " << r.message();
  return r.ok() ? r.value() : LuOptions{};
}

std::string parse_error(const std::string& s, std::uint32_t lu_block = 512) {
  auto r = parse_lu_options(s, lu_block);
  if (!r.ok()) return r.message();
  ADD_FAILURE() << "accepted: " << s;
  return "";
}

TEST(LuOptions, ParsesEveryKey) {
  const LuOptions o = parse_ok(
      "role=grad; size=64M;dtype=bf16;block=128K;opt=adamw;lr=0.001;momentum=0.5;nesterov=1;beta1=0.8;"
      "beta2=0.99;eps=1e-6;weight_decay=0.01;init=normal:0.02;seed=7;mode=async;device=cpu;checkpoint_s=30;"
      "io_threads=8;claim_idle_s=0;checkpoint_copy=/mnt/nfs/m.ckpt;main_thread_bytes=16K");
  EXPECT_EQ(o.io_threads, 8u);
  EXPECT_EQ(o.main_thread_bytes, 16u << 10);
  EXPECT_EQ(parse_ok("role=grad").main_thread_bytes, 64u << 10);
  EXPECT_EQ(parse_ok("role=grad;main_thread_bytes=0").main_thread_bytes, 0u);
  EXPECT_EQ(o.role, LuRole::grad);
  EXPECT_EQ(o.config.geometry.bytes, 64ull << 20);
  EXPECT_EQ(o.config.geometry.dtype, WireDtype::bf16);
  EXPECT_EQ(o.config.geometry.block_bytes, 128u << 10);
  EXPECT_EQ(o.config.optimizer.kind, OptimizerKind::adamw);
  EXPECT_FLOAT_EQ(o.config.optimizer.lr, 0.001f);
  EXPECT_FLOAT_EQ(o.config.optimizer.momentum, 0.5f);
  EXPECT_TRUE(o.config.optimizer.nesterov);
  EXPECT_FLOAT_EQ(o.config.optimizer.beta1, 0.8f);
  EXPECT_FLOAT_EQ(o.config.optimizer.beta2, 0.99f);
  EXPECT_FLOAT_EQ(o.config.optimizer.eps, 1e-6f);
  EXPECT_FLOAT_EQ(o.config.optimizer.weight_decay, 0.01f);
  EXPECT_EQ(o.config.init.kind, InitSpec::Kind::normal);
  EXPECT_DOUBLE_EQ(o.config.init.scale, static_cast<double>(0.02f));
  EXPECT_EQ(o.config.seed, 7u);
  EXPECT_EQ(o.config.checkpoint_s, 30u);
  EXPECT_EQ(o.config.claim_idle_s, 0u);
  EXPECT_EQ(o.config.checkpoint_copy, "/mnt/nfs/m.ckpt");
  EXPECT_EQ(o.given.size(), 18u);
}

// claim_idle_s: how long the holder of a shard may be silent before another job may claim it; 0 never.
TEST(LuOptions, ClaimIdleSDefaultsToTenMinutesAndIsChecked) {
  EXPECT_EQ(parse_ok("role=grad;size=1M").config.claim_idle_s, 30u);
  EXPECT_EQ(parse_ok("role=grad;size=1M;claim_idle_s=31536000").config.claim_idle_s, 31536000u);
  EXPECT_EQ(parse_error("role=grad;size=1M;claim_idle_s=-1"),
            "claim_idle_s=-1: must be whole seconds from 0 to 31536000");
  EXPECT_EQ(parse_error("role=grad;size=1M;claim_idle_s=31536001"),
            "claim_idle_s=31536001: must be whole seconds from 0 to 31536000");
  // A shard key: recorded in the options text, and a hyper-parameter a checkpoint's shard takes anew.
  const LuOptions o = parse_ok("role=grad;size=1M;claim_idle_s=60");
  EXPECT_NE(format_shard_options(o.config).find("claim_idle_s=60"), std::string::npos);
  ShardConfig saved = o.config;
  saved.claim_idle_s = 600;
  const Result<ShardConfig> merged = merge_onto(o, saved, /*structural_only=*/true);
  ASSERT_TRUE(merged.ok()) << merged.message();
  EXPECT_EQ(merged->claim_idle_s, 60u);
}

// checkpoint_copy: a second file each checkpoint is copied to; none by default. A shard key: the LUs of a shard
// agree on it, checkpoints record it, and one given replaces a checkpoint's.
TEST(LuOptions, CheckpointCopyIsNoneOrAnAbsolutePath) {
  EXPECT_EQ(parse_ok("role=grad;size=1M").config.checkpoint_copy, "");
  EXPECT_EQ(parse_ok("role=grad;size=1M;checkpoint_copy=none").config.checkpoint_copy, "");
  const LuOptions o = parse_ok("role=grad;size=1M;checkpoint_copy=/mnt/nfs/shard0.ckpt");
  EXPECT_EQ(o.config.checkpoint_copy, "/mnt/nfs/shard0.ckpt");
  EXPECT_TRUE(o.given.count("checkpoint_copy"));
  EXPECT_NE(format_shard_options(o.config).find(";checkpoint_copy=/mnt/nfs/shard0.ckpt;"), std::string::npos);
  EXPECT_NE(format_shard_options(parse_ok("role=grad").config).find(";checkpoint_copy=none;"), std::string::npos);
  for (const char* bad : {"nfs/shard0.ckpt", "./shard0.ckpt", "", "None"})
    EXPECT_EQ(
        parse_error(std::string("role=grad;checkpoint_copy=") + bad),
        "checkpoint_copy=" + std::string(bad) + ": must be none or an absolute path other than the shard's checkpoint");
  // The shard's own refusal, when the copy turns out to be its checkpoint file, in the same words.
  EXPECT_EQ(bad_checkpoint_copy("/d/m.ckpt").message(),
            "checkpoint_copy=/d/m.ckpt: must be none or an absolute path other than the shard's checkpoint");
  EXPECT_EQ(bad_checkpoint_copy("/d/m.ckpt").code(), StatusCode::config);

  ShardConfig saved = o.config;
  saved.checkpoint_copy = "/mnt/old/shard0.ckpt";
  const Result<ShardConfig> reopened = merge_onto(o, saved, /*structural_only=*/true);
  ASSERT_EQ(error_text(reopened), "");
  EXPECT_EQ(reopened->checkpoint_copy, "/mnt/nfs/shard0.ckpt");
  EXPECT_EQ(merge_onto(parse_ok("role=weights"), saved, true)->checkpoint_copy, "/mnt/old/shard0.ckpt");
  EXPECT_EQ(error_text(merge_onto(o, saved, /*structural_only=*/false)),
            "checkpoint_copy=/mnt/nfs/shard0.ckpt differs from checkpoint_copy=/mnt/old/shard0.ckpt");
}

TEST(LuOptions, DefaultsForAKeyThatIsNotGiven) {
  const LuOptions o = parse_ok("role=weights;size=1M");
  EXPECT_EQ(o.role, LuRole::weights);
  EXPECT_EQ(o.config.geometry.block_bytes, 256u << 10);
  EXPECT_EQ(o.config.geometry.dtype, WireDtype::f32);
  EXPECT_EQ(o.config.optimizer.kind, OptimizerKind::sgd);
  EXPECT_EQ(o.config.init.kind, InitSpec::Kind::zeros);
  EXPECT_EQ(o.given, std::set<std::string>{"size"});
}

TEST(LuOptions, PushLeadPacesSyncWorkersByDefaultAndZeroTurnsItOff) {
  EXPECT_EQ(parse_ok("role=grad;mode=sync").config.rounds.push_lead, 2u);
  EXPECT_EQ(parse_ok("role=grad;mode=sync;push_lead=0").config.rounds.push_lead, 0u);
  EXPECT_EQ(parse_ok("role=grad;mode=sync;push_lead=16").config.rounds.push_lead, 16u);
}

TEST(LuOptions, RefusesBadInputWithThePreciseReason) {
  struct Case {
    const char* bsopts;
    const char* expect;  // a substring of the message
  };
  const Case cases[] = {
      {"", "role= is required"},
      {"size=1M", "role= is required"},
      {"role=gradient", "role=gradient: must be grad, weights or status"},
      {"role=grad;admins=iqn.2026-11.io.blockps:admin", "admins= applies to the status LU (role=status)"},
      {"role=status;admins=", "admins=(empty): must name at least one initiator"},
      {"role=status;admins=worker1", "admins=worker1: must be iSCSI names"},
      {"role=status;admins=iqn.2026-11.io.blockps:a||iqn.2026-11.io.blockps:b", "admins=(empty): must be iSCSI names"},
      {"role=status;admins=iqn.2026-11.io.blockps:a b", "admins=iqn.2026-11.io.blockps:a b: must be iSCSI names"},
      {"role=grad;colour=red", "unknown key 'colour'"},
      {"role=grad;lr", "'lr' is not key=value"},
      {"role=grad;role=weights", "given twice"},
      {"role=grad;size=1M;size=2M", "given twice"},
      {"role=grad;size=0", "size=0: must be a byte count > 0"},
      {"role=grad;size=12Q", "size=12Q"},
      {"role=grad;size=-5", "size=-5"},
      {"role=grad;size=1000", "must be a multiple of the LU block size (512 bytes)"},
      {"role=grad;dtype=f64", "dtype=f64: must be f32, bf16 or f16"},
      {"role=grad;block=1M", "block=1M: must be a byte count from 1 LU block to 512K"},
      {"role=grad;block=0", "block=0"},
      {"role=grad;block=1000", "block=1000: must be a multiple of the LU block size"},
      {"role=grad;opt=lamb", "opt=lamb: must be sgd, momentum, adam, adamw, sum or average"},
      {"role=grad;lr=-0.1", "lr=-0.1: must be a finite number >= 0"},
      {"role=grad;lr=abc", "lr=abc"},
      {"role=grad;lr=nan", "lr=nan"},
      {"role=grad;lr=inf", "lr=inf"},
      {"role=grad;momentum=1", "momentum=1: must be in [0, 1)"},
      {"role=grad;nesterov=maybe", "nesterov=maybe: must be 0, 1, true or false"},
      {"role=grad;nesterov=1;momentum=0", "nesterov=1 needs momentum > 0"},
      {"role=grad;beta1=1.5", "beta1=1.5: must be in [0, 1)"},
      {"role=grad;beta2=-0.1", "beta2=-0.1"},
      {"role=grad;eps=0", "eps=0: must be a finite number > 0"},
      {"role=grad;weight_decay=-1", "weight_decay=-1"},
      {"role=grad;init=ones", "init=ones: must be zeros, uniform:A or normal:S"},
      {"role=grad;init=uniform:0", "init=uniform:0"},
      {"role=grad;init=normal:x", "init=normal:x"},
      {"role=grad;init=file:", "init=file:"},
      {"role=grad;seed=-1", "seed=-1: must be an unsigned integer"},
      {"role=grad;mode=ssp", "mode=ssp: must be async, sync or ssp:K"},
      {"role=grad;mode=ssp:-1", "mode=ssp:-1: must be async, sync or ssp:K"},
      {"role=grad;mode=sync;min_workers=3", "min_workers=3 is more than workers=1"},
      {"role=grad;workers=0", "workers=0: must be a whole number from 1 to 4096"},
      {"role=grad;straggler_ms=-1", "straggler_ms=-1: must be a whole number"},
      {"role=grad;worker_timeout_ms=5", "worker_timeout_ms=5: must be a whole number from 100"},
      {"role=grad;push_lead=-1", "push_lead=-1: must be a whole number from 0 to 1000000"},
      {"role=grad;push_lead=1000001", "push_lead=1000001: must be a whole number from 0 to 1000000"},
      {"role=grad;device=gpu", "device=gpu: must be cpu, auto or gpu:N"},
      {"role=grad;device=gpu:x", "device=gpu:x: must be cpu, auto or gpu:N"},
      {"role=grad;device=gpu:-1", "device=gpu:-1: must be cpu, auto or gpu:N"},
      {"role=grad;device=cuda", "device=cuda: must be cpu, auto or gpu:N"},
      {"role=grad;checkpoint_s=-3", "checkpoint_s=-3"},
      {"role=grad;checkpoint_s=1.5", "checkpoint_s=1.5"},
      {"role=grad;checkpoint_copy=nfs/m.ckpt", "checkpoint_copy=nfs/m.ckpt: must be none or an absolute path"},
      {"role=grad;io_threads=0", "io_threads=0: must be a whole number from 1 to 64"},
      {"role=grad;main_thread_bytes=1M", "main_thread_bytes=1M: must be a byte count from 0 to 512K"},
      {"role=grad;main_thread_bytes=-1", "main_thread_bytes=-1: must be a byte count from 0 to 512K"},
      {"role=grad;io_threads=4;io_threads=2", "given twice"},
  };
  for (const Case& c : cases) {
    const std::string msg = parse_error(c.bsopts);
    EXPECT_NE(msg.find(c.expect), std::string::npos) << "bsopts '" << c.bsopts << "' gave: " << msg;
  }
}

// tgtadm reports an unknown key apart from a bad value ("unknown parameter"): the C boundary tells them apart
// by the code, not by the wording.
TEST(LuOptions, AnUnknownKeyHasItsOwnCode) {
  EXPECT_EQ(parse_lu_options("role=grad;colour=red", 512).status().code(), StatusCode::unknown_option);
  EXPECT_EQ(parse_lu_options("role=grad;lr=x", 512).status().code(), StatusCode::config);
  EXPECT_EQ(parse_lu_options("role=grad;lr", 512).status().code(), StatusCode::config);
}

TEST(LuOptions, AdminsIsAListOfInitiatorNames) {
  const auto parsed = parse_lu_options("role=status;admins=iqn.2026-11.io.blockps:admin | eui.02004567A425678D", 512);
  ASSERT_TRUE(parsed.ok()) << parsed.message();
  const LuOptions& o = parsed.value();
  EXPECT_EQ(o.admins, (std::vector<std::string>{"iqn.2026-11.io.blockps:admin", "eui.02004567A425678D"}));
  EXPECT_TRUE(o.given.empty()) << "admins= is the LU's, not the shard's (not merged, not in checkpoints)";
  const auto none = parse_lu_options("role=status", 512);
  ASSERT_TRUE(none.ok()) << none.message();
  EXPECT_TRUE(none->admins.empty());
}

TEST(LuOptions, LuBlockSizeGovernsSizeAndBlock) {
  EXPECT_NE(parse_error("role=grad;size=6K", 4096).find("multiple of the LU block size (4096 bytes)"),
            std::string::npos);
  parse_ok("role=grad;size=8K;block=4K", 4096);
}

TEST(LuOptions, ByteSizes) {
  std::uint64_t n = 0;
  EXPECT_TRUE(parse_byte_size("256K", n));
  EXPECT_EQ(n, 256u << 10);
  EXPECT_TRUE(parse_byte_size("3g", n));
  EXPECT_EQ(n, 3ull << 30);
  EXPECT_TRUE(parse_byte_size("4096", n));
  EXPECT_EQ(n, 4096u);
  EXPECT_FALSE(parse_byte_size("K", n));
  EXPECT_FALSE(parse_byte_size("99999999999999999999T", n));
  EXPECT_EQ(format_byte_size(256u << 10), "256K");
  EXPECT_EQ(format_byte_size(1000), "1000");
}

// One definition of the blanks (contract/blanks.h) for every grammar: around a size, a key and a value.
TEST(LuOptions, BlanksAroundKeysAndValuesAreIgnored) {
  std::uint64_t n = 0;
  EXPECT_TRUE(parse_byte_size(" \t64M\r", n));
  EXPECT_EQ(n, 64u << 20);
  EXPECT_FALSE(parse_byte_size("64 M", n));
  const LuOptions o = parse_ok(" role = grad ;\tsize= 1M\t; lr =0.5 ");
  EXPECT_EQ(o.role, LuRole::grad);
  EXPECT_EQ(o.config.geometry.bytes, 1u << 20);
  EXPECT_FLOAT_EQ(o.config.optimizer.lr, 0.5f);
}

TEST(LuOptions, FormattedShardOptionsParseBackToTheSameConfig) {
  const LuOptions o = parse_ok("role=grad;size=3M;dtype=f16;opt=momentum;lr=0.125;nesterov=1;init=uniform:0.5;seed=3");
  const std::string text = format_shard_options(o.config);
  const LuOptions back = parse_ok("role=status;" + text, 1);
  EXPECT_EQ(format_shard_options(back.config), text);
  EXPECT_EQ(back.config.geometry, o.config.geometry);
  EXPECT_EQ(back.config.init, o.config.init);
}

TEST(LuOptions, MergeOntoAnOpenShardRequiresAgreement) {
  const ShardConfig open = parse_ok("role=grad;size=4M;opt=adam;lr=0.001").config;
  // Keys not given are inherited.
  const Result<ShardConfig> merged = merge_onto(parse_ok("role=weights"), open, false);
  ASSERT_EQ(error_text(merged), "");
  EXPECT_EQ(merged->geometry.bytes, 4u << 20);
  EXPECT_EQ(merged->optimizer.kind, OptimizerKind::adam);
  // Keys given must match.
  EXPECT_EQ(error_text(merge_onto(parse_ok("role=status;size=4M;opt=adam"), open, false)), "");
  EXPECT_EQ(error_text(merge_onto(parse_ok("role=weights;size=8M"), open, false)), "size=8M differs from size=4M");
  EXPECT_EQ(error_text(merge_onto(parse_ok("role=weights;lr=0.01"), open, false)), "lr=0.01 differs from lr=0.001");
  EXPECT_EQ(merge_onto(parse_ok("role=weights;size=8M"), open, false).status().code(), StatusCode::mismatch);
}

TEST(LuOptions, MergeOntoACheckpointKeepsShapeButTakesNewHyperParameters) {
  const ShardConfig saved = parse_ok("role=grad;size=4M;opt=adam;lr=0.001").config;
  const Result<ShardConfig> merged = merge_onto(parse_ok("role=grad;size=4M;opt=adam;lr=0.01"), saved, true);
  ASSERT_EQ(error_text(merged), "");
  EXPECT_FLOAT_EQ(merged->optimizer.lr, 0.01f);
  EXPECT_EQ(error_text(merge_onto(parse_ok("role=grad;opt=sgd"), saved, true)), "opt=sgd differs from opt=adam");
  EXPECT_EQ(error_text(merge_onto(parse_ok("role=grad;dtype=bf16"), saved, true)), "dtype=bf16 differs from dtype=f32");
}

TEST(LuOptions, AnAveragingShardNeedsSyncAlsoWhenItsCheckpointIsOpenedWithAnotherMode) {
  EXPECT_EQ(parse_ok("role=grad;opt=average;mode=sync;workers=2").config.optimizer.kind, OptimizerKind::average);
  for (const char* mode : {"", ";mode=async", ";mode=ssp:2"}) {
    const std::string msg = parse_error(std::string("role=grad;opt=average") + mode);
    EXPECT_NE(msg.find("opt=average needs mode=sync (mode="), std::string::npos) << mode << ": " << msg;
  }
  EXPECT_NE(parse_error("role=grad;opt=averge").find("opt=averge: must be sgd, momentum, adam, adamw, sum or average"),
            std::string::npos);
  const ShardConfig saved = parse_ok("role=grad;size=4M;opt=average;mode=sync").config;
  EXPECT_EQ(error_text(merge_onto(parse_ok("role=grad;mode=sync;workers=3"), saved, true)), "");
  const std::string refused = error_text(merge_onto(parse_ok("role=grad;mode=async"), saved, true));
  EXPECT_NE(refused.find("opt=average needs mode=sync (mode=async)"), std::string::npos) << refused;
}

TEST(LuOptions, CompressNamesAFormatNeedsSyncAndABlockItShortens) {
  const LuOptions o = parse_ok("role=grad;size=1M;block=64K;mode=sync;compress=sign1;compress_after=50");
  ASSERT_TRUE(o.config.rounds.compress.has_value());
  EXPECT_EQ(*o.config.rounds.compress, CompressedFormat::sign1);
  EXPECT_EQ(o.config.rounds.compress_after, 50u);
  EXPECT_FALSE(o.config.rounds.compressed_round(49));
  EXPECT_TRUE(o.config.rounds.compressed_round(50));
  EXPECT_FALSE(parse_ok("role=grad;mode=sync").config.rounds.compress.has_value()) << "none by default";
  EXPECT_FALSE(parse_ok("role=grad;mode=sync;compress=none").config.rounds.compressed_round(7));
  const LuOptions back = parse_ok("role=grad;" + format_shard_options(o.config));
  EXPECT_EQ(back.config.rounds, o.config.rounds) << "a checkpoint's options text keeps compress and compress_after";
  EXPECT_NE(parse_error("role=grad;mode=sync;compress=zip").find("compress=zip: must be none, sign1 or int8"),
            std::string::npos);
  EXPECT_NE(parse_error("role=grad;compress=int8").find("compress=int8 needs mode=sync (mode=async)"),
            std::string::npos);
  EXPECT_NE(parse_error("role=grad;mode=sync;compress=int8;compress_after=-1").find("compress_after=-1: must be"),
            std::string::npos);
  // int8 of 512 bf16 elements is 4 + 512 bytes, padded to 1K: as long as the block, so a push's length could not say
  // which form it is.
  EXPECT_NE(parse_error("role=grad;size=4K;dtype=bf16;block=1K;mode=sync;compress=int8")
                .find("compress=int8 saves nothing on blocks of 1K of bf16"),
            std::string::npos);
  EXPECT_NE(parse_error("role=grad;size=66048;block=64K;mode=sync;compress=sign1")
                .find("saves nothing on the last block of 512 of f32"),
            std::string::npos);
  const ShardConfig saved = o.config;
  const std::string refused = error_text(merge_onto(parse_ok("role=grad;mode=async"), saved, true));
  EXPECT_NE(refused.find("compress=sign1 needs mode=sync (mode=async)"), std::string::npos) << refused;
}

// docs/OPTIONS.md is the one page users read: every key must be there.
TEST(LuOptions, EveryKeyIsDocumented) {
  std::ifstream in(BLOCKPS_OPTIONS_DOC);
  ASSERT_TRUE(in) << "cannot read " << BLOCKPS_OPTIONS_DOC;
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string doc = ss.str();
  for (const OptionKey& k : option_keys())
    EXPECT_NE(doc.find("| `" + std::string(k.name) + "` |"), std::string::npos)
        << "bsopts key " << k.name << " is missing from docs/OPTIONS.md";
}

}  // namespace
}  // namespace blockps
