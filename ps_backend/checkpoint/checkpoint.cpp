#include "ps_backend/checkpoint/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "contract/control_lines.h"
#include "ps_backend/config/lu_options.h"

namespace blockps {
namespace {

constexpr char kMagic[8] = {'B', 'L', 'K', 'P', 'S', 'C', 'K', '1'};
constexpr char kEndMagic[8] = {'B', 'L', 'K', 'P', 'S', 'E', 'N', 'D'};
// The header's format: 2 added job and place; a format 1 header is read as unclaimed with no place.
constexpr int kFormat = 2;
constexpr int kOldestFormat = 1;
constexpr std::uint32_t kMaxHeader = 1 << 20;

// An operating-system failure on `path`, with errno's text.
Status os_error(const std::string& what, const std::string& path) {
  const int err = errno;  // before the strings below allocate
  return Status::Error(StatusCode::io, what + " " + path + ": " + errno_message(err));
}

// The file is there and readable but is not a checkpoint this shard can use.
Status bad_file(std::string why) { return Status::Error(StatusCode::invalid_argument, std::move(why)); }

// All of [p, p+n) to `fd`; false with errno set when a write fails.
bool write_all(int fd, const char* p, std::size_t n) {
  while (n) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w, n -= static_cast<std::size_t>(w);
  }
  return true;
}

// Buffered sequential writer that keeps a running CRC of everything written.
class CrcWriter {
 public:
  explicit CrcWriter(int fd) : fd_(fd) { buf_.reserve(kBuf); }
  bool put(const void* p, std::size_t n) {
    crc_ = crc32_z(crc_, static_cast<const Bytef*>(p), n);
    const auto* b = static_cast<const char*>(p);
    while (n) {
      const std::size_t take = std::min(n, kBuf - buf_.size());
      buf_.insert(buf_.end(), b, b + take);
      b += take, n -= take;
      if (buf_.size() == kBuf && !flush()) return false;
    }
    return true;
  }
  bool put_raw(const void* p, std::size_t n) {  // not covered by the CRC (the trailer itself)
    const uLong saved = crc_;
    const bool ok = put(p, n);
    crc_ = saved;
    return ok;
  }
  bool flush() {
    if (!write_all(fd_, buf_.data(), buf_.size())) return false;
    buf_.clear();
    return true;
  }
  std::uint32_t crc() const { return static_cast<std::uint32_t>(crc_); }

 private:
  static constexpr std::size_t kBuf = 1 << 20;
  int fd_;
  std::vector<char> buf_;
  uLong crc_ = crc32_z(0, nullptr, 0);
};

class CrcReader {
 public:
  explicit CrcReader(int fd) : fd_(fd) {}
  bool get(void* p, std::size_t n) {
    auto* b = static_cast<char*>(p);
    std::size_t left = n;
    while (left) {
      const ssize_t r = ::read(fd_, b, left);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return false;
      b += r, left -= static_cast<std::size_t>(r);
    }
    crc_ = crc32_z(crc_, static_cast<const Bytef*>(p), n);
    return true;
  }
  std::uint32_t crc() const { return static_cast<std::uint32_t>(crc_); }

 private:
  int fd_;
  uLong crc_ = crc32_z(0, nullptr, 0);
};

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

Result<CheckpointHeader> read_header(CrcReader& in, const std::string& path) {
  char magic[8];
  std::uint32_t len = 0;
  if (!in.get(magic, sizeof magic) || std::memcmp(magic, kMagic, sizeof magic) != 0)
    return bad_file(path + " is not a blockps checkpoint (bad magic)");
  if (!in.get(&len, sizeof len) || len == 0 || len > kMaxHeader)
    return bad_file(path + ": checkpoint header length " + std::to_string(len) + " is invalid");
  std::string text(len, '\0');
  if (!in.get(text.data(), len)) return bad_file(path + ": checkpoint truncated in its header");
  const auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return bad_file(path + ": checkpoint header is not JSON");
  // Each field is checked for its type before it is read: json::value() throws on a field of another type.
  const auto number = [&j](const char* key) -> std::optional<std::uint64_t> {
    const auto it = j.find(key);
    if (it == j.end() || !it->is_number_unsigned()) return std::nullopt;
    return it->get<std::uint64_t>();
  };
  const auto field_text = [&j](const char* key) { return j.contains(key) ? j[key].dump() : std::string("missing"); };
  const std::optional<std::uint64_t> format = number("format");
  if (!format || *format < kOldestFormat || *format > kFormat)
    return bad_file(path + ": checkpoint format " + field_text("format") + " is not " + std::to_string(kOldestFormat) +
                    ".." + std::to_string(kFormat) + " (written by a newer blockps?)");
  const auto options = j.find("options");
  if (options == j.end() || !options->is_string())
    return bad_file(path + ": checkpoint header's options are " + field_text("options") + ", not a string");
  const Result<LuOptions> opts = parse_lu_options("role=grad;" + options->get<std::string>(), 1);
  if (!opts.ok()) return bad_file(path + ": checkpoint options: " + opts.message());
  CheckpointHeader h;
  h.config = opts->config;
  if (j.contains("created")) {
    const auto created = number("created");
    if (!created)
      return bad_file(path + ": checkpoint header's created " + field_text("created") + " is not a Unix time");
    h.created_unix = *created;
  }
  if (const auto job = j.find("job"); job != j.end()) {
    if (!job->is_string() || !control::is_name(job->get<std::string>()))
      return bad_file(path + ": checkpoint header's job " + field_text("job") + " is not a job name");
    h.tenancy.job = job->get<std::string>();
    if (j.contains("claimed")) {
      const auto claimed = number("claimed");
      if (!claimed)
        return bad_file(path + ": checkpoint header's claimed " + field_text("claimed") + " is not a Unix time");
      h.tenancy.claimed_unix = *claimed;
    }
  }
  if (const auto place = j.find("place"); place != j.end()) {
    if (!place->is_string())
      return bad_file(path + ": checkpoint header's place " + field_text("place") + " is not text");
    Result<Place> parsed = parse_place(place->get<std::string>());
    if (!parsed.ok()) return bad_file(path + ": checkpoint header's " + parsed.message());
    h.tenancy.place = std::move(parsed).value();
  }
  if (Status geometry = check_geometry(h.config.geometry); !geometry.ok())
    return bad_file(path + ": " + geometry.message());
  if (number("blocks") != std::optional<std::uint64_t>(h.config.geometry.blocks()))
    return bad_file(path + ": checkpoint block count " + field_text("blocks") + " does not match its geometry (" +
                    std::to_string(h.config.geometry.blocks()) + " blocks)");
  return h;
}

// Replace `path` crash-safely with what `fill` writes into the temp file PATH.tmp (its fd and name given): fsync,
// rename over `path`, fsync of the directory, so that a crash at any moment leaves the old file or the new one.
// The temp file is removed on any failure; `path` is then untouched.
Status replace_file(const std::string& path, const std::function<Status(int fd, const std::string& tmp)>& fill) {
  const std::string tmp = path + ".tmp";
  Fd f{::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)};
  if (f.fd < 0) return os_error("cannot create", tmp);
  Status filled = fill(f.fd, tmp);
  if (filled.ok() && ::fsync(f.fd) != 0) filled = os_error("cannot write", tmp);
  if (!filled.ok()) {
    ::unlink(tmp.c_str());
    return filled;
  }
  ::close(f.fd);
  f.fd = -1;
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    Status failed = os_error("cannot rename " + tmp + " to", path);
    ::unlink(tmp.c_str());
    return failed;
  }
  const auto slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  Fd d{::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  if (d.fd < 0 || ::fsync(d.fd) != 0) return os_error("cannot fsync directory", dir);
  return Status::Ok();
}

}  // namespace

bool checkpoint_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0;
}

Result<CheckpointHeader> read_checkpoint_header(const std::string& path) {
  Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (f.fd < 0) return os_error("cannot open checkpoint", path);
  CrcReader in(f.fd);
  return read_header(in, path);
}

Status load_checkpoint(const std::string& path, ModelShard& shard) {
  Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (f.fd < 0) return os_error("cannot open checkpoint", path);
  CrcReader in(f.fd);
  const Result<CheckpointHeader> header = read_header(in, path);
  if (!header.ok()) return header.status();
  const ShardConfig& c = header->config;
  if (!(c.geometry == shard.geometry()) || c.optimizer.kind != shard.params().kind)
    return Status::Error(StatusCode::mismatch, path + ": checkpoint shape differs from the shard it is loaded into");

  const int slots = state_slots(c.optimizer.kind);
  std::vector<float> w(c.geometry.block_elements()), s0, s1;
  if (slots > 0) s0.resize(w.size());
  if (slots > 1) s1.resize(w.size());
  for (std::uint64_t b = 0; b < c.geometry.blocks(); ++b) {
    const std::size_t n = c.geometry.elements_in_block(b);
    std::uint64_t step = 0;
    bool ok = in.get(&step, sizeof step) && in.get(w.data(), n * sizeof(float));
    if (slots > 0) ok = ok && in.get(s0.data(), n * sizeof(float));
    if (slots > 1) ok = ok && in.get(s1.data(), n * sizeof(float));
    if (!ok) return bad_file(path + ": checkpoint truncated at block " + std::to_string(b));
    if (!shard.restore_block(b, step, {w.data(), n}, {s0.data(), slots > 0 ? n : 0}, {s1.data(), slots > 1 ? n : 0})) {
      const Status engine = shard.engine_status();
      return Status::Error(path + ": block " + std::to_string(b) + " " +
                           (engine.ok() ? "does not fit the shard" : "not restored: " + engine.message()));
    }
  }
  const std::uint32_t expected = in.crc();
  std::uint32_t stored = 0;
  char end[8];
  if (!in.get(&stored, sizeof stored) || !in.get(end, sizeof end) || std::memcmp(end, kEndMagic, sizeof end) != 0)
    return bad_file(path + ": checkpoint truncated (no trailer)");
  if (stored != expected) return bad_file(path + ": checkpoint CRC mismatch (file corrupt)");
  char extra;
  if (::read(f.fd, &extra, 1) != 0) return bad_file(path + ": checkpoint has trailing bytes");
  return Status::Ok();
}

Result<CheckpointWritten> write_checkpoint(const std::string& path, const ModelShard& shard, const ShardConfig& config,
                                           const ShardTenancy& tenancy) {
  nlohmann::json header = {{"format", kFormat},
                           {"options", format_shard_options(config)},
                           {"blocks", shard.geometry().blocks()},
                           {"created", static_cast<std::uint64_t>(std::time(nullptr))}};
  if (!tenancy.job.empty()) {
    header["job"] = tenancy.job;
    header["claimed"] = tenancy.claimed_unix;
  }
  if (tenancy.place) header["place"] = format_place(*tenancy.place);
  const std::string text = header.dump();
  CheckpointWritten written;
  Status replaced = replace_file(path, [&](int fd, const std::string& tmp) -> Status {
    CrcWriter out(fd);
    const auto len = static_cast<std::uint32_t>(text.size());
    bool ok = out.put(kMagic, sizeof kMagic) && out.put(&len, sizeof len) && out.put(text.data(), len);
    // Each block is copied out under its lock and written after the lock is released: a push to a block never
    // waits for the disk.
    const int slots = state_slots(config.optimizer.kind);
    std::vector<float> staged;
    std::uint64_t step = 0;
    const auto stage = [&](const BlockView& v) {
      step = v.step;
      staged.assign(v.weights.begin(), v.weights.end());
      for (int s = 0; s < slots; ++s) staged.insert(staged.end(), v.state[s].begin(), v.state[s].end());
    };
    std::uint64_t blocks = 0;
    for (; ok && shard.visit_block(blocks, stage); ++blocks) {
      ok = out.put(&step, sizeof step) && out.put(staged.data(), staged.size() * sizeof(float));
      written.block_steps += step;
    }
    // A GPU engine that failed stops the visit early: that must not pass for a whole checkpoint.
    if (ok && blocks != shard.geometry().blocks())
      return Status::Error(path + ": checkpoint not written: block " + std::to_string(blocks) +
                           " unreadable: " + shard.engine_status().message());
    const std::uint32_t crc = out.crc();
    ok = ok && out.put_raw(&crc, sizeof crc) && out.put_raw(kEndMagic, sizeof kEndMagic) && out.flush();
    return ok ? Status::Ok() : os_error("cannot write", tmp);
  });
  if (!replaced.ok()) return replaced;
  return written;
}

Status copy_checkpoint(const std::string& from, const std::string& to) {
  Fd in{::open(from.c_str(), O_RDONLY | O_CLOEXEC)};
  if (in.fd < 0) return os_error("cannot open checkpoint", from);
  return replace_file(to, [&](int fd, const std::string& tmp) -> Status {
    std::vector<char> chunk(1 << 20);
    for (;;) {
      const ssize_t r = ::read(in.fd, chunk.data(), chunk.size());
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return os_error("cannot read", from);
      if (r == 0) return Status::Ok();
      if (!write_all(fd, chunk.data(), static_cast<std::size_t>(r))) return os_error("cannot write", tmp);
    }
  });
}

}  // namespace blockps
