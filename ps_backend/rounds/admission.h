// The vocabulary of the rounds (rounds.h) shared with the glue: who sent a grad-LU command, and what the glue
// does with it now.
#pragma once

#include <cstdint>
#include <string>

namespace blockps {

/// A worker is one I_T nexus (session): tid + itn locate it in tgt, iqn names it.
struct WorkerRef {
  int tid = 0;
  std::uint64_t itn = 0;
  std::string iqn;
};

/// What the glue does with a command now.
enum class Admission {
  run,       // queue it to the I/O threads
  park,      // hold it (tgt's asynchronous completion); it comes back through process_parked
  not_ready  // fail it: CHECK CONDITION, NOT READY, ASC/ASCQ 0x04/0x03 (see degraded_reason())
};

}  // namespace blockps
