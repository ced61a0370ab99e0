// contract/log.h: a log line goes to the sink its host chose (libblockps's caller: blockps_set_log or
// set_log_sink), or to stderr where none was chosen, whole and prefixed.
#include <gtest/gtest.h>

#include <mutex>
#include <string>
#include <vector>

#include "contract/log.h"

namespace blockps {
namespace {

std::mutex g_lines_mutex;
std::vector<std::string> g_lines;

void capture(const char* line) {
  std::lock_guard lock(g_lines_mutex);
  g_lines.emplace_back(line);
}

TEST(LogSink, StderrWithoutASinkTheCallersSinkOnceSetAndStderrAgainAfterNull) {
  ::testing::internal::CaptureStderr();
  log_line("shard 'shard1' grad LU: session lost and logged in again (1)");
  EXPECT_EQ(::testing::internal::GetCapturedStderr(),
            "blockps: shard 'shard1' grad LU: session lost and logged in again (1)\n");

  g_lines.clear();
  set_log_sink(capture);
  ::testing::internal::CaptureStderr();
  log_line("to the sink");
  log_line_noexcept("trace t.json not completely written: ", "No space left on device");
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "") << "a line went to stderr although a sink was set";
  EXPECT_EQ(g_lines,
            (std::vector<std::string>{"blockps: to the sink",
                                      "blockps: trace t.json not completely written: No space left on device"}));

  set_log_sink(nullptr);
  ::testing::internal::CaptureStderr();
  log_line("back");
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "blockps: back\n");
  EXPECT_EQ(g_lines.size(), 2u);
}

}  // namespace
}  // namespace blockps
