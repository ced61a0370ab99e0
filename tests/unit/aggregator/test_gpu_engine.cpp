// The CUDA engine against the CPU engine: the same pushes on both give bit-identical weights, state and steps
// for every optimizer and dtype (both engines run ElementUpdate<K> without FMA contraction and with IEEE
// division and sqrt, so nothing is left to tolerance). Where no GPU can be used these tests SKIP and say so;
// the refusal tests at the end run everywhere.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <iostream>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "aggregator/model_shard.h"
#if BLOCKPS_HAVE_CUDA
#include "aggregator/cuda_store.h"
#endif
#include "shard_snapshot.h"
#include "tests/support/status_text.h"

namespace blockps {
namespace {

// A shard on GPU 0 (these tests run only where check_device(Device::cuda(0)) passed); ModelShard::create's refusal
// fails the test that asked (gtest reports the exception).
std::unique_ptr<ModelShard> on_gpu(const ShardGeometry& g, const OptimizerParams& p, std::shared_ptr<CpuEngine> engine,
                                   const ModelShard::StoreWrapper& wrap = {}) {
  auto made = ModelShard::create(g, p, std::move(engine), Device::cuda(0), wrap);
  if (!made.ok()) throw std::runtime_error("ModelShard::create on cuda:0: " + made.message());
  return std::move(made).value();
}

/// "" when GPU 0 can run the engine, else the loud reason the GPU tests skip.
std::string gpu_unavailable() {
  const std::string why = error_text(check_device(Device::cuda(0)));
  if (!why.empty()) {
    std::cerr << "\n*** SKIPPED: the CUDA engine is NOT tested on this machine: " << why << " ***\n\n";
  }
  return why;
}

#define BLOCKPS_REQUIRE_GPU()                                              \
  do {                                                                     \
    if (const std::string why = gpu_unavailable(); !why.empty())           \
      GTEST_SKIP() << "no usable GPU, CUDA engine untested here: " << why; \
  } while (0)

using test::Snapshot;
using test::snapshot;

/// Bitwise equality (NaNs with equal payloads compare equal; -0 and +0 do not).
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::size_t first_difference(const std::vector<float>& a, const std::vector<float>& b) {
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) return i;
  return std::min(a.size(), b.size());
}

void expect_same(const ModelShard& cpu, const ModelShard& gpu, const std::string& when) {
  const Snapshot c = snapshot(cpu);
  const Snapshot g = snapshot(gpu);
  EXPECT_EQ(c.steps, g.steps) << when;
  EXPECT_TRUE(same_bits(c.w, g.w)) << when << ": weights differ first at element " << first_difference(c.w, g.w);
  EXPECT_TRUE(same_bits(c.s0, g.s0)) << when << ": state 0 differs first at element " << first_difference(c.s0, g.s0);
  EXPECT_TRUE(same_bits(c.s1, g.s1)) << when << ": state 1 differs first at element " << first_difference(c.s1, g.s1);
  // READs come from the GPU engine's host mirror: they must agree with the device state just compared.
  std::vector<std::byte> rc(cpu.geometry().bytes), rg(gpu.geometry().bytes);
  cpu.read_weights(0, rc);
  gpu.read_weights(0, rg);
  EXPECT_TRUE(rc == rg) << when << ": READ bytes differ";
}

std::vector<std::byte> random_wire(std::mt19937& rng, WireDtype d, std::size_t n, float scale) {
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> values(n);
  for (float& v : values) v = dist(rng);
  std::vector<std::byte> out(n * wire_size(d));
  encode_wire(d, values.data(), out.data(), n);
  return out;
}

struct Case {
  OptimizerKind kind;
  WireDtype dtype;
  bool nesterov;
};

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (OptimizerKind k : kAllOptimizerKinds)
    for (WireDtype d : {WireDtype::f32, WireDtype::bf16, WireDtype::f16}) {
      cases.push_back({k, d, false});
      if (k == OptimizerKind::momentum) cases.push_back({k, d, true});
    }
  return cases;
}

std::string case_name(const testing::TestParamInfo<Case>& info) {
  return std::string(to_string(info.param.kind)) + (info.param.nesterov ? "_nesterov_" : "_") +
         std::string(to_string(info.param.dtype));
}

class GpuMatchesCpu : public testing::TestWithParam<Case> {};

TEST_P(GpuMatchesCpu, BitForBitOverPushesOfEveryShape) {
  BLOCKPS_REQUIRE_GPU();
  const Case c = GetParam();
  // 1 KiB blocks and 40.5 of them: requests of more than kMaxLaunchBlocks (32) blocks, several chunks, and a
  // short last block.
  const std::size_t esize = wire_size(c.dtype);
  const ShardGeometry g{.bytes = 40 * 1024 + 512, .dtype = c.dtype, .block_bytes = 1024};
  OptimizerParams p{.kind = c.kind, .lr = 0.05f, .weight_decay = 0.01f, .nesterov = c.nesterov};
  ModelShard cpu(g, p, std::make_shared<CpuEngine>(2));
  const std::unique_ptr<ModelShard> gpu_made = on_gpu(g, p, std::make_shared<CpuEngine>(2));
  ModelShard& gpu = *gpu_made;
  ASSERT_EQ(gpu.device(), Device::cuda(0));

  std::mt19937 rng(7);
  std::normal_distribution<float> init(0.0f, 0.5f);
  std::vector<float> w0(g.elements());
  for (float& v : w0) v = init(rng);
  ASSERT_EQ(error_text(cpu.fill_weights([&](std::uint64_t e) { return w0[e]; })), "");
  ASSERT_EQ(error_text(gpu.fill_weights([&](std::uint64_t e) { return w0[e]; })), "");
  expect_same(cpu, gpu, "after fill_weights");

  const std::uint64_t elements = g.elements();
  std::uniform_int_distribution<std::uint64_t> any_element(0, elements - 1);
  for (int round = 0; round < 12; ++round) {
    // Whole shard, then random element-aligned ranges (partial blocks at both ends).
    std::uint64_t first = 0, count = elements;
    if (round % 3 != 0) {
      first = any_element(rng);
      count = 1 + any_element(rng) % (elements - first);
    }
    const auto grad = random_wire(rng, c.dtype, count, 1.0f);
    ASSERT_EQ(error_text(cpu.push_gradient(first * esize, grad)), "");
    ASSERT_EQ(error_text(gpu.push_gradient(first * esize, grad)), "") << gpu.engine_status().message();
    expect_same(cpu, gpu, "after push " + std::to_string(round));
  }
  // The f32 input path (sync mode's averaged gradient) on a wire dtype that may be narrower.
  std::vector<float> avg(elements / 2);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  for (float& v : avg) v = unit(rng);
  ASSERT_EQ(error_text(cpu.apply_gradient_f32(3 * esize, avg)), "");
  ASSERT_EQ(error_text(gpu.apply_gradient_f32(3 * esize, avg)), "");
  expect_same(cpu, gpu, "after apply_gradient_f32");
  // assign_weights goes to the device too: the next push starts from it on both engines.
  const auto assigned = random_wire(rng, c.dtype, 700, 2.0f);
  ASSERT_EQ(error_text(cpu.assign_weights(100 * esize, assigned)), "");
  ASSERT_EQ(error_text(gpu.assign_weights(100 * esize, assigned)), "");
  const auto grad = random_wire(rng, c.dtype, elements, 1.0f);
  ASSERT_EQ(error_text(cpu.push_gradient(0, grad)), "");
  ASSERT_EQ(error_text(gpu.push_gradient(0, grad)), "");
  expect_same(cpu, gpu, "after assign_weights and a push");
}

INSTANTIATE_TEST_SUITE_P(AllOptimizersAndDtypes, GpuMatchesCpu, testing::ValuesIn(all_cases()), case_name);

/// The same random pushes on a CPU shard and a GPU shard (its store from `wrap`, when given) of `g`: the whole
/// shard first, then random element-aligned ranges, then an f32 gradient; bit for bit after each.
void expect_engines_agree(const ShardGeometry& g, const OptimizerParams& p, int pushes, unsigned seed,
                          const ModelShard::StoreWrapper& wrap = {}) {
  const std::size_t esize = wire_size(g.dtype);
  ModelShard cpu(g, p, std::make_shared<CpuEngine>(2));
  const std::unique_ptr<ModelShard> gpu_made = on_gpu(g, p, std::make_shared<CpuEngine>(2), wrap);
  ModelShard& gpu = *gpu_made;
  std::mt19937 rng(seed);
  std::normal_distribution<float> init(0.0f, 0.5f);
  std::vector<float> w0(g.elements());
  for (float& v : w0) v = init(rng);
  ASSERT_EQ(error_text(cpu.fill_weights([&](std::uint64_t e) { return w0[e]; })), "");
  ASSERT_EQ(error_text(gpu.fill_weights([&](std::uint64_t e) { return w0[e]; })), "");
  const std::uint64_t elements = g.elements();
  std::uniform_int_distribution<std::uint64_t> any_element(0, elements - 1);
  for (int round = 0; round < pushes; ++round) {
    std::uint64_t first = 0, count = elements;
    if (round > 0) {
      first = any_element(rng);
      count = 1 + any_element(rng) % (elements - first);
    }
    const auto grad = random_wire(rng, g.dtype, count, 1.0f);
    ASSERT_EQ(error_text(cpu.push_gradient(first * esize, grad)), "");
    ASSERT_EQ(error_text(gpu.push_gradient(first * esize, grad)), "") << gpu.engine_status().message();
    expect_same(
        cpu, gpu,
        "after push " + std::to_string(round) + " of [" + std::to_string(first) + ", +" + std::to_string(count) + ")");
  }
  std::vector<float> f32(elements - 5);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  for (float& v : f32) v = unit(rng);
  ASSERT_EQ(error_text(cpu.apply_gradient_f32(5 * esize, f32)), "");
  ASSERT_EQ(error_text(gpu.apply_gradient_f32(5 * esize, f32)), "");
  expect_same(cpu, gpu, "after apply_gradient_f32");
}

// Requests of megabytes: many chunks of the default shape, blocks of 256 KiB split between chunks, the grid-stride
// loop over more elements than one pass of the grid covers, a short last block.
TEST(GpuEngine, LargeRequestsMatchCpuAcrossChunks) {
  BLOCKPS_REQUIRE_GPU();
  for (const Case c :
       {Case{OptimizerKind::adam, WireDtype::f32, false}, Case{OptimizerKind::sgd, WireDtype::bf16, false},
        Case{OptimizerKind::momentum, WireDtype::f16, true}}) {
    SCOPED_TRACE(std::string(to_string(c.kind)) + " " + std::string(to_string(c.dtype)));
    const std::size_t esize = wire_size(c.dtype);
    const ShardGeometry g{.bytes = (9ull << 20) + 13 * esize, .dtype = c.dtype, .block_bytes = 256u << 10};
    const OptimizerParams p{.kind = c.kind, .lr = 0.01f, .weight_decay = 0.01f, .nesterov = c.nesterov};
    ASSERT_NO_FATAL_FAILURE(expect_engines_agree(g, p, 5, 11));
  }
}

#if BLOCKPS_HAVE_CUDA
// Every pipeline shape a benchmark may compare gives the same bits: chunks of any size (ending inside blocks, at
// every element phase), uploads from pinned or pageable memory, the last copy-back on either stream, capped grids.
TEST(GpuEngine, EveryPipelineShapeMatchesCpu) {
  BLOCKPS_REQUIRE_GPU();
  const CudaStoreShape shapes[] = {
      {.chunk_bytes = 1000},
      {.chunk_bytes = 1000, .last_copy_back_in_order = true},
      {.chunk_bytes = 16, .ctas_per_multiprocessor = 0},
      {.chunk_bytes = 1000, .stage_in_pinned = false},
      {.stage_in_pinned = false, .last_copy_back_in_order = true},
      {.chunk_bytes = 6u << 10, .ctas_per_multiprocessor = 1},
  };
  for (const CudaStoreShape& shape : shapes) {
    for (const Case c :
         {Case{OptimizerKind::adamw, WireDtype::bf16, false}, Case{OptimizerKind::momentum, WireDtype::f32, false},
          Case{OptimizerKind::average, WireDtype::f16, false}}) {
      SCOPED_TRACE("chunk " + std::to_string(shape.chunk_bytes) + (shape.stage_in_pinned ? "" : ", pageable") +
                   (shape.last_copy_back_in_order ? ", in order" : "") + ", ctas " +
                   std::to_string(shape.ctas_per_multiprocessor) + ", " + std::string(to_string(c.kind)) + " " +
                   std::string(to_string(c.dtype)));
      const ShardGeometry g{.bytes = 40 * 1024 + 512, .dtype = c.dtype, .block_bytes = 1024};
      const OptimizerParams p{.kind = c.kind, .lr = 0.05f, .weight_decay = 0.01f};
      ASSERT_NO_FATAL_FAILURE(expect_engines_agree(g, p, 4, 5, [&](std::unique_ptr<ShardStore>) {
        Result<std::unique_ptr<ShardStore>> shaped = make_cuda_store(0, g.elements(), c.kind, shape);
        if (!shaped.ok()) throw std::runtime_error(shaped.message());
        return std::move(shaped).value();
      }));
    }
  }
  // A chunk too small to hold a vector is refused with the reason.
  const std::string refused =
      error_text(make_cuda_store(0, 1024, OptimizerKind::sgd, CudaStoreShape{.chunk_bytes = 8}).status());
  EXPECT_NE(refused.find("chunk_bytes 8"), std::string::npos) << refused;
}
#endif

TEST(GpuEngine, CheckpointStateMovesBetweenEngines) {
  BLOCKPS_REQUIRE_GPU();
  const ShardGeometry g{.bytes = 9 * 4096 + 1024, .dtype = WireDtype::bf16, .block_bytes = 4096};
  const OptimizerParams p{.kind = OptimizerKind::adamw, .lr = 0.01f, .weight_decay = 0.1f};
  ModelShard cpu(g, p, nullptr);
  std::mt19937 rng(3);
  for (int i = 0; i < 3; ++i)
    ASSERT_EQ(error_text(cpu.push_gradient(0, random_wire(rng, g.dtype, g.elements(), 1.0f))), "");
  // CPU -> GPU (a checkpoint loaded on a GPU host) -> GPU -> CPU, continuing identically.
  const std::unique_ptr<ModelShard> gpu_made = on_gpu(g, p, nullptr);
  ModelShard& gpu = *gpu_made;
  cpu.for_each_block([&](const BlockView& v) {
    ASSERT_TRUE(gpu.restore_block(v.index, v.step, v.weights, v.state[0], v.state[1])) << gpu.engine_status().message();
  });
  expect_same(cpu, gpu, "after restore into the GPU");
  const auto grad = random_wire(rng, g.dtype, g.elements(), 1.0f);
  ASSERT_EQ(error_text(cpu.push_gradient(0, grad)), "");
  ASSERT_EQ(error_text(gpu.push_gradient(0, grad)), "");
  expect_same(cpu, gpu, "after a push on both");
  ModelShard back(g, p, nullptr);
  gpu.for_each_block(
      [&](const BlockView& v) { ASSERT_TRUE(back.restore_block(v.index, v.step, v.weights, v.state[0], v.state[1])); });
  expect_same(back, gpu, "after restore from the GPU");
}

TEST(GpuEngine, ConcurrentPushesAllLandAndReadsNeverSeeATornBlock) {
  BLOCKPS_REQUIRE_GPU();
  // opt=sum of +1 gradients: every push adds exactly 1 to every element it covers, so the final weights count
  // the pushes, and a block read while a push is being copied back would hold two different values.
  const ShardGeometry g{.bytes = 64 * 4096, .dtype = WireDtype::f32, .block_bytes = 4096};
  const std::unique_ptr<ModelShard> gpu_made =
      on_gpu(g, OptimizerParams{.kind = OptimizerKind::sum}, std::make_shared<CpuEngine>(2));
  ModelShard& gpu = *gpu_made;
  const std::vector<float> ones(g.elements(), 1.0f);
  constexpr int kWriters = 6, kPushes = 50;
  std::atomic<bool> done{false};
  std::atomic<int> torn{0};
  std::thread reader([&] {
    std::vector<float> block(g.block_elements());
    while (!done.load()) {
      for (std::uint64_t b = 0; b < g.blocks(); ++b) {
        gpu.read_weights(b * g.block_bytes, std::as_writable_bytes(std::span(block)));
        for (float v : block) torn += v != block[0];
      }
    }
  });
  std::vector<std::thread> writers;
  for (int t = 0; t < kWriters; ++t)
    writers.emplace_back([&] {
      for (int i = 0; i < kPushes; ++i) EXPECT_EQ(error_text(gpu.push_gradient(0, std::as_bytes(std::span(ones)))), "");
    });
  for (auto& t : writers) t.join();
  done = true;
  reader.join();
  EXPECT_EQ(torn.load(), 0);
  std::vector<float> w(g.elements());
  gpu.read_weights(0, std::as_writable_bytes(std::span(w)));
  for (float v : w) ASSERT_EQ(v, float{kWriters * kPushes});
}

// These run everywhere: without a usable GPU, asking for one is refused with the reason, and nothing aborts.
TEST(GpuEngineSelection, AnAbsentGpuIsRefusedWithTheReason) {
  const std::string why = error_text(check_device(Device::cuda(0)));
  const int count = cuda_device_count();
  if (count > 0) {
    EXPECT_EQ(why, "");
    const std::string beyond = error_text(check_device(Device::cuda(count)));
    EXPECT_NE(beyond.find("no such GPU"), std::string::npos) << beyond;
    return;
  }
  ASSERT_NE(why, "");
  EXPECT_EQ(why.rfind("device=gpu:0: ", 0), 0u) << why;
  if (cuda_engine_built()) {
    EXPECT_NE(why.find("no usable GPU"), std::string::npos) << why;
  } else {
    EXPECT_NE(why.find("no CUDA engine"), std::string::npos) << why;
  }
  // A shard asked to live on the absent GPU: refused with the same reason, not an exception or an abort.
  const ShardGeometry g{.bytes = 4096, .dtype = WireDtype::f32, .block_bytes = 1024};
  const Result<std::unique_ptr<ModelShard>> made = ModelShard::create(g, OptimizerParams{}, nullptr, Device::cuda(0));
  ASSERT_FALSE(made.ok()) << "a shard was made on an absent GPU";
  EXPECT_EQ(made.message(), why);
}

TEST(GpuEngineSelection, DeviceNamesParseBack) {
  EXPECT_EQ(parse_device("cpu"), Device::cpu());
  EXPECT_EQ(parse_device("gpu:0"), Device::cuda(0));
  EXPECT_EQ(parse_device("gpu:12"), Device::cuda(12));
  EXPECT_EQ(parse_device(Device::cuda(7).name()), Device::cuda(7));
  for (const char* bad : {"", "gpu", "gpu:", "gpu:-1", "gpu:x", "gpu:1024", "gpu:00001", "GPU:0", "auto", "cuda:0"})
    EXPECT_FALSE(parse_device(bad).has_value()) << bad;
  EXPECT_EQ(error_text(check_device(Device::cpu())), "");
}

}  // namespace
}  // namespace blockps
