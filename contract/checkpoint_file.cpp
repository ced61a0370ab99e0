#include "contract/checkpoint_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <nlohmann/json.hpp>
#include <vector>

#include "contract/control_lines.h"

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

// The file is there and readable but is not a checkpoint this reader can use.
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
    bytes_read_ += n;
    return true;
  }
  std::uint32_t crc() const { return static_cast<std::uint32_t>(crc_); }
  std::uint64_t bytes_read() const { return bytes_read_; }

 private:
  int fd_;
  std::uint64_t bytes_read_ = 0;
  uLong crc_ = crc32_z(0, nullptr, 0);
};

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

Result<CheckpointFileHeader> read_header(CrcReader& in, const std::string& path) {
  char magic[8];
  std::uint32_t len = 0;
  if (!in.get(magic, sizeof magic) || std::memcmp(magic, kMagic, sizeof magic) != 0)
    return bad_file(path + " is not a blockps checkpoint (bad magic)");
  if (!in.get(&len, sizeof len)) return bad_file(path + ": checkpoint truncated in its header");
  if (len == 0 || len > kMaxHeader)
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
  CheckpointFileHeader h;
  h.options = options->get<std::string>();
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
  const std::optional<std::uint64_t> blocks = number("blocks");
  if (!blocks) return bad_file(path + ": checkpoint block count " + field_text("blocks") + " is not a number");
  h.blocks = *blocks;
  if (j.contains("elements") || j.contains("block_elements") || j.contains("state_slots")) {
    const auto elements = number("elements"), block_elements = number("block_elements"), slots = number("state_slots");
    if (!elements || !block_elements || !slots || *slots > kMaxCheckpointStateSlots)
      return bad_file(path + ": checkpoint header's geometry elements=" + field_text("elements") +
                      " block_elements=" + field_text("block_elements") + " state_slots=" + field_text("state_slots") +
                      " is not whole numbers (state_slots 0.." + std::to_string(kMaxCheckpointStateSlots) + ")");
    const CheckpointGeometry g{*elements, *block_elements, static_cast<std::uint32_t>(*slots)};
    if (Status usable = check_checkpoint_geometry(g); !usable.ok())
      return bad_file(path + ": checkpoint header's " + usable.message());
    if (g.blocks() != h.blocks)
      return bad_file(path + ": checkpoint block count " + std::to_string(h.blocks) + " does not match its geometry " +
                      to_string(g) + " (" + std::to_string(g.blocks()) + " blocks)");
    h.geometry = g;
  }
  return h;
}

// Replace `path` crash-safely with what `fill` writes into the temp file PATH.tmp (its fd and name given): fsync,
// rename over `path`, fsync of the directory, so that a crash at any moment leaves the old file or the new one.
// The temp file is removed on any failure before the rename; `path` is then untouched. A failed fsync of the directory
// after the rename is an error too, though `path` holds the new file by then: the rename may not survive a crash.
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

std::string to_string(const CheckpointGeometry& g) {
  return "elements=" + std::to_string(g.elements) + " block_elements=" + std::to_string(g.block_elements) +
         " state_slots=" + std::to_string(g.state_slots);
}

Status check_checkpoint_geometry(const CheckpointGeometry& g) {
  if (g.elements == 0 || g.block_elements == 0 || g.state_slots > kMaxCheckpointStateSlots)
    return Status::Error(StatusCode::invalid_argument,
                         "checkpoint geometry " + to_string(g) + " is unusable: elements and block_elements must be " +
                             "at least 1, state_slots at most " + std::to_string(kMaxCheckpointStateSlots));
  return Status::Ok();
}

bool checkpoint_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0;
}

Result<CheckpointFileHeader> read_checkpoint_file_header(const std::string& path) {
  Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (f.fd < 0) return os_error("cannot open checkpoint", path);
  CrcReader in(f.fd);
  return read_header(in, path);
}

Status read_checkpoint_file(const std::string& path, const CheckpointBodyGeometry& body_geometry,
                            const CheckpointBlockSink& take) {
  Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (f.fd < 0) return os_error("cannot open checkpoint", path);
  CrcReader in(f.fd);
  const Result<CheckpointFileHeader> header = read_header(in, path);
  if (!header.ok()) return header.status();
  const Result<CheckpointGeometry> geometry = body_geometry(*header);
  if (!geometry.ok()) return geometry.status();
  const CheckpointGeometry& g = *geometry;
  if (Status usable = check_checkpoint_geometry(g); !usable.ok()) return bad_file(path + ": " + usable.message());
  if (header->geometry && !(*header->geometry == g))
    return bad_file(path + ": checkpoint records geometry " + to_string(*header->geometry) + ", read as " +
                    to_string(g));
  if (g.blocks() != header->blocks)
    return bad_file(path + ": checkpoint block count " + std::to_string(header->blocks) + " does not match " +
                    to_string(g) + " (" + std::to_string(g.blocks()) + " blocks)");

  // The body must fit in the file before a buffer its geometry asks for is allocated: a header may claim anything.
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) return os_error("cannot read", path);
  const auto slot_count = static_cast<unsigned __int128>(1 + g.state_slots);
  const unsigned __int128 body = static_cast<unsigned __int128>(g.blocks()) * sizeof(std::uint64_t) +
                                 static_cast<unsigned __int128>(g.elements) * slot_count * sizeof(float);
  if (static_cast<unsigned __int128>(st.st_size) < in.bytes_read() + body + sizeof(std::uint32_t) + sizeof kEndMagic)
    return bad_file(path + ": checkpoint truncated: " + std::to_string(st.st_size) + " bytes, too few for " +
                    to_string(g) + " after its header");
  // One buffer for a block's weights and its slots, read in one piece: they lie one after another in the file.
  std::vector<float> values(g.elements_in_block(0) * (1 + g.state_slots));
  for (std::uint64_t b = 0; b < g.blocks(); ++b) {
    const std::size_t n = g.elements_in_block(b);
    CheckpointBlockRecord r;
    r.index = b;
    if (!in.get(&r.step, sizeof r.step) || !in.get(values.data(), n * (1 + g.state_slots) * sizeof(float)))
      return bad_file(path + ": checkpoint truncated at block " + std::to_string(b));
    r.weights = {values.data(), n};
    for (std::uint32_t s = 0; s < g.state_slots; ++s) r.state[s] = {values.data() + (s + 1) * n, n};
    if (Status taken = take(r); !taken.ok()) return taken;
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

Status write_checkpoint_file(const std::string& path, const std::string& options, const CheckpointGeometry& geometry,
                             const ShardTenancy& tenancy, const CheckpointBlockSource& give) {
  if (Status usable = check_checkpoint_geometry(geometry); !usable.ok())
    return Status::Error(StatusCode::invalid_argument, path + ": not written: " + usable.message());
  nlohmann::json header = {{"format", kFormat},
                           {"options", options},
                           {"blocks", geometry.blocks()},
                           {"elements", geometry.elements},
                           {"block_elements", geometry.block_elements},
                           {"state_slots", geometry.state_slots},
                           {"created", static_cast<std::uint64_t>(std::time(nullptr))}};
  if (!tenancy.job.empty()) {
    header["job"] = tenancy.job;
    header["claimed"] = tenancy.claimed_unix;
  }
  if (tenancy.place) header["place"] = format_place(*tenancy.place);
  const std::string text = header.dump();
  return replace_file(path, [&](int fd, const std::string& tmp) -> Status {
    CrcWriter out(fd);
    const auto len = static_cast<std::uint32_t>(text.size());
    if (!(out.put(kMagic, sizeof kMagic) && out.put(&len, sizeof len) && out.put(text.data(), len)))
      return os_error("cannot write", tmp);
    for (std::uint64_t b = 0; b < geometry.blocks(); ++b) {
      CheckpointBlockRecord r;
      r.index = b;
      if (Status given = give(b, r); !given.ok()) return given;
      const std::size_t n = geometry.elements_in_block(b);
      bool fits = r.weights.size() == n;
      for (std::uint32_t s = 0; s < geometry.state_slots; ++s) fits = fits && r.state[s].size() == n;
      if (!fits)
        return Status::Error(StatusCode::invalid_argument,
                             path + ": checkpoint not written: block " + std::to_string(b) + "'s record is not " +
                                 std::to_string(n) + " weights and " + std::to_string(geometry.state_slots) +
                                 " state slots of as many values");
      bool ok = out.put(&r.step, sizeof r.step) && out.put(r.weights.data(), n * sizeof(float));
      for (std::uint32_t s = 0; s < geometry.state_slots; ++s) ok = ok && out.put(r.state[s].data(), n * sizeof(float));
      if (!ok) return os_error("cannot write", tmp);
    }
    const std::uint32_t crc = out.crc();
    const bool ok = out.put_raw(&crc, sizeof crc) && out.put_raw(kEndMagic, sizeof kEndMagic) && out.flush();
    return ok ? Status::Ok() : os_error("cannot write", tmp);
  });
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
