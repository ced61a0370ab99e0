// A scratch directory for a fuzz target's files (a checkpoint path, a file to load), removed at exit.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace blockps::fuzz {

struct FuzzDir {
  std::string path;
  // Under `parent` (/dev/shm for a target that writes checkpoints on every input: no disk flush), else /tmp.
  explicit FuzzDir(const char* name, const char* parent = "/tmp") {
    for (const char* dir : {parent, "/tmp"}) {
      std::string pattern = std::string(dir) + "/blockps-fuzz-" + name + "-XXXXXX";
      if (::mkdtemp(pattern.data()) != nullptr) {
        path = pattern;
        return;
      }
    }
    std::perror("mkdtemp");
    std::abort();
  }
  ~FuzzDir() { std::filesystem::remove_all(path); }
  FuzzDir(const FuzzDir&) = delete;
  FuzzDir& operator=(const FuzzDir&) = delete;
};

}  // namespace blockps::fuzz
