// A blockps shard on a private tgtd, as the client, CLI and C API tests need one: target TID named IQN with
// LUN 1 grad (`role=grad;` + shard_options), LUN 2 weights and LUN 3 status over one checkpoint file.
#pragma once

#include <string>

#include "tests/support/tgtd_instance.h"

namespace blockps::testing {

// Why integration tests of blockps cannot run here ("" when they can): tgtd unusable, or the module not
// installed where tgtd loads it. Tests skip on the first and fail on the second.
std::string tgtd_unavailable_reason();
std::string blockps_module_missing_reason();

// Starts `tgtd` when it is not running, then adds the target and its three LUs. Returns the first failure,
// with tgtd's log.
Status add_blockps_shard(TgtdInstance& tgtd, int tid, const std::string& iqn, const std::string& checkpoint,
                         const std::string& shard_options);

}  // namespace blockps::testing
