// The CPU engine's ShardStore (master weights and state as aligned host arrays, one fused loop per block) and
// the engine-independent device checks.
#include "aggregator/shard_store.h"

#include <algorithm>
#include <cstring>
#include <new>

namespace blockps {
namespace {

// Cache-line aligned so that vector loads start on a line and neighbouring data never shares one.
constexpr std::align_val_t kArrayAlignment{64};

struct FreeAligned {
  void operator()(float* p) const { ::operator delete[](p, kArrayAlignment); }
};
using AlignedFloats = std::unique_ptr<float[], FreeAligned>;

AlignedFloats zeroed_floats(std::uint64_t n) {
  if (n == 0) return nullptr;
  auto* p = static_cast<float*>(::operator new[](n * sizeof(float), kArrayAlignment));
  std::memset(p, 0, n * sizeof(float));
  return AlignedFloats(p);
}

class CpuStore final : public ShardStore {
 public:
  CpuStore(std::uint64_t elements, OptimizerKind kind) : slots_(state_slots(kind)) {
    weights_ = zeroed_floats(elements);
    for (int slot = 0; slot < slots_; ++slot) state_[slot] = zeroed_floats(elements);
  }

  Device device() const override { return Device::cpu(); }
  bool updates_whole_requests() const override { return false; }

  Status update(OptimizerKind kind, Gradient grad, std::span<const BlockUpdate> updates) override {
    const std::size_t size = wire_size(grad.dtype);
    for (const BlockUpdate& u : updates) {
      cpu_update(kind, grad.dtype, u.constants, weights_.get() + u.element,
                 static_cast<const std::byte*>(grad.data) + u.grad_index * size, state_at(0, u.element),
                 state_at(1, u.element), u.count);
    }
    return Status::Ok();
  }

  float* host_weights() override { return weights_.get(); }
  Status publish_weights(std::uint64_t, std::uint64_t) override { return Status::Ok(); }  // host is the master

  Status read_state(std::uint64_t element, std::uint64_t count, std::vector<float>& /*scratch*/,
                    std::span<const float> (&state)[2]) const override {
    for (int slot = 0; slot < 2; ++slot) state[slot] = {};
    for (int slot = 0; slot < slots_; ++slot) state[slot] = {state_at(slot, element), count};
    return Status::Ok();
  }

  Status write_state(std::uint64_t element, std::uint64_t count, std::span<const float> s0,
                     std::span<const float> s1) override {
    const std::span<const float> in[2] = {s0, s1};
    for (int slot = 0; slot < slots_; ++slot)
      std::copy_n(in[slot].begin(), std::min<std::uint64_t>(count, in[slot].size()), state_at(slot, element));
    return Status::Ok();
  }

  Status status() const override { return Status::Ok(); }

 private:
  float* state_at(int slot, std::uint64_t element) const {
    return slot < slots_ ? state_[slot].get() + element : nullptr;
  }

  int slots_;
  AlignedFloats weights_;
  AlignedFloats state_[2];
};

}  // namespace

std::unique_ptr<ShardStore> make_cpu_store(std::uint64_t elements, OptimizerKind kind) {
  return std::make_unique<CpuStore>(elements, kind);
}

std::optional<Device> parse_device(std::string_view text) {
  if (text == "cpu") return Device::cpu();
  constexpr std::string_view kGpu = "gpu:";
  if (!text.starts_with(kGpu) || text.size() == kGpu.size() || text.size() > kGpu.size() + 4) return std::nullopt;
  int ordinal = 0;
  for (char c : text.substr(kGpu.size())) {
    if (c < '0' || c > '9') return std::nullopt;
    ordinal = ordinal * 10 + (c - '0');
  }
  if (ordinal >= 1024) return std::nullopt;
  return Device::cuda(ordinal);
}

Status check_device(Device device) {
  if (!device.is_gpu()) return Status::Ok();
  const auto refuse = [&](const std::string& why) {
    return Status::Error(StatusCode::invalid_argument, "device=" + device.name() + ": " + why);
  };
  if (!cuda_engine_built()) return refuse("this build has no CUDA engine (nvcc was not found when it was built)");
  std::string why;
  const int count = cuda_device_count(&why);
  if (count == 0) return refuse("no usable GPU: " + why);
  if (device.gpu >= count) {
    std::string present;
    for (int i = 0; i < count; ++i) present += (i ? ", " : "") + Device::cuda(i).name();
    return refuse("no such GPU (this host has " + std::to_string(count) + ": " + present + ")");
  }
  return Status::Ok();
}

}  // namespace blockps
