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
  explicit FuzzDir(const char* name) {
    std::string pattern = std::string("/tmp/blockps-fuzz-") + name + "-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) {
      std::perror("mkdtemp");
      std::abort();
    }
    path = pattern;
  }
  ~FuzzDir() { std::filesystem::remove_all(path); }
  FuzzDir(const FuzzDir&) = delete;
  FuzzDir& operator=(const FuzzDir&) = delete;
};

}  // namespace blockps::fuzz
