// device= in a real tgtd: cpu serves as before; gpu:N is refused at `tgtadm --op new` with the reason in the
// tgtd log when that GPU cannot be used (no driver, no such GPU, a build without CUDA) and leaves no LU behind;
// auto serves on gpu:0 when it can and on the CPU otherwise, and says which in the log and on the status page.
// On a GPU host the same tests check the GPU side (gpu:0 serves, the first absent ordinal is refused).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <vector>

#include "aggregator/shard_store.h"
#include "client/transport/iscsi_lun.h"
#include "tests/support/blockps_shard.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tgtd_instance.h"

namespace blockps::testing {
namespace {

constexpr const char* kInitiator = "iqn.2026-11.io.blockps:device-test";
constexpr const char* kIqn = "iqn.2026-11.io.blockps:device";

class DeviceInTgtd : public ::testing::Test {
 protected:
  void SetUp() override {
    BLOCKPS_REQUIRE_TGTD_AND_MODULE();
    ASSERT_TRUE(dir_.create("blockps-device-").ok());
    ASSERT_TRUE(tgtd_.start().ok());
    const CommandResult t = tgtd_.add_target(1, kIqn);
    ASSERT_TRUE(t.ok()) << t.describe();
  }
  void TearDown() override {
    if (HasFailure() && tgtd_.running()) std::cerr << "---- tgtd log ----\n" << tgtd_.log_text() << "\n";
  }

  // A grad LU (1) and a status LU (3) with `device`; pushes +1 twice (opt=sum) and checks the weights are 2,
  // then returns the status page's engine.
  std::string serve_and_push(const std::string& device) {
    const std::string ckpt = dir_.path("m.ckpt");
    CommandResult r = tgtd_.add_lu(1, 1, ckpt, "blockps", "role=grad;size=1M;opt=sum;device=" + device);
    EXPECT_TRUE(r.ok()) << r.describe();
    r = tgtd_.add_lu(1, 3, ckpt, "blockps", "role=status;device=" + device);
    EXPECT_TRUE(r.ok()) << r.describe();
    IscsiLun grad, status;
    EXPECT_TRUE(grad.connect(tgtd_.url(kIqn, 1), kInitiator).ok());
    EXPECT_TRUE(status.connect(tgtd_.url(kIqn, 3), kInitiator).ok());
    const std::vector<float> ones(256 * 1024, 1.0f);
    const auto bytes = std::as_bytes(std::span(ones));
    for (int i = 0; i < 2; ++i) EXPECT_TRUE(grad.write(0, {bytes.begin(), bytes.end()}).ok());
    std::vector<float> w(ones.size());
    EXPECT_TRUE(grad.read(0, std::as_writable_bytes(std::span(w))).ok());
    EXPECT_EQ(w, std::vector<float>(ones.size(), 2.0f));
    std::vector<std::byte> page(64 * 1024);
    EXPECT_TRUE(status.read(0, page).ok());
    const auto j = nlohmann::json::parse(reinterpret_cast<const char*>(page.data()), nullptr, false);
    if (j.is_discarded()) return "(no status page)";
    EXPECT_EQ(j["shard"]["device"], device);
    return j["shard"]["engine"];
  }

  TempDir dir_;
  TgtdInstance tgtd_;
};

TEST_F(DeviceInTgtd, CpuServesAsBefore) { EXPECT_EQ(serve_and_push("cpu"), "cpu"); }

TEST_F(DeviceInTgtd, AGpuThatCannotBeUsedIsRefusedAtLuCreationWithTheReasonInTheLog) {
  // This test process asks the same driver tgtd does: with GPUs, the first ordinal beyond them; else gpu:0.
  const int gpus = cuda_device_count();
  const std::string device = "gpu:" + std::to_string(gpus);
  const CommandResult r = tgtd_.add_lu(1, 1, dir_.path("m.ckpt"), "blockps", "role=grad;size=1M;device=" + device);
  EXPECT_FALSE(r.ok()) << device << " was accepted";
  EXPECT_FALSE(tgtd_.has_lu(1, 1)) << "a refused LU was left behind";
  const std::string log = tgtd_.log_text();
  const std::string reason = "device=" + device + ": " +
                             (gpus > 0              ? "no such GPU"
                              : cuda_engine_built() ? "no usable GPU"
                                                    : "this build has no CUDA engine");
  EXPECT_NE(log.find(reason), std::string::npos) << "tgtd log lacks: " << reason;
  // The refusal made nothing: the same path then serves on the CPU.
  EXPECT_EQ(serve_and_push("cpu"), "cpu");
}

TEST_F(DeviceInTgtd, AutoUsesTheGpuWhenThereIsOneElseTheCpuAndLogsIt) {
  const bool gpu = cuda_device_count() > 0;
  EXPECT_EQ(serve_and_push("auto"), gpu ? "gpu:0" : "cpu");
  const std::string said = gpu ? "device=auto: aggregating on gpu:0" : "device=auto: no usable GPU (";
  EXPECT_NE(tgtd_.log_text().find(said), std::string::npos) << "tgtd log lacks: " << said;
}

TEST_F(DeviceInTgtd, Gpu0ServesOnAGpuHost) {
  if (const std::string why = check_device(Device::cuda(0)).message(); !why.empty())
    GTEST_SKIP() << "SKIPPED, the CUDA engine is NOT tested in tgtd on this machine: " << why;
  EXPECT_EQ(serve_and_push("gpu:0"), "gpu:0");
}

}  // namespace
}  // namespace blockps::testing
