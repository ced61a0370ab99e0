#include "client/trace.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <utility>

#include "contract/log.h"

namespace blockps {

namespace {
std::atomic<int> traces_opened{0};

double microseconds(Trace::Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }
double timestamp(Trace::Clock::time_point t) { return microseconds(t.time_since_epoch()); }
}  // namespace

Result<std::unique_ptr<Trace>> Trace::from_environment() {
  const char* prefix = std::getenv(kEnvironmentVariable);
  if (prefix == nullptr || *prefix == '\0') return std::unique_ptr<Trace>();
  const std::string path = std::string(prefix) + "." + std::to_string(::getpid()) + "." +
                           std::to_string(traces_opened.fetch_add(1)) + ".json";
  std::FILE* file = std::fopen(path.c_str(), "w");
  if (file == nullptr)
    return Status::Error(StatusCode::config,
                         std::string(kEnvironmentVariable) + ": cannot create " + path + ": " + std::strerror(errno));
  return std::unique_ptr<Trace>(new Trace(path, file));
}

Trace::Trace(std::string path, std::FILE* file) : path_(std::move(path)), pid_(::getpid()), file_(file) {
  std::fputs("[\n", file_);
  name_lane(kLoopLane, "training loop (compute, wait)");
}

Trace::~Trace() {
  std::fputs("\n]\n", file_);
  if (std::fclose(file_) == 0) return;
  const char* why = std::strerror(errno);
  try {
    log_line("trace " + path_ + " not completely written: " + why);
  } catch (...) {  // a destructor: no exception leaves it
    log_line_noexcept("trace not completely written: ", why);
  }
}

void Trace::write_event(const std::string& json) {
  std::lock_guard lock(mutex_);
  if (!first_) std::fputs(",\n", file_);
  first_ = false;
  std::fputs(json.c_str(), file_);
}

void Trace::name_lane(int lane, std::string_view name) {
  write_event(nlohmann::json{
      {"name", "thread_name"}, {"ph", "M"}, {"pid", pid_}, {"tid", lane}, {"args", {{"name", std::string(name)}}}}
                  .dump());
}

void Trace::span(std::string_view name, int lane, Clock::time_point begin, Clock::time_point end, std::uint64_t bytes) {
  nlohmann::json event{{"name", std::string(name)},        {"cat", "blockps"}, {"ph", "X"},  {"ts", timestamp(begin)},
                       {"dur", microseconds(end - begin)}, {"pid", pid_},      {"tid", lane}};
  if (bytes != 0) event["args"] = {{"bytes", bytes}};
  write_event(event.dump());
}

void Trace::command(int lane, const LuCommand& command, Clock::time_point issued, Clock::time_point completed) {
  write_event(nlohmann::json{{"name", command.direction == IoDirection::write ? "WRITE" : "READ"},
                             {"cat", "command"},
                             {"ph", "X"},
                             {"ts", timestamp(issued)},
                             {"dur", microseconds(completed - issued)},
                             {"pid", pid_},
                             {"tid", lane},
                             {"args", {{"bytes", command.bytes()}, {"lu_offset", command.offset}}}}
                  .dump());
}

}  // namespace blockps
