// Who sent a grad-LU command: the worker as the rounds know it (its session in tgt, its initiator name).
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

}  // namespace blockps
