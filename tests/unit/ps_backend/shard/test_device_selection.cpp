// device= at shard creation: cpu as before, gpu:N refused with the reason where that GPU cannot be used, auto
// on the GPU when there is one and on the CPU (logged) otherwise. Each test checks whichever case this host is.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "ps_backend/checkpoint/checkpoint.h"
#include "ps_backend/control/status_page_writer.h"
#include "tests/unit/ps_backend/test_support.h"

namespace blockps {
namespace {

using unit::TempDir;

std::string engine_of(const ServedShard& shard) {
  return nlohmann::json::parse(render_status_page(shard))["shard"]["engine"];
}

TEST(DeviceSelection, CpuIsTheDefaultAndUnchanged) {
  TempDir dir;
  auto shard = unit::make_shard(dir.file("m.ckpt"), "role=grad;size=4K");
  ASSERT_TRUE(shard);
  EXPECT_EQ(shard->model().device(), Device::cpu());
  EXPECT_EQ(engine_of(*shard), "cpu");
  EXPECT_EQ(shard->config().device, "cpu");
}

TEST(DeviceSelection, AGpuThatCannotBeUsedIsRefusedWithTheReason) {
  TempDir dir;
  const int gpus = cuda_device_count();
  // With GPUs, the first absent ordinal; without, gpu:0.
  const std::string device = "gpu:" + std::to_string(gpus);
  auto r = ServedShard::create(dir.file("m.ckpt"), unit::options("role=grad;size=4K;device=" + device));
  ASSERT_TRUE(!r.ok()) << device << " was accepted";
  const std::string why = r.message();
  EXPECT_EQ(why.rfind("device=" + device + ": ", 0), 0u) << why;
  EXPECT_NE(why.find(gpus > 0              ? "no such GPU"
                     : cuda_engine_built() ? "no usable GPU"
                                           : "no CUDA engine"),
            std::string::npos)
      << why;
}

TEST(DeviceSelection, AutoPicksTheGpuWhenThereIsOneElseTheCpu) {
  TempDir dir;
  auto shard = unit::make_shard(dir.file("m.ckpt"), "role=grad;size=4K;device=auto");
  ASSERT_TRUE(shard);
  const Device expected = cuda_device_count() > 0 ? Device::cuda(0) : Device::cpu();
  EXPECT_EQ(shard->model().device(), expected);
  EXPECT_EQ(engine_of(*shard), expected.name());
  EXPECT_EQ(shard->config().device, "auto");  // as given: a checkpoint reopened elsewhere chooses again
}

TEST(DeviceSelection, ACheckpointFromAGpuHostOpensOnTheCpuWhenAskedTo) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "this host has a GPU: the refusal below cannot happen here";
  TempDir dir;
  const std::string path = dir.file("m.ckpt");
  {
    // A checkpoint whose options say device=gpu:0, as one written on a GPU host would.
    auto shard = unit::make_shard(path, "role=grad;size=4K;opt=momentum");
    ASSERT_TRUE(shard);
    ShardConfig c = shard->config();
    c.device = "gpu:0";
    ASSERT_EQ(error_text(write_checkpoint(path, shard->model(), c)), "");
  }
  auto refused = ServedShard::create(path, unit::options("role=grad"));
  ASSERT_TRUE(!refused.ok());
  EXPECT_NE(refused.message().find("is the checkpoint's; give device=cpu or device=auto"), std::string::npos)
      << refused.message();
  auto opened = unit::make_shard(path, "role=grad;device=cpu");
  ASSERT_TRUE(opened);
  EXPECT_EQ(opened->model().device(), Device::cpu());
}

}  // namespace
}  // namespace blockps
