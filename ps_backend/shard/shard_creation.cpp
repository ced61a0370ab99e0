#include "ps_backend/shard/shard_creation.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <random>
#include <vector>

#include "contract/log.h"
#include "ps_backend/shard/shard_registry.h"

namespace blockps {
namespace {

// checkpoint_copy= must name another file than the checkpoint at `path` (canonical), however it is spelled: a copy
// onto itself is no copy. `from_checkpoint`: the value came from the checkpoint's options, not from this LU's (a
// shard opened on its copy finds its own path there).
Status check_copy_is_another_file(const ShardConfig& c, const std::string& path, bool from_checkpoint) {
  if (c.checkpoint_copy.empty()) return Status::Ok();
  const Result<std::string> copy = canonical_shard_path(c.checkpoint_copy);
  if ((copy.ok() ? *copy : c.checkpoint_copy) != path) return Status::Ok();
  const Status refused = bad_checkpoint_copy(c.checkpoint_copy);
  if (!from_checkpoint) return refused;
  return Status::Error(refused.code(), refused.message() +
                                           " (the checkpoint records it; give checkpoint_copy=none or another path to "
                                           "open it here)");
}

/// The checkpoint's config with the keys `opts` gives merged on, or why they do not fit it.
Result<ShardConfig> merged_with_checkpoint(const std::string& path, const LuOptions& opts, const ShardConfig& saved) {
  Result<ShardConfig> merged = merge_onto(opts, saved, /*structural_only=*/true);
  if (!merged.ok()) {
    return Status::Error(merged.status().code(),
                         "checkpoint " + path + " does not match the options: " + merged.message() +
                             " (start with a new path, or remove the checkpoint to discard it)");
  }
  const std::string before = format_shard_options(saved), after = format_shard_options(*merged);
  if (before != after) log_line(path + ": options differ from the checkpoint's; now: " + after);
  return merged;
}

}  // namespace

Result<ShardOpening> plan_opening(const std::string& path, const LuOptions& opts) {
  ShardOpening opening{opts.config, checkpoint_exists(path), {}};
  if (opening.from_checkpoint) {
    const Result<CheckpointHeader> header = read_checkpoint_header(path);
    if (!header.ok()) return header.status();
    opening.tenancy = header->tenancy;
    Result<ShardConfig> merged = merged_with_checkpoint(path, opts, header->config);
    if (!merged.ok()) return merged.status();
    opening.config = std::move(merged).value();
  } else if (!opts.given.count("size")) {
    return Status::Error(StatusCode::config,
                         "size= is required: no shard is open at " + path + " and it holds no checkpoint");
  }
  if (Status geometry = check_geometry(opening.config.geometry); !geometry.ok()) return geometry;
  if (Status copy = check_copy_is_another_file(opening.config, path,
                                               opening.from_checkpoint && !opts.given.count("checkpoint_copy"));
      !copy.ok())
    return copy;
  return opening;
}

Result<ShardLock> ShardLock::take(const std::string& path) {
  const std::string lock_path = path + ".lock";
  ShardLock lock(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (lock.fd_ < 0) {
    const int err = errno;
    return Status::Error(StatusCode::io, "cannot open " + lock_path + ": " + errno_message(err));
  }
  if (::flock(lock.fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    return err == EWOULDBLOCK ? Status::Error(StatusCode::io, "checkpoint " + path + " is in use by another process (" +
                                                                  lock_path + " is locked)")
                              : Status::Error(StatusCode::io, "cannot lock " + lock_path + ": " + errno_message(err));
  }
  return lock;
}

ShardLock& ShardLock::operator=(ShardLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

ShardLock::~ShardLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the flock
}

std::shared_ptr<CpuEngine> shared_engine() {
  static std::shared_ptr<CpuEngine> engine = std::make_shared<CpuEngine>(0);
  return engine;
}

Result<Device> choose_device(const ShardConfig& c, const std::string& path, bool from_checkpoint) {
  if (c.device == "auto") {
    std::string why;
    if (cuda_device_count(&why) > 0) {
      log_line(path + ": device=auto: aggregating on gpu:0");
      return Device::cuda(0);
    }
    log_line(path + ": device=auto: no usable GPU (" + why + "): aggregating on the CPU");
    return Device::cpu();
  }
  const std::optional<Device> device = parse_device(c.device);
  if (!device) return Status::Error(StatusCode::config, "device=" + c.device + ": must be cpu, auto or gpu:N");
  if (Status usable = check_device(*device); !usable.ok()) {
    if (!from_checkpoint) return usable;
    return Status::Error(usable.code(), usable.message() + " (device=" + c.device +
                                            " is the checkpoint's; give device=cpu or device=auto to open it here)");
  }
  return *device;
}

Status initialise_weights(ModelShard& model, const ShardConfig& c) {
  switch (c.init.kind) {
    case InitSpec::Kind::zeros:
      return Status::Ok();
    case InitSpec::Kind::uniform: {
      std::mt19937_64 rng(c.seed);
      std::uniform_real_distribution<float> dist(static_cast<float>(-c.init.scale), static_cast<float>(c.init.scale));
      return model.fill_weights([&](std::uint64_t) { return dist(rng); });
    }
    case InitSpec::Kind::normal: {
      std::mt19937_64 rng(c.seed);
      std::normal_distribution<float> dist(0.0f, static_cast<float>(c.init.scale));
      return model.fill_weights([&](std::uint64_t) { return dist(rng); });
    }
    case InitSpec::Kind::file: {
      const int fd = ::open(c.init.path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) {
        const int err = errno;
        return Status::Error(StatusCode::io, "init=file:" + c.init.path + ": " + errno_message(err));
      }
      struct stat st {};
      Status loaded = Status::Ok();
      if (::fstat(fd, &st) != 0 || static_cast<std::uint64_t>(st.st_size) != c.geometry.bytes) {
        loaded =
            Status::Error(StatusCode::mismatch, "init=file:" + c.init.path + ": holds " + std::to_string(st.st_size) +
                                                    " bytes, the shard needs " + std::to_string(c.geometry.bytes) +
                                                    " (size) in dtype " + std::string(to_string(c.geometry.dtype)));
      } else {
        std::vector<std::byte> chunk(c.geometry.block_bytes);
        for (std::uint64_t off = 0; off < c.geometry.bytes && loaded.ok(); off += chunk.size()) {
          const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(chunk.size(), c.geometry.bytes - off));
          const ssize_t r = ::pread(fd, chunk.data(), n, static_cast<off_t>(off));
          if (r != static_cast<ssize_t>(n))
            loaded = Status::Error(StatusCode::io, "init=file:" + c.init.path + ": short read");
          else
            loaded = model.assign_weights(off, {chunk.data(), n});
        }
      }
      ::close(fd);
      return loaded;
    }
  }
  return Status::Error("unknown init");
}

}  // namespace blockps
