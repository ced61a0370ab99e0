// Path -> shard: every LU whose --backing-store names one checkpoint file attaches to one ServedShard, however
// the path is spelled ("/d/./m.ckpt" and "/d/m.ckpt" are one shard).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "contract/result.h"
#include "ps_backend/config/lu_options.h"
#include "ps_backend/shard/served_shard.h"

namespace blockps {

/// LUs attach by path; the shard lives while any LU holds it.
class ShardRegistry {
 public:
  static ShardRegistry& instance();
  /// The shard for `path` (canonical_shard_path), created or, when already open, checked against the keys
  /// `opts` gives (StatusCode::mismatch when they differ). Returns the shard or the reason for refusal.
  Result<std::shared_ptr<ServedShard>> attach(const std::string& path, const LuOptions& opts);
  /// The shards created from now on use the store `wrap` makes of their engine's (ModelShard::StoreWrapper; empty:
  /// the engine's own). The program that links the core supplies it: the product never does; a test wraps the
  /// stores in one that fails on demand (tests/support/faulty_store.h).
  void wrap_stores(ModelShard::StoreWrapper wrap);

 private:
  std::mutex mutex_;
  std::map<std::string, std::weak_ptr<ServedShard>> shards_;
  ModelShard::StoreWrapper wrap_store_;
};

/// "/d/./m.ckpt" -> "/d/m.ckpt": resolved with realpath (symlinks too) when the file exists, else its directory
/// (which must exist) with the file name kept. Returns the path or why it names no usable file.
Result<std::string> canonical_shard_path(const std::string& path);

}  // namespace blockps
