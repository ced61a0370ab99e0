#include "ps_backend/control_lines.h"

#include "contract/blanks.h"
#include "contract/control_lines.h"
#include "ps_backend/lu_options.h"

namespace blockps {
namespace {

Status refuse(std::string why) { return Status::Error(StatusCode::invalid_argument, std::move(why)); }

}  // namespace

Result<std::vector<ControlAction>> parse_control_lines(std::string_view text) {
  // The page is NUL-padded to whole blocks by whoever writes it.
  text = text.substr(0, std::min(text.size(), text.find('\0')));
  std::vector<ControlAction> actions;
  while (!text.empty()) {
    const auto nl = text.find('\n');
    const std::string_view line = trim_blanks(text.substr(0, nl));
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    if (line.empty() || line.front() == '#') continue;
    const auto eq = line.find('=');
    const std::string_view key = line.substr(0, eq);
    if (key == control::kLr) {
      // The bsopts table is the one definition of what lr accepts.
      const std::string_view value = eq == std::string_view::npos ? std::string_view{} : line.substr(eq + 1);
      const Result<LuOptions> parsed = parse_lu_options("role=grad;lr=" + std::string(value), 512);
      if (!parsed.ok()) return refuse("control " + std::string(line) + ": " + parsed.message());
      actions.push_back({ControlAction::Kind::set_lr, parsed->config.optimizer.lr, std::string(line)});
    } else if (key == control::kCheckpoint && eq == std::string_view::npos) {
      actions.push_back({ControlAction::Kind::checkpoint, 0, std::string(line)});
    } else if (key == control::kResetRounds && eq == std::string_view::npos) {
      actions.push_back({ControlAction::Kind::reset_rounds, 0, std::string(line)});
    } else {
      return refuse("control '" + std::string(line) + "': unknown (known: " + std::string(control::kKnown) + ")");
    }
  }
  if (actions.empty()) return refuse("control: no key=value line in the data written");
  return actions;
}

}  // namespace blockps
