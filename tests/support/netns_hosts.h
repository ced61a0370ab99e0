// Hosts as network namespaces for multi-host tests: namespaces "bps<pid>-<host>" joined by veth links to a
// bridge in a "switch" namespace, created and removed by the test; and a thread that lives in one host's
// namespace (tgtd must be forked from a thread that outlives it). Needs root and `ip netns`.
#pragma once

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/process.h"

namespace blockps::testing {

inline constexpr const char* kNetnsSubnetPrefix = "10.213.77.";

// The hosts of one test: namespaces "bps<pid>-<host>" and a bridge in "bps<pid>-sw". Everything it made is
// removed when it goes away (deleting a namespace deletes the veth ends inside it, and with them their peers).
class Hosts {
 public:
  ~Hosts() {
    for (const std::string& ns : namespaces_) run_command({"ip", "netns", "del", ns});
  }

  Status add_switch() {
    switch_ = prefix() + "sw";
    if (Status s = ip({"netns", "add", switch_}); !s.ok()) return s;
    namespaces_.push_back(switch_);
    if (Status s = ip({"-n", switch_, "link", "add", "br0", "type", "bridge"}); !s.ok()) return s;
    return ip({"-n", switch_, "link", "set", "br0", "up"});
  }

  // A host namespace `name` with address kNetnsSubnetPrefix + host_number on the bridge.
  Status add_host(const std::string& name, int host_number) {
    const std::string ns = prefix() + name;
    if (Status s = ip({"netns", "add", ns}); !s.ok()) return s;
    namespaces_.push_back(ns);
    const std::string here = "bp" + std::to_string(::getpid()) + "h" + std::to_string(host_number);
    const std::string there = "bp" + std::to_string(::getpid()) + "s" + std::to_string(host_number);
    for (const std::vector<std::string>& args :
         std::vector<std::vector<std::string>>{{"link", "add", here, "type", "veth", "peer", "name", there},
                                               {"link", "set", here, "netns", ns},
                                               {"link", "set", there, "netns", switch_},
                                               {"-n", switch_, "link", "set", there, "master", "br0"},
                                               {"-n", switch_, "link", "set", there, "up"},
                                               {"-n", ns, "addr", "add", address(host_number) + "/24", "dev", here},
                                               {"-n", ns, "link", "set", here, "up"},
                                               {"-n", ns, "link", "set", "lo", "up"}}) {
      if (Status s = ip(args); !s.ok()) {
        run_command({"ip", "link", "del", here});  // in case it never left the test's namespace
        return s;
      }
    }
    return Status::Ok();
  }

  // Takes host `name`'s link to the switch down or up (a cable pulled: no FIN, no RST reaches either side).
  Status set_link(const std::string& name, int host_number, bool up) {
    const std::string here = "bp" + std::to_string(::getpid()) + "h" + std::to_string(host_number);
    return ip({"-n", prefix() + name, "link", "set", here, up ? "up" : "down"});
  }

  static std::string address(int host_number) { return kNetnsSubnetPrefix + std::to_string(host_number); }
  static std::string prefix() { return "bps" + std::to_string(::getpid()) + "-"; }

  // Runs fn on a fresh thread that has entered host `name`'s namespace (threads it starts stay there).
  template <class Fn>
  static Status run_in(const std::string& name, Fn fn) {
    Status outcome = Status::Ok();
    std::thread t([&] {
      outcome = enter(name);
      if (outcome.ok()) outcome = fn();
    });
    t.join();
    return outcome;
  }

  // Moves the calling thread into host `name`'s namespace.
  static Status enter(const std::string& name) {
    const std::string path = "/var/run/netns/" + prefix() + name;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || ::setns(fd, CLONE_NEWNET) != 0) {
      const int err = errno;
      if (fd >= 0) ::close(fd);
      return Status::Error("cannot enter " + path + ": " + std::strerror(err));
    }
    ::close(fd);
    return Status::Ok();
  }

 private:
  static Status ip(const std::vector<std::string>& args) {
    std::vector<std::string> argv{"ip"};
    argv.insert(argv.end(), args.begin(), args.end());
    const CommandResult r = run_command(argv);
    if (!r.ok()) return Status::Error(r.describe());
    return Status::Ok();
  }

  std::string switch_;
  std::vector<std::string> namespaces_;
};

// A thread that lives in one host's namespace for the whole test and runs what it is given there. tgtd must
// be started (forked) from a thread that outlives it: TgtdInstance's child asks for SIGKILL when the thread
// that forked it exits (PR_SET_PDEATHSIG follows the thread, not the process).
class HostThread {
 public:
  explicit HostThread(std::string host) : thread_([this, host = std::move(host)] { serve(host); }) {}
  ~HostThread() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  // Runs fn on the host's thread and returns its outcome.
  Status run(std::function<Status()> fn) {
    std::unique_lock lock(mutex_);
    task_ = std::move(fn);
    cv_.notify_all();
    cv_.wait(lock, [&] { return !task_; });
    return outcome_;
  }

 private:
  void serve(const std::string& host) {
    const Status entered = Hosts::enter(host);
    std::unique_lock lock(mutex_);
    for (;;) {
      cv_.wait(lock, [&] { return stopping_ || task_; });
      if (stopping_ && !task_) return;
      outcome_ = entered.ok() ? task_() : entered;
      task_ = nullptr;
      cv_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable cv_;
  std::function<Status()> task_;
  Status outcome_ = Status::Ok();
  bool stopping_ = false;
  std::thread thread_;  // last: starts after the members it uses exist
};

}  // namespace blockps::testing
