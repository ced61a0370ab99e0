// client/trace.cpp: BLOCKPS_TRACE turns a worker's trace on (off when unset or empty, an error naming the file
// when it cannot be created), each trace is PREFIX.PID.N.json, and the file is a Chrome trace-event array: the
// training loop's lane named first, then lane names, spans and commands as complete ("X") events in microseconds of
// the steady clock, written whole from any thread.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "client/trace.h"

namespace blockps {
namespace {

using namespace std::chrono_literals;

// BLOCKPS_TRACE set for a test, a temporary folder for its files; both undone after it.
class TraceTest : public ::testing::Test {
 protected:
  TraceTest() {
    char folder[] = "/tmp/blockps-trace-test-XXXXXX";
    folder_ = ::mkdtemp(folder);
  }
  ~TraceTest() override {
    ::unsetenv(Trace::kEnvironmentVariable);
    std::filesystem::remove_all(folder_);
  }
  std::unique_ptr<Trace> open(const std::string& prefix) {
    ::setenv(Trace::kEnvironmentVariable, prefix.c_str(), 1);
    auto trace = Trace::from_environment();
    EXPECT_TRUE(trace.ok()) << trace.message();
    EXPECT_NE(trace.ok() ? trace.value().get() : nullptr, nullptr);
    return trace.ok() ? std::move(trace.value()) : nullptr;
  }
  static nlohmann::json events_in(const std::string& path) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    return nlohmann::json::parse(text.str());  // throws (fails the test) unless it is whole JSON
  }
  std::string folder_;
};

TEST_F(TraceTest, OffWhenTheVariableIsUnsetOrEmpty) {
  ::unsetenv(Trace::kEnvironmentVariable);
  auto unset = Trace::from_environment();
  ASSERT_TRUE(unset.ok());
  EXPECT_EQ(unset.value(), nullptr);
  ::setenv(Trace::kEnvironmentVariable, "", 1);
  auto empty = Trace::from_environment();
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty.value(), nullptr);
}

TEST_F(TraceTest, EachTraceIsPrefixPidNumberJsonCountingUp) {
  const std::string prefix = folder_ + "/run";
  auto first = open(prefix);
  auto second = open(prefix);
  ASSERT_TRUE(first && second);
  const std::regex name(std::regex_replace(prefix, std::regex(R"([.^$|()\[\]{}*+?\\])"), R"(\$&)") + "\\." +
                        std::to_string(::getpid()) + "\\.([0-9]+)\\.json");
  std::smatch a, b;
  ASSERT_TRUE(std::regex_match(first->path(), a, name)) << first->path();
  ASSERT_TRUE(std::regex_match(second->path(), b, name)) << second->path();
  EXPECT_EQ(std::stoi(b[1]), std::stoi(a[1]) + 1);
  EXPECT_TRUE(std::filesystem::exists(first->path()));
  EXPECT_TRUE(std::filesystem::exists(second->path()));
}

TEST_F(TraceTest, AFileThatCannotBeCreatedIsAConfigErrorNamingIt) {
  ::setenv(Trace::kEnvironmentVariable, (folder_ + "/no-such-folder/run").c_str(), 1);
  auto trace = Trace::from_environment();
  ASSERT_FALSE(trace.ok());
  EXPECT_EQ(trace.status().code(), StatusCode::config);
  const std::regex message("BLOCKPS_TRACE: cannot create " + folder_ + "/no-such-folder/run\\." +
                           std::to_string(::getpid()) + "\\.[0-9]+\\.json: No such file or directory");
  EXPECT_TRUE(std::regex_match(trace.message(), message)) << trace.message();
}

TEST(TraceLanes, TheLoopThenOneLanePerShardAndTheCommandsApart) {
  EXPECT_EQ(Trace::kLoopLane, 0);
  EXPECT_EQ(Trace::shard_lane(0), 1);
  EXPECT_EQ(Trace::shard_lane(5), 6);
  EXPECT_EQ(Trace::command_lane(0), 1000);
  EXPECT_EQ(Trace::command_lane(7), 1007);
}

TEST_F(TraceTest, WritesTheEventsAsATraceEventArray) {
  auto trace = open(folder_ + "/t");
  ASSERT_TRUE(trace);
  const std::string path = trace->path();
  const Trace::Clock::time_point t0 = Trace::Clock::now();
  const auto micros = [](Trace::Clock::time_point t) {
    return std::chrono::duration<double, std::micro>(t.time_since_epoch()).count();
  };
  trace->name_lane(Trace::shard_lane(0), "shard s0");
  trace->span("push", Trace::shard_lane(0), t0, t0 + 250us, 4096);
  trace->span("compute", Trace::kLoopLane, t0, t0 + 1500ns);
  std::vector<std::byte> memory(2048);
  LuCommand write{IoDirection::write, 8192, {{memory.data(), 512}, {memory.data() + 512, 1024}}};
  LuCommand read{IoDirection::read, 0, {{memory.data(), 2048}}};
  trace->command(Trace::command_lane(0), write, t0, t0 + 2ms);
  trace->command(Trace::command_lane(0), read, t0 + 1ms, t0 + 3ms);
  trace.reset();  // closes the array

  const nlohmann::json events = events_in(path);
  ASSERT_TRUE(events.is_array());
  ASSERT_EQ(events.size(), 6u) << events.dump(1);
  const long pid = ::getpid();
  const auto lane_name = [pid](int lane, const char* name) {
    return nlohmann::json{
        {"name", "thread_name"}, {"ph", "M"}, {"pid", pid}, {"tid", lane}, {"args", {{"name", name}}}};
  };
  // A complete event; args added where the event has them.
  const auto complete = [pid](const char* name, const char* category, double ts, double dur, int lane) {
    return nlohmann::json{{"name", name}, {"cat", category}, {"ph", "X"},  {"ts", ts},
                          {"dur", dur},   {"pid", pid},      {"tid", lane}};
  };
  EXPECT_EQ(events[0], lane_name(0, "training loop (compute, wait)"));
  EXPECT_EQ(events[1], lane_name(1, "shard s0"));
  nlohmann::json push = complete("push", "blockps", micros(t0), 250.0, 1);
  push["args"] = {{"bytes", 4096}};
  EXPECT_EQ(events[2], push);
  EXPECT_EQ(events[3], complete("compute", "blockps", micros(t0), 1.5, 0));  // no bytes: no args
  nlohmann::json write_event = complete("WRITE", "command", micros(t0), 2000.0, 1000);
  write_event["args"] = {{"bytes", 1536}, {"lu_offset", 8192}};
  EXPECT_EQ(events[4], write_event);
  EXPECT_EQ(events[5]["name"], "READ");
  EXPECT_EQ(events[5]["ts"], micros(t0 + 1ms));
  EXPECT_EQ(events[5]["args"], (nlohmann::json{{"bytes", 2048}, {"lu_offset", 0}}));
}

TEST_F(TraceTest, EventsFromManyThreadsAreEachWrittenWhole) {
  auto trace = open(folder_ + "/threads");
  ASSERT_TRUE(trace);
  const std::string path = trace->path();
  constexpr int kThreads = 8, kSpans = 500;
  {
    std::vector<std::jthread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&trace, t] {
        const auto now = Trace::Clock::now();
        for (int i = 0; i < kSpans; ++i)
          trace->span("exchange " + std::to_string(i), Trace::shard_lane(t), now, now + 1us, i + 1);
      });
    }
  }
  trace.reset();
  const nlohmann::json events = events_in(path);
  ASSERT_EQ(events.size(), 1u + kThreads * kSpans);
  std::vector<int> per_lane(kThreads + 1);
  for (const auto& e : events) ++per_lane[e["tid"].get<int>()];
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(per_lane[Trace::shard_lane(t)], kSpans) << "lane " << t;
}

TEST_F(TraceTest, OneEventALineBetweenTheArraysBrackets) {
  auto trace = open(folder_ + "/lines");
  ASSERT_TRUE(trace);
  const std::string path = trace->path();
  trace->span("pull", 1, Trace::Clock::now(), Trace::Clock::now());
  trace.reset();
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 4u);  // "[", the loop's lane name, the span, "]"
  EXPECT_EQ(lines[0], "[");
  EXPECT_TRUE(lines[1].starts_with("{") && lines[1].ends_with("},")) << lines[1];
  EXPECT_TRUE(lines[2].starts_with("{") && lines[2].ends_with("}")) << lines[2];
  EXPECT_EQ(lines[3], "]");
}

}  // namespace
}  // namespace blockps
