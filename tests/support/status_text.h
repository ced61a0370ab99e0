// Tests compare a Status or Result with "" (ok) or search its message: error_text gives "" when ok, else the
// message, so an assertion's failure prints the reason.
#pragma once

#include <string>

#include "contract/result.h"

namespace blockps {

inline std::string error_text(const Status& status) { return status.ok() ? std::string() : status.message(); }
template <class T>
std::string error_text(const Result<T>& result) {
  return result.ok() ? std::string() : result.message();
}

}  // namespace blockps
