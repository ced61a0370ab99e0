#include "tests/support/temp_dir.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <vector>

namespace blockps::testing {

TempDir::~TempDir() { remove_now(); }

TempDir::TempDir(TempDir&& other) noexcept : path_(std::move(other.path_)), keep_(other.keep_) { other.path_.clear(); }

TempDir& TempDir::operator=(TempDir&& other) noexcept {
  if (this != &other) {
    remove_now();
    path_ = std::move(other.path_);
    keep_ = other.keep_;
    other.path_.clear();
  }
  return *this;
}

Status TempDir::create(const std::string& prefix, const std::string& parent) {
  remove_now();
  const char* tmp = std::getenv("TMPDIR");
  std::string base = !parent.empty() ? parent : (tmp != nullptr && *tmp != '\0') ? tmp : "/tmp";
  std::string templ = base + "/" + prefix + "XXXXXX";
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr) {
    return Status::Error("mkdtemp(" + templ + "): " + std::strerror(errno));
  }
  path_ = buf.data();
  // tgtd splits its backing-store argument on ',' (docs/ARCHITECTURE.md, "Facts about tgt"): a comma in TMPDIR would
  // break every LUN.
  if (path_.find(',') != std::string::npos) {
    std::string bad = path_;
    remove_now();
    return Status::Error("temporary directory " + bad + " contains a ',' which tgtd cannot take in a path");
  }
  return Status::Ok();
}

void TempDir::remove_now() {
  if (path_.empty()) return;
  if (!keep_ && std::getenv("BLOCKPS_KEEP_TMP") == nullptr) {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);  // best effort: a destructor has no one to tell
  }
  path_.clear();
  keep_ = false;
}

Status make_file(const std::string& path, unsigned long long bytes) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::Error("open(" + path + "): " + std::strerror(errno));
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    std::string msg = "ftruncate(" + path + ", " + std::to_string(bytes) + "): " + std::strerror(errno);
    ::close(fd);
    return Status::Error(msg);
  }
  ::close(fd);
  return Status::Ok();
}

}  // namespace blockps::testing
