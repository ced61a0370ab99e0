#include "tests/support/blockps_shard.h"

#include <utility>

namespace blockps::testing {

std::string tgtd_unavailable_reason() { return TgtdInstance::unavailable_reason(); }

std::string blockps_module_missing_reason() {
  return TgtdInstance::blockps_module_installed()
             ? std::string()
             : blockps_module_path() +
                   " is missing: build the project (or `cmake --install build` for tgtd's own directory)";
}

Status add_blockps_shard(TgtdInstance& tgtd, int tid, const std::string& iqn, const std::string& checkpoint,
                         const std::string& shard_options) {
  if (!tgtd.running()) {
    if (Status s = tgtd.start(); !s.ok()) return s;
  }
  // Logins only once the three LUs are there, as tgt-admin does it (it binds a target last): a worker logging in
  // again after a restart meets the whole shard.
  if (const CommandResult t = tgtd.add_target(tid, iqn, TgtdInstance::Logins::later); !t.ok())
    return Status::Error(t.describe());
  const std::pair<int, std::string> lus[] = {
      {1, "role=grad;" + shard_options}, {2, "role=weights"}, {3, "role=status"}};
  for (const auto& [lun, bsopts] : lus) {
    if (const CommandResult r = tgtd.add_lu(tid, lun, checkpoint, "blockps", bsopts); !r.ok())
      return Status::Error(bsopts + ": " + r.describe() + "\n" + tgtd.log_text());
  }
  if (const CommandResult b = tgtd.allow_all_initiators(tid); !b.ok()) return Status::Error(b.describe());
  return Status::Ok();
}

}  // namespace blockps::testing
