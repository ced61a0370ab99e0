#include "ps_backend/control/control_parser.h"

#include "contract/blanks.h"
#include "contract/control_lines.h"
#include "ps_backend/config/lu_options.h"

namespace blockps {
namespace {

Status refuse(std::string why) { return Status::Error(StatusCode::invalid_argument, std::move(why)); }

}  // namespace

Result<ControlWrite> parse_control_lines(std::string_view text) {
  // The page is NUL-padded to whole blocks by whoever writes it.
  text = text.substr(0, std::min(text.size(), text.find('\0')));
  ControlWrite write;
  bool any = false;
  while (!text.empty()) {
    const auto nl = text.find('\n');
    const std::string_view line = trim_blanks(text.substr(0, nl));
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    if (line.empty() || line.front() == '#') continue;
    any = true;
    const auto eq = line.find('=');
    const std::string_view key = trim_blanks(line.substr(0, eq));
    const bool bare = eq == std::string_view::npos;
    const std::string_view value = bare ? std::string_view{} : trim_blanks(line.substr(eq + 1));
    if (key == control::kLr) {
      // The bsopts table is the one definition of what lr accepts.
      const Result<LuOptions> parsed = parse_lu_options("role=grad;lr=" + std::string(value), 512);
      if (!parsed.ok()) return refuse("control " + std::string(line) + ": " + parsed.message());
      write.actions.push_back({ControlAction::Kind::set_lr, parsed->config.optimizer.lr, std::string(line)});
    } else if (key == control::kCheckpoint && bare) {
      write.actions.push_back({ControlAction::Kind::checkpoint, 0, std::string(line)});
    } else if (key == control::kResetRounds && bare) {
      write.actions.push_back({ControlAction::Kind::reset_rounds, 0, std::string(line)});
    } else if (key == control::kInitWeights && bare) {
      write.actions.push_back({ControlAction::Kind::init_weights, 0, std::string(line)});
    } else if (key == control::kInitDone && bare) {
      write.actions.push_back({ControlAction::Kind::init_done, 0, std::string(line)});
    } else if (key == control::kJob && !bare) {
      if (write.job) return refuse("control " + std::string(line) + ": job= is given twice in one write");
      if (!control::is_name(value))
        return refuse("control " + std::string(line) + ": a job name is " + std::string(control::kNameRule));
      write.job = std::string(value);
    } else if (key == control::kTakeover && bare) {
      write.takeover = true;
    } else if (key == control::kRelease && bare) {
      write.release = true;
    } else if (key == control::kPlace && !bare) {
      if (write.place) return refuse("control " + std::string(line) + ": place= is given twice in one write");
      Result<Place> place = parse_place(value);
      if (!place.ok()) return refuse("control " + place.message());
      write.place = std::move(place).value();
    } else if (key == control::kReplacePlace && bare) {
      write.replace_place = true;
    } else {
      return refuse("control '" + std::string(line) + "': unknown (known: " + std::string(control::kKnown) + ")");
    }
  }
  if (!any) return refuse("control: no key=value line in the data written");
  if (write.takeover && !write.job)
    return refuse("control takeover: only together with job=NAME in the same write (the job that takes the shard)");
  if (write.replace_place && !write.place)
    return refuse("control replace-place: only together with place=MODEL INDEX/COUNT LAYOUT in the same write");
  if (write.release && write.job)
    return refuse("control release: not together with job=" + *write.job +
                  " (to move the shard to another job in one write, send job=NAME and takeover)");
  return write;
}

}  // namespace blockps
