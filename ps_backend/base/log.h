// One log line from the PS core. Inside tgtd the glue routes it to tgtd's log (eprintf), elsewhere stderr.
#pragma once

#include <string_view>

namespace blockps {

using LogSink = void (*)(const char* line);
void set_log_sink(LogSink sink);
/// Thread-safe; prefixes "blockps: ".
void log_line(std::string_view line);
/// For catch handlers and destructors: never throws (falls back to a fixed text when allocation fails).
void log_line_noexcept(const char* what, const char* detail) noexcept;

}  // namespace blockps
