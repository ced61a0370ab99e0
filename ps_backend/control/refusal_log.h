// The latest refusals a shard answered for a reason of its own (a job's claim, a control line, too few workers, a
// degraded shard, a command parked past its deadline), for the status page's /refusals/recent: a client whose
// command failed reads the newest entry with its own initiator name and tells its user why in words.
// Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "contract/lu_role.h"
#include "ps_backend/rounds/worker_ref.h"

namespace blockps {

struct RefusalEntry {
  std::string iqn;            // the sender's initiator name ("" when unknown)
  std::uint64_t session = 0;  // its I_T nexus (tgt's itn_id)
  LuRole lu = LuRole::grad;
  std::string reason;  // one sentence: what was refused, why (naming the shard and what it counts), what to change
  std::uint64_t unix_ms = 0;  // the latest time it was refused
  std::uint64_t count = 1;    // times refused since the entry was made
};

class RefusalLog {
 public:
  /// Keeps the `capacity` latest entries.
  explicit RefusalLog(std::size_t capacity);

  /// A refusal of a command of `who` to LU `lu`. An entry for the same sender, LU and reason moves to the end
  /// and counts one more (a refused job repeats its commands: it must not push every other entry out).
  void add(const WorkerRef& who, LuRole lu, std::string reason);
  /// Oldest first.
  std::vector<RefusalEntry> recent() const;

 private:
  const std::size_t capacity_;
  mutable std::mutex mutex_;
  std::vector<RefusalEntry> entries_;  // oldest first
};

}  // namespace blockps
