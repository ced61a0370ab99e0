#include "ps_backend/shard/shard_registry.h"

#include <climits>
#include <cstdlib>
#include <utility>

namespace blockps {

Result<std::string> canonical_shard_path(const std::string& path) {
  const auto refuse = [](std::string why) { return Status::Error(StatusCode::invalid_argument, std::move(why)); };
  if (path.empty()) return refuse("the backing-store path is empty");
  const auto slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  if (name.empty() || name == "." || name == "..") return refuse("the backing-store path " + path + " names no file");
  char resolved[PATH_MAX];
  if (::realpath(path.c_str(), resolved)) return std::string(resolved);  // the file exists: symlinks and all resolved
  if (!::realpath(dir.c_str(), resolved)) {
    const int err = errno;
    return refuse("the directory of " + path + " does not exist or cannot be resolved: " + errno_message(err));
  }
  return std::string(resolved) + (std::string(resolved) == "/" ? "" : "/") + name;
}

ShardRegistry& ShardRegistry::instance() {
  static ShardRegistry registry;
  return registry;
}

void ShardRegistry::wrap_stores(ModelShard::StoreWrapper wrap) {
  std::lock_guard lk(mutex_);
  wrap_store_ = std::move(wrap);
}

Result<std::shared_ptr<ServedShard>> ShardRegistry::attach(const std::string& path, const LuOptions& opts) {
  const Result<std::string> canonical = canonical_shard_path(path);
  if (!canonical.ok()) return canonical.status();
  std::lock_guard lk(mutex_);
  std::erase_if(shards_, [](const auto& entry) { return entry.second.expired(); });
  if (auto it = shards_.find(*canonical); it != shards_.end()) {
    if (auto shard = it->second.lock()) {
      const Result<ShardConfig> merged = merge_onto(opts, shard->config(), /*structural_only=*/false);
      if (!merged.ok()) {
        return Status::Error(merged.status().code(),
                             "the shard at " + *canonical + " is already open with other options: " + merged.message());
      }
      return shard;
    }
  }
  Result<std::shared_ptr<ServedShard>> created = ServedShard::create(*canonical, opts, wrap_store_);
  if (created.ok()) shards_[*canonical] = *created;
  return created;
}

}  // namespace blockps
