// aggregator/shard_store.cpp: the device names (`device=cpu`, `gpu:N`), the refusal of a GPU a build or a host
// cannot give, and the CPU store: zeroed, aligned weights and state, one optimizer step per block update at the
// right elements of the weights and of the request's gradient, the state slots each optimizer keeps. In a build
// without nvcc the GPU entry points are aggregator/cuda_store_stub.cpp's, checked here too.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <vector>

#include "aggregator/shard_store.h"

namespace blockps {
namespace {

TEST(ParseDevice, CpuAndGpuOrdinalsBelow1024) {
  EXPECT_EQ(parse_device("cpu"), Device::cpu());
  EXPECT_EQ(parse_device("gpu:0"), Device::cuda(0));
  EXPECT_EQ(parse_device("gpu:7"), Device::cuda(7));
  EXPECT_EQ(parse_device("gpu:1023"), Device::cuda(1023));
  EXPECT_EQ(parse_device("gpu:007"), Device::cuda(7));  // decimal digits, leading zeros too
}

TEST(ParseDevice, RefusesAnythingElse) {
  for (const char* text : {"", "CPU", "cpu ", " cpu", "gpu", "gpu:", "gpu:1024", "gpu:99999", "gpu:-1", "gpu:1x",
                           "gpu: 1", "GPU:0", "gpu0", "cuda:0", "auto"})
    EXPECT_EQ(parse_device(text), std::nullopt) << "'" << text << "'";
}

TEST(Device, NamesAsTheOptionSpellsThem) {
  EXPECT_EQ(Device::cpu().name(), "cpu");
  EXPECT_FALSE(Device::cpu().is_gpu());
  EXPECT_EQ(Device::cuda(3).name(), "gpu:3");
  EXPECT_TRUE(Device::cuda(0).is_gpu());
  for (const Device d : {Device::cpu(), Device::cuda(0), Device::cuda(12)}) EXPECT_EQ(parse_device(d.name()), d);
}

TEST(CheckDevice, TheCpuIsAlwaysUsable) { EXPECT_TRUE(check_device(Device::cpu()).ok()); }

TEST(CheckDevice, AGpuOfABuildWithoutCudaIsRefusedWithTheReason) {
  if (cuda_engine_built()) GTEST_SKIP() << "this build has the CUDA engine (aggregator/cuda_store.cu)";
  const Status s = check_device(Device::cuda(1));
  EXPECT_EQ(s.code(), StatusCode::invalid_argument);
  EXPECT_EQ(s.message(), "device=gpu:1: this build has no CUDA engine (nvcc was not found when it was built)");

  std::string why = "unchanged";
  EXPECT_EQ(cuda_device_count(&why), 0);
  EXPECT_EQ(why, "this build has no CUDA engine");
  EXPECT_EQ(cuda_device_count(), 0);  // no reason asked for

  auto store = make_cuda_store(0, 1024, 256, OptimizerKind::sgd);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), StatusCode::invalid_argument);
  EXPECT_EQ(store.message(), "device=gpu:0: this build has no CUDA engine (nvcc was not found when it was built)");
}

TEST(CpuStore, StartsAtZeroOnTheCpuWithAlignedWeights) {
  auto store = make_cpu_store(1000, OptimizerKind::adam);
  EXPECT_EQ(store->device(), Device::cpu());
  EXPECT_FALSE(store->updates_whole_requests());  // the CPU engine's threads update blocks apart
  EXPECT_TRUE(store->status().ok());
  const float* w = store->host_weights();
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(w) % 64, 0u);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(w[i], 0.0f) << i;

  std::vector<float> scratch;
  std::span<const float> state[2];
  ASSERT_TRUE(store->read_state(0, 1000, scratch, state).ok());
  for (const auto& slot : state) {
    ASSERT_EQ(slot.size(), 1000u);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(slot.data()) % 64, 0u);
    for (float v : slot) ASSERT_EQ(v, 0.0f);
  }
  EXPECT_TRUE(scratch.empty());  // the CPU store's state is its own arrays, no copy
}

TEST(CpuStore, OfNoElementsHasNoWeights) {
  auto store = make_cpu_store(0, OptimizerKind::momentum);
  EXPECT_EQ(store->host_weights(), nullptr);
  EXPECT_TRUE(store->update(OptimizerKind::momentum, {nullptr, WireDtype::f32}, {}).ok());
}

TEST(CpuStore, KeepsTheStateSlotsOfItsOptimizer) {
  struct Case {
    OptimizerKind kind;
    int slots;
  };
  for (const Case c : {Case{OptimizerKind::sgd, 0}, Case{OptimizerKind::sum, 0}, Case{OptimizerKind::average, 0},
                       Case{OptimizerKind::momentum, 1}, Case{OptimizerKind::adam, 2}, Case{OptimizerKind::adamw, 2}}) {
    auto store = make_cpu_store(64, c.kind);
    std::vector<float> scratch;
    const float sentinel[1] = {1};
    std::span<const float> state[2] = {sentinel, sentinel};  // read_state empties the slots it does not use
    ASSERT_TRUE(store->read_state(8, 16, scratch, state).ok());
    for (int slot = 0; slot < 2; ++slot)
      EXPECT_EQ(state[slot].size(), slot < c.slots ? 16u : 0u) << to_string(c.kind) << " slot " << slot;
  }
}

TEST(CpuStore, WriteStateLandsAtTheElementAndCopiesWhatItIsGiven) {
  auto store = make_cpu_store(32, OptimizerKind::adam);
  const std::vector<float> m = {1, 2, 3, 4}, v = {5, 6};  // v shorter than count: only its 2 values are copied
  ASSERT_TRUE(store->write_state(10, 4, m, v).ok());
  std::vector<float> scratch;
  std::span<const float> state[2];
  ASSERT_TRUE(store->read_state(9, 6, scratch, state).ok());
  EXPECT_EQ(std::vector<float>(state[0].begin(), state[0].end()), (std::vector<float>{0, 1, 2, 3, 4, 0}));
  EXPECT_EQ(std::vector<float>(state[1].begin(), state[1].end()), (std::vector<float>{0, 5, 6, 0, 0, 0}));

  // A count shorter than the spans copies count values.
  ASSERT_TRUE(store->write_state(0, 1, m, v).ok());
  ASSERT_TRUE(store->read_state(0, 2, scratch, state).ok());
  EXPECT_EQ(state[0][0], 1.0f);
  EXPECT_EQ(state[0][1], 0.0f);
  EXPECT_EQ(state[1][0], 5.0f);
  EXPECT_EQ(state[1][1], 0.0f);
}

TEST(CpuStore, UpdatesEachBlockFromItsOwnPartOfTheGradient) {
  auto store = make_cpu_store(8, OptimizerKind::sum);
  const std::vector<float> grad = {10, 20, 30, 40, 50};
  const StepConstants k = step_constants(OptimizerParams{.kind = OptimizerKind::sum}, 1);
  // Elements 4..5 from the gradient's elements 1..2, element 0 from its element 4.
  const BlockUpdate updates[] = {{4, 2, 1, k}, {0, 1, 4, k}};
  ASSERT_TRUE(store->update(OptimizerKind::sum, {grad.data(), WireDtype::f32}, updates).ok());
  const float* w = store->host_weights();
  EXPECT_EQ(std::vector<float>(w, w + 8), (std::vector<float>{50, 0, 0, 0, 20, 30, 0, 0}));

  ASSERT_TRUE(store->update(OptimizerKind::sum, {grad.data(), WireDtype::f32}, updates).ok());
  EXPECT_EQ(std::vector<float>(w, w + 8), (std::vector<float>{100, 0, 0, 0, 40, 60, 0, 0}));
}

TEST(CpuStore, ReadsAGradientOfTwoByteElementsAtTwoBytesAnElement) {
  auto store = make_cpu_store(4, OptimizerKind::sum);
  // bf16: the upper half of the f32 bits. 1, 2, 3, 4.
  const std::uint16_t grad[] = {0x3f80, 0x4000, 0x4040, 0x4080};
  const StepConstants k = step_constants(OptimizerParams{.kind = OptimizerKind::sum}, 1);
  const BlockUpdate updates[] = {{1, 2, 2, k}};
  ASSERT_TRUE(store->update(OptimizerKind::sum, {grad, WireDtype::bf16}, updates).ok());
  const float* w = store->host_weights();
  EXPECT_EQ(std::vector<float>(w, w + 4), (std::vector<float>{0, 3, 4, 0}));
}

TEST(CpuStore, AStepOfMomentumMovesWeightsAndKeepsTheVelocity) {
  auto store = make_cpu_store(4, OptimizerKind::momentum);
  const OptimizerParams p{.kind = OptimizerKind::momentum, .lr = 0.5f, .momentum = 0.9f};
  const std::vector<float> grad = {2, 4};
  const BlockUpdate updates[] = {{2, 2, 0, step_constants(p, 1)}};
  ASSERT_TRUE(store->update(OptimizerKind::momentum, {grad.data(), WireDtype::f32}, updates).ok());
  const float* w = store->host_weights();
  EXPECT_EQ(std::vector<float>(w, w + 4), (std::vector<float>{0, 0, -1, -2}));  // w -= lr * (0.9*0 + g)
  std::vector<float> scratch;
  std::span<const float> state[2];
  ASSERT_TRUE(store->read_state(0, 4, scratch, state).ok());
  EXPECT_EQ(std::vector<float>(state[0].begin(), state[0].end()), (std::vector<float>{0, 0, 2, 4}));
}

TEST(CpuStore, TheHostWeightsAreTheMasterCopy) {
  auto store = make_cpu_store(4, OptimizerKind::sum);
  store->host_weights()[3] = 7;
  EXPECT_TRUE(store->publish_weights(3, 1).ok());
  const std::vector<float> grad = {1};
  const BlockUpdate updates[] = {{3, 1, 0, step_constants(OptimizerParams{.kind = OptimizerKind::sum}, 1)}};
  ASSERT_TRUE(store->update(OptimizerKind::sum, {grad.data(), WireDtype::f32}, updates).ok());
  EXPECT_EQ(store->host_weights()[3], 8.0f);
}

}  // namespace
}  // namespace blockps
