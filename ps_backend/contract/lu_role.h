// The worker-PS contract: the three LUs of a shard. Header-only and dependency-free, so that the tgt module and
// the client library (which links nothing of the server) include the same definition (docs/ARCHITECTURE.md,
// "The contract between worker and PS").
#pragma once

#include <string_view>

namespace blockps {

/// What an LU of a shard serves: a WRITE of `grad` is a push and its READ a pull, `weights` is read and
/// assigned, `status` carries the status page (READ) and control lines (WRITE).
enum class LuRole { grad, weights, status };

constexpr std::string_view to_string(LuRole role) {
  switch (role) {
    case LuRole::grad:
      return "grad";
    case LuRole::weights:
      return "weights";
    case LuRole::status:
      return "status";
  }
  return "?";
}

}  // namespace blockps
