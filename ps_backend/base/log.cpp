#include "ps_backend/base/log.h"

#include <atomic>
#include <cstdio>
#include <string>

namespace blockps {
namespace {
void stderr_sink(const char* line) { std::fprintf(stderr, "%s\n", line); }
std::atomic<LogSink> g_sink{stderr_sink};
}  // namespace

void set_log_sink(LogSink sink) { g_sink.store(sink ? sink : stderr_sink); }

void log_line(std::string_view line) {
  const std::string text = "blockps: " + std::string(line);
  g_sink.load()(text.c_str());
}

void log_line_noexcept(const char* what, const char* detail) noexcept {
  try {
    log_line(std::string(what) + detail);
  } catch (...) {
    g_sink.load()("blockps: (out of memory while logging an error)");
  }
}

}  // namespace blockps
