// A shard config (configs/shardN.conf: tgt's targets.conf plus our keys; docs/OPTIONS.md, "Shard config files")
// as tgt-admin reads it: each `blockps-shard PATH 'OPTIONS'` line made into the three <backing-store> blocks of
// its LUs. What `blockps conf expand` prints, and what scripts/ps-up.sh loads and scripts/attach.sh reads.
#pragma once

#include <string>
#include <string_view>

#include "contract/result.h"

namespace blockps::cli {

/// The key of the shard line, inside a <target IQN> block.
inline constexpr std::string_view kShardLineKey = "blockps-shard";

/// `text` (the file `file_name`, named so in errors) with each blockps-shard line replaced by a comment naming it
/// and three <backing-store> blocks at its indentation: LUN 1 role=grad, 2 role=weights, 3 role=status
/// (contract/lu_role.h) over the one checkpoint file spelled PATH, DIR/./FILE and DIR//FILE (tgt-admin merges
/// backing stores of one path string; the module resolves the three to one shard), each with the line's options;
/// admins= goes to the status LU only. Every other line is kept as written; each output line ends in "\n".
/// A wrong line is a StatusCode::config error "FILE:LINE: what is wrong (what is allowed)", the first in the file.
Result<std::string> expand_shard_lines(std::string_view text, const std::string& file_name);

}  // namespace blockps::cli
