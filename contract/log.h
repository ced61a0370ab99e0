// One log line of blockps, on either side: the PS core (inside tgtd the glue routes it to tgtd's log, eprintf) and
// libblockps (the caller chooses: blockps_set_log in the C API, set_log_sink in C++). Where no sink was set: stderr.
// Header-only, so that each library (the tgt module, libblockps) holds its own sink.
#pragma once

#include <atomic>
#include <cstdio>
#include <string>
#include <string_view>

namespace blockps {

/// Takes one NUL-terminated line without a newline, from any thread (the library's I/O threads too).
using LogSink = void (*)(const char* line);

namespace detail {
inline void stderr_sink(const char* line) { std::fprintf(stderr, "%s\n", line); }
inline std::atomic<LogSink> g_log_sink{stderr_sink};
}  // namespace detail

/// Where log lines go from now on; nullptr: stderr again.
inline void set_log_sink(LogSink sink) { detail::g_log_sink.store(sink ? sink : detail::stderr_sink); }

/// Thread-safe; prefixes "blockps: ".
inline void log_line(std::string_view line) {
  const std::string text = "blockps: " + std::string(line);
  detail::g_log_sink.load()(text.c_str());
}

/// For catch handlers and destructors: never throws (falls back to a fixed text when allocation fails).
inline void log_line_noexcept(const char* what, const char* why) noexcept {
  try {
    log_line(std::string(what) + why);
  } catch (...) {
    detail::g_log_sink.load()("blockps: (out of memory while logging an error)");
  }
}

}  // namespace blockps
