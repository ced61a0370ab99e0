// A private scratch directory for one test or benchmark run, removed with everything in it when the object
// goes away (unless BLOCKPS_KEEP_TMP is set in the environment, to look at what a failed run left).
#pragma once

#include <string>

#include "tests/support/process.h"

namespace blockps::testing {

class TempDir {
 public:
  TempDir() = default;
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  TempDir(TempDir&& other) noexcept;
  TempDir& operator=(TempDir&& other) noexcept;

  // Creates ${TMPDIR:-/tmp}/<prefix>XXXXXX (mode 0700), or <parent>/<prefix>XXXXXX when parent is given.
  Status create(const std::string& prefix = "blockps-", const std::string& parent = "");
  // The directory (empty before create()); path("x") is "<dir>/x".
  const std::string& path() const { return path_; }
  std::string path(const std::string& name) const { return path_ + "/" + name; }
  // Leaves the directory in place when this object is destroyed.
  void keep() { keep_ = true; }

 private:
  void remove_now();
  std::string path_;
  bool keep_ = false;
};

// Creates (or truncates) a file of `bytes` bytes (sparse); for rdwr LUNs and checkpoint files.
Status make_file(const std::string& path, unsigned long long bytes);

}  // namespace blockps::testing
