// A shard config (configs/shardN.conf: tgt's targets.conf plus our keys; docs/OPTIONS.md, "Shard config files")
// as tgt-admin reads it: each `blockps-shard PATH 'OPTIONS'` line made into the three <backing-store> blocks of
// its LUs; and what the scripts read from it: its top-level keys, its LUs, the text ps-up.sh gives tgt-admin, the
// portal, IQN and LUNs attach.sh logs in to. What the `blockps conf` subcommands print (client/cli/conf_command.cpp).
//
// Every reader takes the file's text and reads it as tgt-admin (Config::General) does: "#" starts a comment anywhere
// on a line, blanks around a line do not count, "<NAME ...>" opens a block and "</NAME>" closes it.
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "contract/lu_role.h"
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

/// The value of each top-level `key` line of `text` (outside every <block>), in file order: the words after the
/// key joined by one blank ("" for the key alone). Empty when no line has the key. blockps-control, blockps-portal,
/// blockps-iser and blockps-nop-in are such keys (scripts/ps-up.sh checks how many there are and what they say).
std::vector<std::string> top_level_values(std::string_view text, std::string_view key);

/// One LU of a <target> block, as tgt-admin makes it: a <backing-store PATH>/<direct-store PATH> block or a
/// `backing-store PATH`/`direct-store PATH` line. Fields the file leaves out are "".
struct TargetLu {
  std::string iqn;      // of its <target IQN>
  std::string lun;      // its `lun N` (tgt-admin numbers an LU without one)
  std::string bs_type;  // its own `bs-type`, else its target's, else "" (tgt's default, rdwr)
  std::string path;
  std::string role;  // role= of its `bsopts` (contract/lu_role.h names the roles)
};

/// Every LU of every closed <target> block of `text`, in file order. A blockps-shard line is no LU here: give the
/// text expand_shard_lines made.
std::vector<TargetLu> target_lus(std::string_view text);

/// `text` with its top-level `control-port N` line replaced by a comment, every other line as written (each output
/// line ends in "\n", as in with_iser_targets). ps-up.sh gives tgt-admin `-C N` instead: tgt-admin refuses both
/// together ("Multiple control-port definitions are not allowed!"), and with the line alone it asks tgtd 0, not N,
/// which targets exist.
std::string without_control_port(std::string_view text);

/// What the IQN of a target's iSER copy adds to it (scripts/lib/blockps-tgt.sh's BLOCKPS_ISER_SUFFIX, with which
/// scripts/attach.sh finds the copies, says the same).
inline constexpr std::string_view kIserTargetSuffix = "-iser";

/// `text` as written, then after each <target IQN> block a comment and its iSER copy <target IQN-iser> with
/// `driver iser` first and the block's lines but its `driver`, `InitialR2T` and `ImmediateData` lines: tgt serves
/// a target over TCP or iSER, never both, and its iSER supports neither InitialR2T=No nor ImmediateData=Yes (its
/// target_create forces them; tgt-admin would undo that). The copy serves the same LUs (the same checkpoints).
std::string with_iser_targets(std::string_view text);

/// Where a worker finds a shard: what scripts/attach.sh --conf logs in to.
struct ShardEndpoint {
  std::string portal;                             // the first word of the one blockps-portal line (HOST:PORT)
  std::string iqn;                                // of the one <target IQN>
  std::array<std::string, kLuRoles.size()> luns;  // the LUN of each role, indexed by LuRole
};

/// The endpoint of the shard config `text` (the file `file_name`, as written: its blockps-shard line is expanded
/// here). The LUN of a role is the `lun` of a <backing-store> block whose bsopts give that role (the last one
/// wins). A StatusCode::config error "FILE[:LINE]: what is wrong (what is allowed)" when the file has not exactly
/// one top-level blockps-portal line (the line of the second), not exactly one <target IQN> (the second's), or no
/// LU of some role (the target's line), or when expand_shard_lines refuses a line.
Result<ShardEndpoint> shard_endpoint(std::string_view text, const std::string& file_name);

}  // namespace blockps::cli
