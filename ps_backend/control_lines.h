// The control lines a status LU WRITE carries (contract/control_lines.h): parsed and checked here, applied by
// ServedShard::control. docs/OPTIONS.md, "Control writes".
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "contract/status.h"

namespace blockps {

struct ControlAction {
  enum class Kind { set_lr, checkpoint, reset_rounds } kind;
  float lr = 0;      // set_lr
  std::string line;  // as written, for the log
};

/// `key=value` or `key` lines; blank lines and `#` comments are skipped; the data may be NUL-padded. Every line
/// is checked before any is applied: a refusal (invalid_argument) names the line and what is known. At least one
/// action is required.
Result<std::vector<ControlAction>> parse_control_lines(std::string_view text);

}  // namespace blockps
