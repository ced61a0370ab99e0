// The CUDA engine's ShardStore (docs/ARCHITECTURE.md, "Parts"): master weights and
// optimizer state in GPU memory, a pinned host mirror of the weights that READs are served from.
//
// A push runs on a lane (a compute stream, a copy-back stream and two pinned staging slots); concurrent pushes
// take different lanes, so several requests are in flight on several streams. A request is cut into chunks of
// up to CudaStoreShape::chunk_bytes of gradient (cuda::pack_chunk; a chunk may end inside a block). Per chunk:
// gradient -> pinned staging slot -> device (compute stream) -> one fused kernel -> an event -> the copy-back
// stream copies the updated weights into the mirror (the last chunk's may be in order on the compute stream).
// Chunks alternate between the two slots, so staging chunk c+1 on the host overlaps the transfers and kernel of
// chunk c. The push returns once both streams are done: the mirror holds the new weights before ModelShard
// releases the block locks, so a READ (which takes the block's shared lock) never sees a half-copied block.
// (A kernel that reads the pinned gradient and writes the pinned mirror itself, with no copy calls, was measured
// slower on an H200: bench/RESULTS.md, "CUDA engine (issue 41)".)
#include <cuda_runtime.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <optional>
#include <vector>

#include "aggregator/cuda_kernels.cuh"
#include "aggregator/cuda_store.h"
#include "aggregator/shard_store.h"

// nvcc's front end reports `status = f()` as ignoring a [[nodiscard]] Status (the Status& that operator= returns);
// the host compiler does not, and every Status made here is checked.
#pragma nv_diag_suppress 2810

namespace blockps {
namespace {

std::string cuda_text(cudaError_t e) { return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e); }

constexpr int kLanes = 4;  // concurrent pushes (tgt's io_threads default is 4)
// A chunk's gradient starts at element chunk.grad_offset (< cuda::kVector) of its staging and device buffers.
constexpr std::uint64_t kGradSlack = cuda::kVector * sizeof(float);

class CudaStore final : public ShardStore {
 public:
  CudaStore(int ordinal, std::uint64_t elements, OptimizerKind kind, const CudaStoreShape& shape)
      : ordinal_(ordinal), elements_(elements), slots_(state_slots(kind)), shape_(shape) {}

  // Allocates everything; ok or the reason (the destructor frees whatever was made).
  Status init() {
    if (cudaError_t e = cudaSetDevice(ordinal_); e != cudaSuccess)
      return Status::Error("cudaSetDevice: " + cuda_text(e));
    int multiprocessors = 0;
    if (Status asked = check(cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, ordinal_),
                             "cudaDeviceGetAttribute (multiprocessors)");
        !asked.ok())
      return asked;
    launch_shape_ = {.multiprocessors = shape_.ctas_per_multiprocessor < 0 ? 0 : multiprocessors,
                     .ctas_per_multiprocessor = shape_.ctas_per_multiprocessor};
    const std::size_t bytes = elements_ * sizeof(float);
    if (bytes != 0) {
      if (Status made = check(cudaMalloc(&weights_, bytes), "cudaMalloc (weights)"); !made.ok()) return made;
      for (int s = 0; s < slots_; ++s)
        if (Status made = check(cudaMalloc(&state_[s], bytes), "cudaMalloc (optimizer state)"); !made.ok()) return made;
      if (Status made = check(cudaMallocHost(&mirror_, bytes), "cudaMallocHost (weights mirror)"); !made.ok())
        return made;
      std::memset(mirror_, 0, bytes);
      if (Status zeroed = check(cudaMemset(weights_, 0, bytes), "cudaMemset"); !zeroed.ok()) return zeroed;
      for (int s = 0; s < slots_; ++s)
        if (Status zeroed = check(cudaMemset(state_[s], 0, bytes), "cudaMemset"); !zeroed.ok()) return zeroed;
    }
    for (int i = 0; i < kLanes; ++i) {
      lanes_.push_back(std::make_unique<Lane>());
      Lane& lane = *lanes_.back();
      Status made = check(cudaStreamCreateWithFlags(&lane.compute, cudaStreamNonBlocking), "cudaStreamCreate");
      if (made.ok())
        made = check(cudaStreamCreateWithFlags(&lane.copy_back, cudaStreamNonBlocking), "cudaStreamCreate");
      for (auto& slot : lane.slot) {
        if (made.ok())
          made = check(cudaMallocHost(&slot.staging, shape_.chunk_bytes + kGradSlack), "cudaMallocHost (staging)");
        if (made.ok())
          made = check(cudaMalloc(&slot.device_grad, shape_.chunk_bytes + kGradSlack), "cudaMalloc (gradient)");
        if (made.ok()) made = check(cudaEventCreateWithFlags(&slot.staged, cudaEventDisableTiming), "cudaEventCreate");
        if (made.ok()) made = check(cudaEventCreateWithFlags(&slot.applied, cudaEventDisableTiming), "cudaEventCreate");
      }
      if (!made.ok()) return made;
      free_lanes_.push_back(&lane);
    }
    return check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }

  ~CudaStore() override {
    // Errors are ignored: a failed context frees its memory with the process.
    cudaSetDevice(ordinal_);
    cudaDeviceSynchronize();
    for (auto& lane : lanes_) {
      for (auto& slot : lane->slot) {
        if (slot.staging) cudaFreeHost(slot.staging);
        if (slot.device_grad) cudaFree(slot.device_grad);
        if (slot.staged) cudaEventDestroy(slot.staged);
        if (slot.applied) cudaEventDestroy(slot.applied);
      }
      if (lane->compute) cudaStreamDestroy(lane->compute);
      if (lane->copy_back) cudaStreamDestroy(lane->copy_back);
    }
    if (weights_) cudaFree(weights_);
    for (float* s : state_)
      if (s) cudaFree(s);
    if (mirror_) cudaFreeHost(mirror_);
  }

  Device device() const override { return Device::cuda(ordinal_); }
  bool updates_whole_requests() const override { return true; }

  Status update(OptimizerKind kind, Gradient grad, std::span<const BlockUpdate> updates) override {
    LaneLease lease(*this);
    if (Status leased = lease.begin(); !leased.ok()) return leased;
    Lane& lane = *lease.lane;
    const std::size_t size = wire_size(grad.dtype);
    const std::uint64_t chunk_elements = std::max<std::uint64_t>(1, shape_.chunk_bytes / size);
    bool copy_back_used = false;
    cuda::ChunkCursor at;
    for (int chunk = 0; !at.at_end(updates); ++chunk) {
      Lane::Slot& slot = lane.slot[chunk % 2];
      cuda::Launch launch;
      const cuda::Chunk c = cuda::pack_chunk(updates, at, chunk_elements, launch);
      const bool last = at.at_end(updates);
      const std::size_t bytes = c.elements * size;
      // The slot's previous upload must be done before its buffers are overwritten. The gradient goes at the
      // weights' 16-byte phase (Chunk::grad_offset).
      Status step = check(cudaEventSynchronize(slot.staged), "cudaEventSynchronize (staging)");
      if (!step.ok()) return step;
      const std::size_t offset = c.grad_offset * size;
      const std::byte* source = static_cast<const std::byte*>(grad.data) + c.grad_first * size;
      if (shape_.stage_in_pinned) {
        std::memcpy(slot.staging + offset, source, bytes);
        source = slot.staging + offset;
      }
      // From pageable memory (stage_in_pinned false) the driver stages the copy itself and returns once it has.
      step = check(cudaMemcpyAsync(slot.device_grad + offset, source, bytes, cudaMemcpyHostToDevice, lane.compute),
                   "cudaMemcpyAsync (gradient to GPU)");
      if (step.ok()) step = check(cudaEventRecord(slot.staged, lane.compute), "cudaEventRecord");
      if (step.ok())
        step = check(cuda::launch_update(kind, grad.dtype, launch, weights_, slot.device_grad, state_[0], state_[1],
                                         launch_shape_, lane.compute),
                     "optimizer kernel launch");
      cudaStream_t copy_stream = lane.compute;
      if (!(last && shape_.last_copy_back_in_order)) {
        // Off the compute stream, so that this copy overlaps the next chunk's upload and kernel.
        copy_stream = lane.copy_back;
        copy_back_used = true;
        if (step.ok()) step = check(cudaEventRecord(slot.applied, lane.compute), "cudaEventRecord");
        if (step.ok()) step = check(cudaStreamWaitEvent(lane.copy_back, slot.applied, 0), "cudaStreamWaitEvent");
      }
      if (step.ok())
        step = check(cudaMemcpyAsync(mirror_ + c.element_first, weights_ + c.element_first, c.elements * sizeof(float),
                                     cudaMemcpyDeviceToHost, copy_stream),
                     "cudaMemcpyAsync (weights to the host mirror)");
      if (!step.ok()) return step;
    }
    // The compute stream ran every upload and kernel; both streams done end the whole push.
    Status done = check(cudaStreamSynchronize(lane.compute), "optimizer step on the GPU");
    if (done.ok() && copy_back_used) done = check(cudaStreamSynchronize(lane.copy_back), "optimizer step on the GPU");
    return done;
  }

  float* host_weights() override { return mirror_; }

  Status publish_weights(std::uint64_t element, std::uint64_t count) override {
    LaneLease lease(*this);
    if (Status leased = lease.begin(); !leased.ok()) return leased;
    Status copied = check(cudaMemcpyAsync(weights_ + element, mirror_ + element, count * sizeof(float),
                                          cudaMemcpyHostToDevice, lease.lane->compute),
                          "cudaMemcpyAsync (weights to the GPU)");
    if (copied.ok()) copied = check(cudaStreamSynchronize(lease.lane->compute), "cudaStreamSynchronize");
    return copied;
  }

  Status read_state(std::uint64_t element, std::uint64_t count, std::vector<float>& scratch,
                    std::span<const float> (&state)[2]) const override {
    for (auto& s : state) s = {};
    if (slots_ == 0) return status();
    LaneLease lease(*this);
    if (Status leased = lease.begin(); !leased.ok()) return leased;
    scratch.resize(slots_ * count);
    Status copied = Status::Ok();
    for (int s = 0; s < slots_ && copied.ok(); ++s)
      copied = check(cudaMemcpyAsync(scratch.data() + s * count, state_[s] + element, count * sizeof(float),
                                     cudaMemcpyDeviceToHost, lease.lane->compute),
                     "cudaMemcpyAsync (optimizer state from the GPU)");
    if (copied.ok()) copied = check(cudaStreamSynchronize(lease.lane->compute), "cudaStreamSynchronize");
    if (!copied.ok()) return copied;
    for (int s = 0; s < slots_; ++s) state[s] = {scratch.data() + s * count, count};
    return Status::Ok();
  }

  Status write_state(std::uint64_t element, std::uint64_t count, std::span<const float> s0,
                     std::span<const float> s1) override {
    if (slots_ == 0) return status();
    LaneLease lease(*this);
    if (Status leased = lease.begin(); !leased.ok()) return leased;
    const std::span<const float> in[2] = {s0, s1};
    Status copied = Status::Ok();
    for (int s = 0; s < slots_ && copied.ok(); ++s)
      copied = check(cudaMemcpyAsync(state_[s] + element, in[s].data(),
                                     std::min<std::uint64_t>(count, in[s].size()) * sizeof(float),
                                     cudaMemcpyHostToDevice, lease.lane->compute),
                     "cudaMemcpyAsync (optimizer state to the GPU)");
    if (copied.ok()) copied = check(cudaStreamSynchronize(lease.lane->compute), "cudaStreamSynchronize");
    return copied;
  }

  Status status() const override {
    std::lock_guard lock(error_mutex_);
    return error_.value_or(Status::Ok());
  }

 private:
  struct Lane {
    cudaStream_t compute = nullptr;    // uploads and kernels
    cudaStream_t copy_back = nullptr;  // updated weights to the host mirror
    struct Slot {
      std::byte* staging = nullptr;  // pinned
      std::byte* device_grad = nullptr;
      cudaEvent_t staged = nullptr;   // the upload from `staging` is done
      cudaEvent_t applied = nullptr;  // the kernel that read `device_grad` is done
    } slot[2];
  };

  // A lane for the duration of one call (waits while all are busy); sets the calling thread's device.
  struct LaneLease {
    explicit LaneLease(const CudaStore& s) : store(s) {}
    Status begin() {
      if (Status engine = store.status(); !engine.ok()) return engine;
      if (Status set = store.check(cudaSetDevice(store.ordinal_), "cudaSetDevice"); !set.ok()) return set;
      std::unique_lock lock(store.lanes_mutex_);
      store.lane_free_.wait(lock, [this] { return !store.free_lanes_.empty(); });
      lane = store.free_lanes_.back();
      store.free_lanes_.pop_back();
      return Status::Ok();
    }
    ~LaneLease() {
      if (!lane) return;
      std::lock_guard lock(store.lanes_mutex_);
      store.free_lanes_.push_back(lane);
      store.lane_free_.notify_one();
    }
    const CudaStore& store;
    Lane* lane = nullptr;
  };

  // Ok on success; else records the first failure (sticky: the shard's state on the GPU is now unknown) and
  // returns it.
  Status check(cudaError_t e, const char* what) const {
    if (e == cudaSuccess) return Status::Ok();
    std::lock_guard lock(error_mutex_);
    if (!error_) error_ = Status::Error("GPU engine (" + device().name() + ") failed in " + what + ": " + cuda_text(e));
    return *error_;
  }

  const int ordinal_;
  const std::uint64_t elements_;
  const int slots_;
  const CudaStoreShape shape_;
  cuda::LaunchShape launch_shape_;
  float* weights_ = nullptr;              // device
  float* state_[2] = {nullptr, nullptr};  // device
  float* mirror_ = nullptr;               // pinned host
  std::vector<std::unique_ptr<Lane>> lanes_;
  // The lane pool and the error are not the shard's state: const calls (read_state) use them too.
  mutable std::mutex lanes_mutex_;
  mutable std::condition_variable lane_free_;
  mutable std::vector<Lane*> free_lanes_;
  mutable std::mutex error_mutex_;
  mutable std::optional<Status> error_;
};

}  // namespace

bool cuda_engine_built() { return true; }

int cuda_device_count(std::string* why) {
  // Asked once: the answer does not change while the process runs, and without a driver every call would
  // fail the same way.
  static const auto answer = [] {
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) return std::pair<int, std::string>{0, cuda_text(e)};
    if (count == 0) return std::pair<int, std::string>{0, "the CUDA driver reports no GPU"};
    return std::pair<int, std::string>{count, ""};
  }();
  if (why) *why = answer.second;
  return answer.first;
}

Result<std::unique_ptr<ShardStore>> make_cuda_store(int ordinal, std::uint64_t elements, OptimizerKind kind,
                                                    const CudaStoreShape& shape) {
  if (shape.chunk_bytes < 16)
    return Status::Error(StatusCode::invalid_argument,
                         "CUDA store: chunk_bytes " + std::to_string(shape.chunk_bytes) + " (at least 16 allowed)");
  if (Status usable = check_device(Device::cuda(ordinal)); !usable.ok()) return usable;
  try {
    auto store = std::make_unique<CudaStore>(ordinal, elements, kind, shape);
    if (Status made = store->init(); !made.ok()) return made;
    return std::unique_ptr<ShardStore>(std::move(store));
  } catch (const std::bad_alloc&) {
    return Status::Error("cannot allocate host memory for the GPU engine");
  }
}

Result<std::unique_ptr<ShardStore>> make_cuda_store(int ordinal, std::uint64_t elements,
                                                    std::uint64_t /*block_elements*/, OptimizerKind kind) {
  // Chunks may end inside a block, so the staging size does not depend on the block size.
  return make_cuda_store(ordinal, elements, kind, CudaStoreShape{});
}

}  // namespace blockps
