// The blockps module inside a real tgtd, driven over iSCSI by libiscsi: pushes give the same weights as the
// host reference (the aggregator in this process) for every optimizer and dtype; the weights LU is a disk; the
// status LU reports; checkpoints survive a stop and a kill -9, are copied where checkpoint_copy= says, and the
// status page's block steps say what a kill -9 loses; bad options are refused with their reason and
// leave nothing half-made; out-of-range I/O changes nothing; reads never see a half-updated block.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>
#include <vector>

#include "aggregator/model_shard.h"
#include "client/transport/iscsi_lun.h"
#include "contract/scsi_codes.h"
#include "contract/status_page.h"
#include "tests/support/blockps_shard.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tgtd_instance.h"

namespace blockps::testing {
namespace {

constexpr const char* kInitiator = "iqn.2026-11.io.blockps:module-test";

std::string target_iqn(int tid) { return "iqn.2026-11.io.blockps:module" + std::to_string(tid); }

// Finite values in [-scale, scale) in the wire dtype, from a seed.
std::vector<std::byte> wire_values(WireDtype d, std::size_t elements, std::uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<std::byte> out(elements * wire_size(d));
  for (std::size_t i = 0; i < elements; ++i) {
    const float v = dist(gen);
    switch (d) {
      case WireDtype::f32:
        store_wire<WireDtype::f32>(out.data(), i, v);
        break;
      case WireDtype::bf16:
        store_wire<WireDtype::bf16>(out.data(), i, v);
        break;
      case WireDtype::f16:
        store_wire<WireDtype::f16>(out.data(), i, v);
        break;
    }
  }
  return out;
}

class ModuleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    BLOCKPS_REQUIRE_TGTD_AND_MODULE();
    ASSERT_TRUE(dir_.create("blockps-module-").ok());
    const Status s = tgtd_.start();
    ASSERT_TRUE(s.ok()) << s.message();
  }
  void TearDown() override {
    if (HasFailure() && tgtd_.running()) std::cerr << "---- tgtd log ----\n" << tgtd_.log_text() << "\n";
  }

  // A target with the given LUs (lun -> bsopts) over checkpoint file `ckpt` in the test's directory; the LUs'
  // paths are spelled differently (as in configs/) to show they still share one shard.
  void add_shard(int tid, const std::string& ckpt, const std::vector<std::pair<int, std::string>>& lus) {
    const CommandResult t = tgtd_.add_target(tid, target_iqn(tid));
    ASSERT_TRUE(t.ok()) << t.describe();
    std::string spelled = dir_.path(ckpt);
    for (const auto& [lun, bsopts] : lus) {
      const CommandResult r = tgtd_.add_lu(tid, lun, spelled, "blockps", bsopts);
      ASSERT_TRUE(r.ok()) << bsopts << ": " << r.describe() << "\n" << tgtd_.log_text();
      spelled = dir_.path("./" + spelled.substr(dir_.path().size() + 1));
    }
  }

  void connect(IscsiLun& lun, int tid, int lu, const char* initiator = kInitiator) {
    const Status s = lun.connect(tgtd_.url(target_iqn(tid), lu), initiator);
    ASSERT_TRUE(s.ok()) << s.message();
  }

  std::vector<std::byte> read_all(IscsiLun& lun) {
    std::vector<std::byte> out(lun.capacity_bytes());
    const ScsiResult r = lun.read(0, out);
    EXPECT_TRUE(r.ok()) << r.describe();
    return out;
  }

  // The status page a status LU serves now (a discarded JSON value when it cannot be read).
  nlohmann::json status_page_of(IscsiLun& status) {
    std::vector<std::byte> page(64 * 1024);
    const ScsiResult r = status.read(0, page);
    EXPECT_TRUE(r.ok()) << r.describe();
    return nlohmann::json::parse(reinterpret_cast<const char*>(page.data()), nullptr, false);
  }

  TempDir dir_;
  TgtdInstance tgtd_;
};

// Every optimizer x dtype: initial weights through the weights LU, then whole-LU pushes, a partial-block push
// and a multi-block push in the middle through the grad LU; the weights read back must equal, bit for bit, what
// the aggregator computes in this process for the same sequence.
TEST_F(ModuleTest, PushesMatchTheHostReferenceForEveryOptimizerAndDtype) {
  const char* opts[] = {"opt=sgd;lr=0.1;weight_decay=0.01", "opt=momentum;lr=0.05;momentum=0.9;nesterov=1",
                        "opt=adam;lr=0.01;weight_decay=0.001", "opt=adamw;lr=0.01;weight_decay=0.1", "opt=sum"};
  const WireDtype dtypes[] = {WireDtype::f32, WireDtype::bf16, WireDtype::f16};
  constexpr std::uint64_t kBytes = 192 * 1024;  // 3 blocks of 64K: block boundaries inside pushes
  int tid = 0;
  for (const char* opt : opts) {
    for (const WireDtype d : dtypes) {
      ++tid;
      SCOPED_TRACE(std::string(opt) + " dtype=" + std::string(to_string(d)));
      const std::string bsopts = std::string("size=192K;block=64K;dtype=") + std::string(to_string(d)) + ";" + opt;
      ASSERT_NO_FATAL_FAILURE(add_shard(tid, std::string("m").append(std::to_string(tid)).append(".ckpt"),
                                        {{1, "role=grad;" + bsopts}, {2, "role=weights"}}));
      IscsiLun grad, weights;
      ASSERT_NO_FATAL_FAILURE(connect(grad, tid, 1));
      ASSERT_NO_FATAL_FAILURE(connect(weights, tid, 2));
      ASSERT_EQ(grad.capacity_bytes(), kBytes);

      // The host reference: the same optimizer, fed the same bytes.
      auto parsed_opt = [&] {
        OptimizerParams p;
        const std::string s = opt;
        p.kind = *parse_optimizer(s.substr(4, s.find(';') == std::string::npos ? std::string::npos : s.find(';') - 4));
        auto num = [&](const char* key, float& field) {
          const auto at = s.find(std::string(key) + "=");
          if (at != std::string::npos) field = std::stof(s.substr(at + std::strlen(key) + 1));
        };
        num("lr", p.lr), num("weight_decay", p.weight_decay), num("momentum", p.momentum);
        p.nesterov = s.find("nesterov=1") != std::string::npos;
        if (p.kind == OptimizerKind::sum) p.lr = 0.01f;  // unused by sum; the module's default
        return p;
      }();
      ModelShard reference({kBytes, d, 64 * 1024}, parsed_opt, std::make_shared<CpuEngine>(1));

      const auto init = wire_values(d, kBytes / wire_size(d), 1000 + tid);
      ASSERT_TRUE(weights.write(0, init).ok());
      ASSERT_TRUE(reference.assign_weights(0, init).ok());
      struct Push {
        std::uint64_t offset, bytes;
      };
      const Push pushes[] = {{0, kBytes}, {0, kBytes}, {4096, 8192}, {32768, 98304}, {0, kBytes}};
      std::uint32_t seed = 7;
      for (const Push& p : pushes) {
        const auto g = wire_values(d, p.bytes / wire_size(d), seed++, 0.5f);
        const ScsiResult r = grad.write(p.offset, g);
        ASSERT_TRUE(r.ok()) << r.describe();
        ASSERT_TRUE(reference.push_gradient(p.offset, g).ok());
      }
      std::vector<std::byte> expected(kBytes);
      reference.read_weights(0, expected);
      EXPECT_EQ(read_all(grad), expected) << "grad LU READ differs from the host reference";
      EXPECT_EQ(read_all(weights), expected) << "weights LU READ differs from the host reference";
    }
  }
}

TEST_F(ModuleTest, WeightsLuRoundTripsAndSharesTheShardWithGrad) {
  ASSERT_NO_FATAL_FAILURE(add_shard(1, "m.ckpt", {{1, "role=grad;size=1M;opt=sum"}, {2, "role=weights"}}));
  IscsiLun grad, weights;
  ASSERT_NO_FATAL_FAILURE(connect(grad, 1, 1));
  ASSERT_NO_FATAL_FAILURE(connect(weights, 1, 2));
  const auto data = wire_values(WireDtype::f32, 256 * 1024, 42);
  ASSERT_TRUE(weights.write(0, data).ok());
  EXPECT_EQ(read_all(weights), data);
  EXPECT_EQ(read_all(grad), data);  // one shard behind both LUs
  // sum: pushing -w gives zeros, seen through the weights LU.
  std::vector<std::byte> neg(data);
  for (std::size_t i = 3; i < neg.size(); i += 4) neg[i] ^= std::byte{0x80};
  ASSERT_TRUE(grad.write(0, neg).ok());
  const auto zeros = read_all(weights);
  for (std::size_t i = 0; i < zeros.size(); i += 4) {
    float v;
    std::memcpy(&v, zeros.data() + i, 4);
    ASSERT_EQ(v, 0.0f) << "element " << i / 4;
  }
}

TEST_F(ModuleTest, StatusLuServesJsonAndRefusesWritesThatAreNoControlLines) {
  ASSERT_NO_FATAL_FAILURE(add_shard(
      1, "m.ckpt", {{1, "role=grad;size=512K;opt=momentum;lr=0.5"}, {2, "role=weights"}, {3, "role=status"}}));
  IscsiLun grad, status;
  ASSERT_NO_FATAL_FAILURE(connect(grad, 1, 1));
  ASSERT_NO_FATAL_FAILURE(connect(status, 1, 3));
  const auto g = wire_values(WireDtype::f32, 128 * 1024, 3);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(grad.write(0, g).ok());
  std::vector<std::byte> page(64 * 1024);
  ASSERT_TRUE(status.read(0, page).ok());
  const auto j = nlohmann::json::parse(reinterpret_cast<const char*>(page.data()), nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << reinterpret_cast<const char*>(page.data());
  EXPECT_EQ(j["shard"]["size"], 512 * 1024);
  EXPECT_EQ(j["shard"]["opt"], "momentum");
  EXPECT_EQ(j["counters"]["pushes"], 3);
  EXPECT_EQ(j["counters"]["push_bytes"], 3 * 512 * 1024);
  EXPECT_GT(j["aggregation"]["total_ns"].get<std::uint64_t>(), 0u);
  // A write is a control line; zeros are none: INVALID FIELD IN PARAMETER LIST (test_sync.cpp has the lines).
  const ScsiResult w = status.write(0, std::vector<std::byte>(512));
  EXPECT_TRUE(w.check_condition(scsi::kIllegalRequest, scsi::kAscInvalidFieldInParameterList)) << w.describe();
}

TEST_F(ModuleTest, OutOfRangeIoGetsCheckConditionAndChangesNothing) {
  ASSERT_NO_FATAL_FAILURE(add_shard(1, "m.ckpt", {{1, "role=grad;size=1M;init=uniform:1"}, {2, "role=weights"}}));
  IscsiLun grad, weights;
  ASSERT_NO_FATAL_FAILURE(connect(grad, 1, 1));
  ASSERT_NO_FATAL_FAILURE(connect(weights, 1, 2));
  const auto before = read_all(weights);
  const std::vector<std::byte> g(256 * 1024, std::byte{0x3f});
  for (IscsiLun* lun : {&grad, &weights}) {
    ScsiResult r = lun->write((1 << 20) - 128 * 1024, g);  // straddles the end
    EXPECT_TRUE(r.check_condition(scsi::kIllegalRequest, scsi::kAscLbaOutOfRange)) << r.describe();
    r = lun->write(1 << 20, std::span(g).first(512));  // starts at the end
    EXPECT_TRUE(r.check_condition(scsi::kIllegalRequest, scsi::kAscLbaOutOfRange)) << r.describe();
    std::vector<std::byte> out(4096);
    r = lun->read((1 << 20) - 512, out);
    EXPECT_TRUE(r.check_condition(scsi::kIllegalRequest, scsi::kAscLbaOutOfRange)) << r.describe();
  }
  EXPECT_EQ(read_all(weights), before);
}

TEST_F(ModuleTest, EveryBadOptionIsRefusedWithItsReasonAndNothingIsHalfMade) {
  ASSERT_NO_FATAL_FAILURE(add_shard(1, "good.ckpt", {{1, "role=grad;size=1M;opt=sum"}}));
  IscsiLun good;
  ASSERT_NO_FATAL_FAILURE(connect(good, 1, 1));
  const auto g = wire_values(WireDtype::f32, 256 * 1024, 5);
  ASSERT_TRUE(good.write(0, g).ok());

  struct Case {
    std::string bsopts, path, reason;
  };
  const std::vector<Case> cases = {
      {"size=1M", "a.ckpt", "role= is required"},
      {"role=grad;size=1M;colour=red", "a.ckpt", "unknown key 'colour'"},
      {"role=grad;size=1M;lr=-1", "a.ckpt", "lr=-1: must be a finite number >= 0"},
      {"role=grad;size=1000", "a.ckpt", "size=1000: must be a multiple of the LU block size (512 bytes)"},
      {"role=grad;size=0", "a.ckpt", "size=0: must be a byte count > 0"},
      {"role=grad;size=1M;block=1M", "a.ckpt", "block=1M: must be a byte count from 1 LU block to 512K"},
      {"role=grad;size=1M;block=768", "a.ckpt", "block=768: must be a multiple of the LU block size"},
      {"role=grad;size=1M;dtype=f64", "a.ckpt", "dtype=f64: must be f32, bf16 or f16"},
      {"role=grad;size=1M;opt=lamb", "a.ckpt", "opt=lamb: must be sgd, momentum, adam, adamw, sum or average"},
      {"role=grad;size=1M;momentum=2", "a.ckpt", "momentum=2: must be in [0, 1)"},
      {"role=grad;size=1M;nesterov=maybe", "a.ckpt", "nesterov=maybe"},
      {"role=grad;size=1M;beta1=1", "a.ckpt", "beta1=1: must be in [0, 1)"},
      {"role=grad;size=1M;beta2=-1", "a.ckpt", "beta2=-1"},
      {"role=grad;size=1M;eps=0", "a.ckpt", "eps=0: must be a finite number > 0"},
      {"role=grad;size=1M;weight_decay=-0.5", "a.ckpt", "weight_decay=-0.5"},
      {"role=grad;size=1M;init=ones", "a.ckpt", "init=ones"},
      {"role=grad;size=1M;init=file:/nonexistent/w.bin", "a.ckpt", "init=file:/nonexistent/w.bin: No such file"},
      {"role=grad;size=1M;seed=x", "a.ckpt", "seed=x"},
      {"role=grad;size=1M;mode=ssp:x", "a.ckpt", "mode=ssp:x: must be async, sync or ssp:K"},
      {"role=grad;size=1M;mode=sync;workers=2;min_workers=3", "a.ckpt", "min_workers=3 is more than workers=2"},
      {"role=grad;size=1M;device=tpu", "a.ckpt", "device=tpu: must be cpu, auto or gpu:N"},
      {"role=grad;size=1M;checkpoint_s=soon", "a.ckpt", "checkpoint_s=soon"},
      {"role=grad", "a.ckpt", "size= is required"},
      {"role=weights;size=2M", "good.ckpt", "size=2M differs from size=1M"},
      {"role=weights;opt=sgd", "good.ckpt", "opt=sgd differs from opt=sum"},
      {"role=grad;size=1M", "no-such-dir/a.ckpt", "does not exist"},
  };
  int lun = 10;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.bsopts);
    ++lun;
    const CommandResult r = tgtd_.add_lu(1, lun, dir_.path(c.path), "blockps", c.bsopts);
    EXPECT_FALSE(r.ok()) << "accepted: " << c.bsopts;
    EXPECT_FALSE(tgtd_.has_lu(1, lun)) << "a refused LU was left behind";
    EXPECT_NE(tgtd_.log_text().find(c.reason), std::string::npos) << "tgtd log lacks: " << c.reason;
  }
  // The LU that was there keeps serving, unchanged.
  std::vector<std::byte> out(1 << 20);
  ASSERT_TRUE(good.read(0, out).ok());
  EXPECT_EQ(out, g);
  ASSERT_TRUE(good.write(0, g).ok());
}

// SYNCHRONIZE CACHE writes a checkpoint; a graceful stop writes one too; after kill -9, what was synced (and
// nothing after it) comes back.
TEST_F(ModuleTest, CheckpointSurvivesStopAndKill9) {
  const std::string bsopts = "role=grad;size=1M;opt=adam;lr=0.01";
  const std::vector<std::pair<int, std::string>> lus = {{1, bsopts}, {2, "role=weights"}};
  ASSERT_NO_FATAL_FAILURE(add_shard(1, "m.ckpt", lus));
  std::vector<std::byte> synced;
  {
    IscsiLun grad;
    ASSERT_NO_FATAL_FAILURE(connect(grad, 1, 1));
    for (std::uint32_t s = 0; s < 3; ++s) ASSERT_TRUE(grad.write(0, wire_values(WireDtype::f32, 256 * 1024, s)).ok());
    ASSERT_TRUE(grad.synchronize_cache().ok());
    synced = read_all(grad);
  }
  // 1. Graceful stop and start: identical weights, and Adam's state came back too (the next push agrees with
  //    a shard that never stopped).
  ASSERT_TRUE(tgtd_.stop().ok());
  ASSERT_TRUE(tgtd_.restart().ok());
  ASSERT_NO_FATAL_FAILURE(add_shard(1, "m.ckpt", lus));
  {
    IscsiLun grad;
    ASSERT_NO_FATAL_FAILURE(connect(grad, 1, 1));
    EXPECT_EQ(read_all(grad), synced) << "weights changed across a stop/start";
    // 2. Push after the sync, sync again, push once more, then kill -9: the second sync's state survives.
    ASSERT_TRUE(grad.write(0, wire_values(WireDtype::f32, 256 * 1024, 10)).ok());
    ASSERT_TRUE(grad.synchronize_cache().ok());
    synced = read_all(grad);
    ASSERT_TRUE(grad.write(0, wire_values(WireDtype::f32, 256 * 1024, 11)).ok());
    EXPECT_NE(read_all(grad), synced);
  }
  ASSERT_TRUE(tgtd_.kill9().ok());
  ASSERT_TRUE(tgtd_.restart().ok());
  ASSERT_NO_FATAL_FAILURE(add_shard(1, "m.ckpt", lus));
  IscsiLun grad;
  ASSERT_NO_FATAL_FAILURE(connect(grad, 1, 1));
  EXPECT_EQ(read_all(grad), synced) << "after kill -9 the weights are not those of the last SYNCHRONIZE CACHE";

  // The reference: a shard that never stopped, fed the same pushes, must agree after one more push (the
  // optimizer state and step counts came back with the weights).
  ModelShard reference({1 << 20, WireDtype::f32, 256 * 1024}, {OptimizerKind::adam, 0.01f},
                       std::make_shared<CpuEngine>(1));
  for (std::uint32_t s : {0u, 1u, 2u, 10u, 12u})
    ASSERT_TRUE(reference.push_gradient(0, wire_values(WireDtype::f32, 256 * 1024, s)).ok());
  ASSERT_TRUE(grad.write(0, wire_values(WireDtype::f32, 256 * 1024, 12)).ok());
  std::vector<std::byte> expected(1 << 20);
  reference.read_weights(0, expected);
  EXPECT_EQ(read_all(grad), expected) << "optimizer state was not restored from the checkpoint";
}

// checkpoint_copy= (the chaos tests' shard host lost with its disk): SYNCHRONIZE CACHE leaves the checkpoint's
// bytes in the copy too, and a shard started on the copy serves its weights. The status page's block steps bound
// what a restart loses: /checkpoint/block_steps equals /model/block_steps right after the checkpoint, stays behind
// after one more push, and is where /model/block_steps starts after kill -9 and a restart.
TEST_F(ModuleTest, ACheckpointCopyStartsAShardAndBlockStepsBoundWhatAKill9Loses) {
  namespace page = status_page;
  const auto file_bytes = [](const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), {});
  };
  const auto steps_of = [](const nlohmann::json& p, const char* pointer) {
    return p.at(nlohmann::json::json_pointer(pointer)).get<std::uint64_t>();
  };
  ASSERT_TRUE(std::filesystem::create_directory(dir_.path("nfs")));
  const std::string copy = dir_.path("nfs/m.ckpt");
  const std::vector<std::pair<int, std::string>> lus = {
      {1, "role=grad;size=1M;opt=adam;lr=0.01;checkpoint_copy=" + copy}, {2, "role=weights"}, {3, "role=status"}};
  ASSERT_NO_FATAL_FAILURE(add_shard(1, "m.ckpt", lus));
  std::vector<std::byte> synced;
  std::uint64_t checkpointed_steps = 0;
  {
    IscsiLun grad, status;
    ASSERT_NO_FATAL_FAILURE(connect(grad, 1, 1));
    ASSERT_NO_FATAL_FAILURE(connect(status, 1, 3));
    for (std::uint32_t s = 0; s < 2; ++s) ASSERT_TRUE(grad.write(0, wire_values(WireDtype::f32, 256 * 1024, s)).ok());
    ASSERT_TRUE(grad.synchronize_cache().ok());
    synced = read_all(grad);
    ASSERT_FALSE(file_bytes(copy).empty()) << "no copy at " << copy;
    EXPECT_EQ(file_bytes(copy), file_bytes(dir_.path("m.ckpt")));

    nlohmann::json p = status_page_of(status);
    ASSERT_FALSE(p.is_discarded());
    EXPECT_EQ(steps_of(p, page::kModelBlockSteps), 8u) << "2 pushes over 4 blocks";
    checkpointed_steps = steps_of(p, page::kCheckpointBlockSteps);
    EXPECT_EQ(checkpointed_steps, steps_of(p, page::kModelBlockSteps)) << p.dump();
    EXPECT_EQ(steps_of(p, page::kCheckpointErrors), 0u) << p.dump();
    EXPECT_NE(
        p.at(nlohmann::json::json_pointer(page::kShardOptions)).get<std::string>().find("checkpoint_copy=" + copy),
        std::string::npos);

    ASSERT_TRUE(grad.write(0, wire_values(WireDtype::f32, 256 * 1024, 2)).ok());
    p = status_page_of(status);
    EXPECT_EQ(steps_of(p, page::kModelBlockSteps), checkpointed_steps + 4) << p.dump();
    EXPECT_EQ(steps_of(p, page::kCheckpointBlockSteps), checkpointed_steps) << p.dump();
  }

  // A second shard on the copy (the replacement host's), with the copy's recorded checkpoint_copy= (its own path
  // now) turned off: the checkpoint's weights and steps.
  EXPECT_FALSE(tgtd_.add_lu(1, 10, copy, "blockps", "role=grad").ok());
  EXPECT_NE(tgtd_.log_text().find("(the checkpoint records it; give checkpoint_copy=none or another path"),
            std::string::npos);
  ASSERT_NO_FATAL_FAILURE(add_shard(2, "nfs/m.ckpt", {{1, "role=grad;checkpoint_copy=none"}, {3, "role=status"}}));
  {
    IscsiLun grad, status;
    ASSERT_NO_FATAL_FAILURE(connect(grad, 2, 1));
    ASSERT_NO_FATAL_FAILURE(connect(status, 2, 3));
    EXPECT_EQ(read_all(grad), synced) << "the shard started on the copy serves other weights";
    const nlohmann::json p = status_page_of(status);
    EXPECT_EQ(steps_of(p, page::kModelBlockSteps), checkpointed_steps) << p.dump();
  }

  ASSERT_TRUE(tgtd_.kill9().ok());
  ASSERT_TRUE(tgtd_.restart().ok());
  ASSERT_NO_FATAL_FAILURE(add_shard(1, "m.ckpt", lus));
  IscsiLun grad, status;
  ASSERT_NO_FATAL_FAILURE(connect(grad, 1, 1));
  ASSERT_NO_FATAL_FAILURE(connect(status, 1, 3));
  EXPECT_EQ(read_all(grad), synced);
  const nlohmann::json p = status_page_of(status);
  EXPECT_EQ(steps_of(p, page::kModelBlockSteps), checkpointed_steps) << "the push after the checkpoint was lost";
  EXPECT_EQ(steps_of(p, page::kCheckpointBlockSteps), checkpointed_steps) << p.dump();
}

// Concurrent pushes of a constant gradient with opt=sum keep every block uniform; readers on other sessions
// must never see a block with two different values (a torn read).
TEST_F(ModuleTest, ReadsNeverSeeAHalfUpdatedBlock) {
  ASSERT_NO_FATAL_FAILURE(add_shard(1, "m.ckpt", {{1, "role=grad;size=2M;opt=sum;block=256K"}}));
  std::atomic<bool> stop{false};
  std::atomic<int> torn{0}, reads{0};
  std::vector<std::thread> threads;
  std::vector<std::byte> ones(2 << 20);
  for (std::size_t i = 0; i < ones.size(); i += 4) store_wire<WireDtype::f32>(ones.data(), i / 4, 1.0f);
  for (int w = 0; w < 2; ++w) {
    threads.emplace_back([&, w] {
      IscsiLun lun;
      if (!lun.connect(tgtd_.url(target_iqn(1), 1), std::string(kInitiator) + "-w" + std::to_string(w)).ok()) return;
      for (int i = 0; i < 60 && !stop; ++i) lun.write(0, ones);
    });
  }
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      IscsiLun lun;
      if (!lun.connect(tgtd_.url(target_iqn(1), 1), std::string(kInitiator) + "-r" + std::to_string(r)).ok()) return;
      std::vector<std::byte> out(2 << 20);
      while (!stop) {
        if (!lun.read(0, out).ok()) continue;
        ++reads;
        for (std::size_t b = 0; b < out.size(); b += 256 * 1024)
          // Element i equals element i+1 for all i: the block holds one value.
          if (std::memcmp(out.data() + b, out.data() + b + 4, 256 * 1024 - 4) != 0) ++torn;
      }
    });
  }
  threads[0].join();
  threads[1].join();
  stop = true;
  for (std::size_t i = 2; i < threads.size(); ++i) threads[i].join();
  EXPECT_EQ(torn.load(), 0) << "reads saw blocks with two different values";
  EXPECT_GT(reads.load(), 0);
  IscsiLun lun;
  ASSERT_NO_FATAL_FAILURE(connect(lun, 1, 1));
  const auto all = read_all(lun);
  EXPECT_EQ(load_wire<WireDtype::f32>(all.data(), 0), 120.0f);  // 2 writers x 60 pushes of 1.0
  EXPECT_EQ(load_wire<WireDtype::f32>(all.data(), all.size() / 4 - 1), 120.0f);
}

}  // namespace
}  // namespace blockps::testing
