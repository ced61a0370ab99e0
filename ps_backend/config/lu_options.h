// The --bsopts of a blockps LU: parsing, validation and the one table of keys (docs/OPTIONS.md mirrors it), and
// the options text of a shard's config (what checkpoints record).
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "contract/byte_size.h"
#include "contract/limits.h"
#include "contract/lu_role.h"
#include "contract/result.h"
#include "ps_backend/config/shard_config.h"

namespace blockps {

/// An init spec as the value of init= ("zeros", "uniform:A", "normal:S", "file:PATH").
std::string to_string(const InitSpec& s);

/// A parsed --bsopts string. `given` holds the shard keys the user set; the others take the defaults above
/// for a new shard (shard_config.h), or the values of the shard already open at the same path / in its checkpoint.
struct LuOptions {
  LuRole role = LuRole::grad;
  // Threads of tgt's I/O pool for this LU (tgtd -t is for all of tgtd's stores and defaults to 16, which
  // oversubscribes small hosts: bench/pushpull measured 4 best on 2 cores).
  std::uint32_t io_threads = 4;
  // READs and WRITEs of at most this many bytes run on tgtd's main thread (ServedLu::runs_on_caller): tgt's hand-off
  // to its pool (a futex wake, a thread switch, an eventfd back) cost more than a 16 KiB command's work
  // (bench/pushpull, 16K: push/null-write 0.46 with the pool, 0.95 on the main thread; 256K: a little worse).
  std::uint32_t main_thread_bytes = 64 * 1024;
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

/// checkpoint_copy=`value` refused, with what is allowed: for the shard, which finds the copy to be its own
/// checkpoint file (the parser cannot: it does not know the shard's path).
Status bad_checkpoint_copy(std::string_view value);

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
/// The same keys and values, one pair each, in the same order (the status page's /shard/settings: a worker reads a
/// setting without parsing bsopts).
std::vector<std::pair<std::string, std::string>> shard_settings(const ShardConfig& c);
}  // namespace blockps
