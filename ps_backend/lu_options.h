// The --bsopts of a blockps LU: parsing, validation and the one table of keys (docs/OPTIONS.md mirrors it).
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "aggregator/model_shard.h"
#include "aggregator/optimizer.h"
#include "ps_backend/contract/byte_size.h"
#include "ps_backend/contract/limits.h"
#include "ps_backend/contract/lu_role.h"
#include "ps_backend/contract/status.h"

namespace blockps {

/// How a new shard's weights start (ignored when a checkpoint is loaded).
struct InitSpec {
  enum class Kind { zeros, uniform, normal, file } kind = Kind::zeros;
  double scale = 0;  // uniform: a (U(-a, a)); normal: standard deviation
  std::string path;  // file: raw wire-dtype bytes, exactly `size` bytes
  bool operator==(const InitSpec&) const = default;
};
std::string to_string(const InitSpec& s);

/// How pushes from several workers become optimizer steps (docs/OPTIONS.md, "Synchronous rounds").
struct RoundPolicy {
  enum class Mode { async, sync, ssp } mode = Mode::async;
  std::uint32_t staleness = 0;              // ssp:K: how many pushes a worker may run ahead of the slowest
  std::uint32_t workers = 1;                // expected workers: a round closes early once all of them pushed
  std::uint32_t min_workers = 1;            // fewer live workers: the grad LU fails commands instead of waiting
  std::uint32_t straggler_ms = 2000;        // a round closes without the missing workers after this long
  std::uint32_t worker_timeout_ms = 10000;  // no push for this long: dropped; also the longest a command parks
  // sync: a push that would open a block's round (no worker pushed that block yet) waits while its worker has
  // this many more blocks in open rounds than the member with the fewest (0: no limit). Keeps the workers' flows into a
  // shard level, so that rounds close at the pace of the pushes (docs/OPTIONS.md, "Synchronous rounds").
  std::uint32_t push_lead = 2;
  bool operator==(const RoundPolicy&) const = default;
};
std::string_view to_string(RoundPolicy::Mode m);
std::string to_string(const RoundPolicy& p);  // "async", "sync", "ssp:K"

/// Everything that describes a shard (shared by all LUs over one checkpoint path).
struct ShardConfig {
  ShardGeometry geometry;
  OptimizerParams optimizer;
  InitSpec init;
  std::uint64_t seed = 1;
  std::uint32_t checkpoint_s = 0;  // 0: only on SYNCHRONIZE CACHE and close
  RoundPolicy rounds;
  std::string device = "cpu";  // cpu, auto or gpu:N as given (ServedShard resolves auto)
};

/// A parsed --bsopts string. `given` holds the shard keys the user set; the others take the defaults above
/// for a new shard, or the values of the shard already open at the same path / in its checkpoint.
struct LuOptions {
  LuRole role = LuRole::grad;
  // Threads of tgt's I/O pool for this LU (tgtd -t is for all of tgtd's stores and defaults to 16, which
  // oversubscribes small hosts: bench/pushpull measured 4 best on 2 cores).
  std::uint32_t io_threads = 4;
  // role=status: the initiators (iSCSI names) whose WRITEs of control lines are accepted; every other writer is
  // refused. Empty: every initiator may write them (no admins= given; the LU says so in the log).
  std::vector<std::string> admins;
  ShardConfig config;
  std::set<std::string> given;
};

/// Parse "k=v;k=v". `lu_block_bytes` is the LU's logical block size (512 unless tgtadm --blocksize):
/// size and block must be multiples of it. A refusal (StatusCode::config, or unknown_option for a key the
/// table does not know) names the key, the value seen and what is allowed. Never throws.
Result<LuOptions> parse_lu_options(std::string_view bsopts, std::uint32_t lu_block_bytes);

/// Merge `opts` onto an existing shard's config: every key the user gave must equal the shard's value
/// (`structural_only`: only size/dtype/block/opt must match, hyper-parameters given replace the shard's,
/// as when a checkpoint is loaded with a new lr). Returns the merged config, or the first key that differs
/// (StatusCode::mismatch) or cannot be applied.
Result<ShardConfig> merge_onto(const LuOptions& opts, const ShardConfig& existing, bool structural_only);

/// One row per key, for the docs and for `unknown key` messages.
struct OptionKey {
  std::string_view name;
  std::string_view default_value;
  std::string_view meaning;
};
const std::vector<OptionKey>& option_keys();

}  // namespace blockps

namespace blockps {
/// All shard keys of `c` as "k=v;k=v" (parse_lu_options reads it back): how checkpoints record their config.
std::string format_shard_options(const ShardConfig& c);
}  // namespace blockps
