// The steps of opening a shard (ServedShard::create): what it opens with (its checkpoint's options merged with the
// LU's, or the LU's alone), the lock that keeps a second process off its checkpoint file, the engine and device
// that hold it, and the weights of a new shard (init=).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "aggregator/model_shard.h"
#include "contract/result.h"
#include "ps_backend/checkpoint/checkpoint.h"
#include "ps_backend/config/lu_options.h"
#include "ps_backend/config/shard_config.h"

namespace blockps {

/// What a shard opens with. `from_checkpoint`: the file at its path holds a checkpoint, whose tenancy (job,
/// place) the shard takes on.
struct ShardOpening {
  ShardConfig config;
  bool from_checkpoint = false;
  ShardTenancy tenancy;
};

/// The config for the shard at `path` from the LU's options `opts`: the checkpoint's, with the keys `opts` gives
/// merged on (structural keys must match), or the options alone for a new shard (size= then required); checked
/// (geometry, checkpoint_copy=). Returns it or why the shard cannot be opened so.
Result<ShardOpening> plan_opening(const std::string& path, const LuOptions& opts);

/// flock on PATH.lock, held while the shard is served: two tgtd processes must never serve (and overwrite) one
/// checkpoint file.
class ShardLock {
 public:
  /// Takes the lock, or says why not (another process holds it; the file cannot be opened).
  static Result<ShardLock> take(const std::string& path);
  ShardLock(ShardLock&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  ShardLock& operator=(ShardLock&& other) noexcept;
  ShardLock(const ShardLock&) = delete;
  ShardLock& operator=(const ShardLock&) = delete;
  ~ShardLock();

 private:
  explicit ShardLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

/// The CPU engine every shard of this process shares (its threads serve them all).
std::shared_ptr<CpuEngine> shared_engine();

/// The device for `c.device` (cpu, auto, gpu:N), or why it cannot be had. `from_checkpoint`: the value came from
/// the checkpoint's options, not from this LU's (a checkpoint written on a GPU host may be opened on another).
Result<Device> choose_device(const ShardConfig& c, const std::string& path, bool from_checkpoint);

/// A new shard's weights as init= says (zeros, uniform, normal, file:PATH).
Status initialise_weights(ModelShard& model, const ShardConfig& c);

}  // namespace blockps
