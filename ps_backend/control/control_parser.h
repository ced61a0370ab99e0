// The control lines a status LU WRITE carries (contract/control_lines.h): parsed and checked here, applied by
// ServedShard::control. docs/OPTIONS.md, "Control writes" and "Jobs and places".
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "contract/place.h"
#include "contract/result.h"

namespace blockps {

/// A line that acts on the shard once its job and place lines passed (lr=, checkpoint, reset-rounds, init-weights,
/// init-done).
struct ControlAction {
  enum class Kind { set_lr, checkpoint, reset_rounds, init_weights, init_done } kind;
  float lr = 0;      // set_lr
  std::string line;  // as written, for the log
};

/// One control write, in the order the shard applies it: the job lines, then the place, then the actions as
/// written.
struct ControlWrite {
  std::optional<std::string> job;  // job=NAME
  bool takeover = false;           // with job
  bool release = false;            // never with job
  std::optional<Place> place;      // place=MODEL INDEX/COUNT LAYOUT
  bool replace_place = false;      // with place
  std::vector<ControlAction> actions;
};

/// `key=value` or `key` lines; blank lines and `#` comments are skipped; the data may be NUL-padded. Every line
/// is checked before any is applied: a refusal (invalid_argument) names the line and what is allowed. At least one
/// line is required; job= and place= at most once each; takeover only with job=, replace-place only with place=,
/// release not with job=.
Result<ControlWrite> parse_control_lines(std::string_view text);

}  // namespace blockps
