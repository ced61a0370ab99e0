#include "ps_backend/config/round_policy.h"

namespace blockps {

std::string_view to_string(RoundPolicy::Mode m) {
  switch (m) {
    case RoundPolicy::Mode::async:
      return "async";
    case RoundPolicy::Mode::sync:
      return "sync";
    case RoundPolicy::Mode::ssp:
      return "ssp";
  }
  return "?";
}

std::string to_string(const RoundPolicy& p) {
  return p.mode == RoundPolicy::Mode::ssp ? "ssp:" + std::to_string(p.staleness) : std::string(to_string(p.mode));
}

}  // namespace blockps
