// Helpers for the PS core's unit tests: temp dirs and shards built from bsopts strings.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "ps_backend/config/lu_options.h"
#include "ps_backend/shard/served_shard.h"
#include "tests/support/status_text.h"

namespace blockps::unit {

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/blockps-unit-XXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline LuOptions options(const std::string& bsopts) {
  auto r = parse_lu_options(bsopts, 512);
  if (!r.ok()) {
    ADD_FAILURE() << bsopts << ": " << r.message();
    return {};
  }
  return std::move(r).value();
}

inline std::shared_ptr<ServedShard> make_shard(const std::string& path, const std::string& bsopts) {
  auto r = ServedShard::create(path, options(bsopts));
  if (!r.ok()) {
    ADD_FAILURE() << bsopts << ": " << r.message();
    return nullptr;
  }
  return std::move(r).value();
}

}  // namespace blockps::unit
