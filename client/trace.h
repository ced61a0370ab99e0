// A worker's trace: when each shard's push, pull and exchange ran, and when the training loop computed and
// waited, as a Chrome trace-event file (open it in ui.perfetto.dev or chrome://tracing). On when the environment
// variable BLOCKPS_TRACE names a file prefix: each Cluster then writes PREFIX.PID.N.json (N counts the
// Clusters this process opened, from 0). Off otherwise: the Cluster holds no Trace and times nothing.
//
// Times ("ts") are microseconds of the monotonic clock (CLOCK_MONOTONIC, std::chrono::steady_clock), which every
// process of a host shares: the traces of several workers of one host (bench/cluster's network namespaces) line
// up without adjustment.
//
// Events are written as they happen (one buffered line each), so that a trace of a long run costs no memory and a
// run that dies still leaves a readable file (the trace-event array format allows a missing closing bracket).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "client/transport/lu_command.h"
#include "contract/result.h"

namespace blockps {

class Trace {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr const char* kEnvironmentVariable = "BLOCKPS_TRACE";
  // Lane 0 is the training loop's (compute, wait); shard i's I/O thread is lane i + 1.
  static constexpr int kLoopLane = 0;
  static int shard_lane(std::size_t shard) { return static_cast<int>(shard) + 1; }
  // Shard i's commands (each READ and WRITE from issue to completion, several in flight at once) are on lane
  // kCommandLanes + i, apart from the shard's lane, whose spans nest.
  static constexpr int kCommandLanes = 1000;
  static int command_lane(std::size_t shard) { return kCommandLanes + static_cast<int>(shard); }

  // The trace BLOCKPS_TRACE asks for: null when it is unset or empty; an error when the file cannot be created.
  static Result<std::unique_ptr<Trace>> from_environment();
  // Closes the event array and the file.
  ~Trace();
  Trace(const Trace&) = delete;
  Trace& operator=(const Trace&) = delete;

  const std::string& path() const { return path_; }
  // The name a viewer shows for a lane.
  void name_lane(int lane, std::string_view name);
  // One complete span. `bytes` (0: none) goes to the event's args.
  void span(std::string_view name, int lane, Clock::time_point begin, Clock::time_point end, std::uint64_t bytes = 0);
  // One command of a shard's LU, in category "command": name READ or WRITE, args bytes and lu_offset (bytes).
  void command(int lane, const LuCommand& command, Clock::time_point issued, Clock::time_point completed);

 private:
  Trace(std::string path, std::FILE* file);
  void write_event(const std::string& json);

  const std::string path_;
  const long pid_;
  std::mutex mutex_;
  std::FILE* file_;
  bool first_ = true;
};

}  // namespace blockps
