// Where a shard's master weights and optimizer state live, and the engine that updates them: the seam between
// ModelShard (ranges, blocks, locks, step counts: the same for every engine) and an engine (CPU arrays, or GPU
// memory with a pinned host mirror). ModelShard holds the block locks around every call below.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "aggregator/cpu_engine.h"
#include "aggregator/optimizer.h"
#include "aggregator/wire_convert.h"
#include "contract/result.h"

namespace blockps {

/// Which engine holds a shard: the CPU, or CUDA device `gpu` (>= 0).
struct Device {
  int gpu = -1;  // -1: the CPU
  static Device cpu() { return {}; }
  static Device cuda(int ordinal) { return {ordinal}; }
  bool is_gpu() const { return gpu >= 0; }
  /// "cpu" or "gpu:N", as the `device` option spells it.
  std::string name() const { return is_gpu() ? "gpu:" + std::to_string(gpu) : "cpu"; }
  bool operator==(const Device&) const = default;
};
/// "cpu" or "gpu:N" (N a decimal number below 1024) back to a Device; nullopt for anything else.
std::optional<Device> parse_device(std::string_view text);

/// A whole push request's gradient: `data` holds consecutive elements in `dtype` (the shard's wire dtype for a
/// WRITE, f32 for an already decoded or averaged gradient).
struct Gradient {
  const void* data;
  WireDtype dtype;
};

/// The part of a push that falls into one block, with that block's step constants.
struct BlockUpdate {
  std::uint64_t element;     // first element of the shard it updates
  std::uint64_t count;       // elements (at most one block's)
  std::uint64_t grad_index;  // its first element in the request's Gradient
  StepConstants constants;
};

class ShardStore {
 public:
  virtual ~ShardStore() = default;
  virtual Device device() const = 0;

  /// True: update() is called once per request with every block of it locked (the engine pipelines them);
  /// false: once per block, for several blocks at once from the CPU engine's threads.
  virtual bool updates_whole_requests() const = 0;
  /// One optimizer step for each update (blocks locked exclusively by the caller). Returns when the new
  /// weights are in host_weights(). Ok or the reason (the engine failed; see status()).
  virtual Status update(OptimizerKind kind, Gradient grad, std::span<const BlockUpdate> updates) = 0;

  /// The f32 weights READs are served from (the master copy on CPU, the pinned mirror on GPU), element 0 first.
  /// Read under the block's lock; written only under its exclusive lock and followed by publish_weights().
  virtual float* host_weights() = 0;
  /// The host weights of [element, element+count) were overwritten: make the engine's master copy equal them.
  virtual Status publish_weights(std::uint64_t element, std::uint64_t count) = 0;

  /// The optimizer state of [element, element+count): spans into the engine's arrays (CPU) or into `scratch`
  /// after a copy from the device (GPU). Unused slots stay empty. Ok or the reason.
  virtual Status read_state(std::uint64_t element, std::uint64_t count, std::vector<float>& scratch,
                            std::span<const float> (&state)[2]) const = 0;
  /// Overwrite the optimizer state of [element, element+count) (spans of `count` for the used slots).
  virtual Status write_state(std::uint64_t element, std::uint64_t count, std::span<const float> s0,
                             std::span<const float> s1) = 0;

  /// Ok while the engine works; else why it stopped (a GPU fault poisons its context: every later call fails
  /// with this reason rather than serving stale or partial state).
  virtual Status status() const = 0;
};

/// The CPU engine's store: 64-byte aligned f32 arrays in host memory, updated by cpu_update(). `elements` may be
/// 0 (a shard with an unusable geometry). Throws std::bad_alloc.
std::unique_ptr<ShardStore> make_cpu_store(std::uint64_t elements, OptimizerKind kind);

/// Whether this build contains the CUDA engine (nvcc was found at build time).
bool cuda_engine_built();
/// Ok when `device` can hold a shard in this process, else why not (invalid_argument), e.g. "device=gpu:1: no
/// such GPU (this host has 1: gpu:0)", "device=gpu:0: no usable CUDA driver (CUDA driver version is
/// insufficient ...)". Device::cpu() is always usable.
Status check_device(Device device);
/// How many CUDA GPUs this process can use (0 without a driver or without the CUDA engine); `why` gets the
/// driver's reason when 0.
int cuda_device_count(std::string* why = nullptr);

/// The CUDA engine's store on GPU `ordinal` for a shard of `elements` with `block_elements` per block (not used
/// since the store stages each request whole: kept so both engines are made from the same shard description).
/// Returns the store or the reason (check_device(), out of device or pinned memory ...).
Result<std::unique_ptr<ShardStore>> make_cuda_store(int ordinal, std::uint64_t elements, std::uint64_t block_elements,
                                                    OptimizerKind kind);

}  // namespace blockps
