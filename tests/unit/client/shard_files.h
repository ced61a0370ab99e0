// Shards as regular files standing in for their LUs (the posix transport: O_DIRECT on a file as on a block device),
// for the client's unit tests of what reads and writes a shard's LUs without a tgtd: grad and weights files of a
// size, and a status file holding a page (NUL-padded, as the status LU serves it).
#pragma once

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

namespace blockps {

class ShardFiles {
 public:
  ShardFiles() {
    char folder[] = "/tmp/blockps-shard-files-XXXXXX";
    const char* made = ::mkdtemp(folder);
    folder_ = made != nullptr ? made : "";
  }
  ~ShardFiles() {
    if (!folder_.empty()) std::filesystem::remove_all(folder_);
  }
  ShardFiles(const ShardFiles&) = delete;
  ShardFiles& operator=(const ShardFiles&) = delete;

  const std::string& folder() const { return folder_; }
  std::string path(const std::string& shard, const std::string& role) const {
    return folder_ + "/" + shard + "." + role;
  }
  // Shard `name`'s three LUs: grad and weights of `bytes`, a status LU of 4 KiB whose page says `page`.
  void make(const std::string& name, std::uint64_t bytes, const std::string& page) const {
    for (const char* role : {"grad", "weights"}) {
      std::ofstream(path(name, role)).close();
      std::filesystem::resize_file(path(name, role), bytes);
    }
    std::string padded = page;
    padded.resize(4096, '\0');
    std::ofstream(path(name, "status"), std::ios::binary) << padded;
  }
  // The [[shard]] table of a cluster file for shard `name`.
  std::string shard_table(const std::string& name) const {
    std::string text = "[[shard]]\nname = \"" + name + "\"\n";
    for (const char* role : {"grad", "weights", "status"})
      text += std::string(role) + " = \"" + path(name, role) + "\"\n";
    return text;
  }
  // Whether this file system takes O_DIRECT (the posix transport's), which tmpfs of older kernels does not.
  bool direct_io_works() const {
    make("probe", 512, "{}");
    const int fd = ::open(path("probe", "grad").c_str(), O_RDWR | O_DIRECT);
    if (fd < 0) return false;
    ::close(fd);
    return true;
  }

 private:
  std::string folder_;
};

}  // namespace blockps
