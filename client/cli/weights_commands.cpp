// `blockps init` and `blockps save`: the whole model's weights through the weights LUs (no optimizer runs),
// as raw wire-dtype bytes in model order: what `save` writes, `init` takes back. And `blockps release`, which
// drops the shards' job claim. Each opens the cluster as client/job_and_place.h says: a shard in another place is
// refused (init --relayout sets the place instead); init claims the shards for its job, save claims nothing.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <iostream>
#include <nlohmann/json.hpp>
#include <vector>

#include "blockps/cluster.h"
#include "client/cli/commands.h"
#include "client/cli/table.h"
#include "client/job_and_place.h"
#include "contract/control_lines.h"

namespace blockps::cli {
namespace {

std::string sys_error(const std::string& what, int err) { return what + ": " + errno_message(err); }

// Reads exactly buffer.size() bytes of `path` (the file must still have that size).
Status read_exactly(const std::string& path, std::span<std::byte> buffer) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::Error(sys_error("--from " + path + ": cannot open", errno));
  std::size_t done = 0;
  while (done < buffer.size()) {
    const ssize_t n = ::read(fd, buffer.data() + done, buffer.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      if (n == 0)
        return Status::Error("--from " + path + ": ended after " + std::to_string(done) + " bytes, expected " +
                             std::to_string(buffer.size()) + " (did it shrink?)");
      return Status::Error(sys_error("--from " + path + ": read failed", err));
    }
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
  return Status::Ok();
}

// Writes `data` to `path` through a temporary file in the same directory, fsync'ed and renamed over `path`:
// a reader sees the old file or the whole new one, never part of it.
Status write_atomically(const std::string& path, std::span<const std::byte> data) {
  std::string temp = path + ".tmp.XXXXXX";
  const int fd = ::mkostemp(temp.data(), O_CLOEXEC);
  if (fd < 0) return Status::Error(sys_error("--to " + path + ": cannot create the temporary file " + temp, errno));
  const auto fail = [&](const std::string& what, int err) {
    ::close(fd);
    ::unlink(temp.c_str());
    return Status::Error(sys_error("--to " + path + ": " + what, err));
  };
  // mkostemp makes the file 0600; give it what a plain create would (0666 less the umask).
  const mode_t mask = ::umask(0);
  ::umask(mask);
  if (::fchmod(fd, 0666 & ~mask) != 0) return fail("chmod of " + temp, errno);
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail("write to " + temp, errno);
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0) return fail("fsync of " + temp, errno);
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(temp.c_str());
    return Status::Error(sys_error("--to " + path + ": close of " + temp, err));
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(temp.c_str());
    return Status::Error(sys_error("--to " + path + ": rename of " + temp, err));
  }
  return Status::Ok();
}

// An error naming the first shard that another job holds, when `cluster` belongs to no job (a claimed cluster was
// refused at open already).
Status refuse_shards_held_by_a_job(Cluster& cluster) {
  if (!cluster.job().empty()) return Status::Ok();
  auto pages = cluster.status_pages();
  if (!pages.ok()) return pages.status();
  for (const ShardStatusPage& p : pages.value()) {
    const nlohmann::json page = nlohmann::json::parse(p.json, nullptr, false);
    auto claim = read_shard_claim(page.is_object() ? page : nlohmann::json::object());
    if (!claim.ok() || !claim->held_against("")) continue;
    const AskingWorker who{.shard = "shard '" + p.shard + "'",
                           .initiator = cluster.config().client.initiator,
                           .job = {},
                           .cluster_file = cluster.config().source,
                           .since_unix_ms = 0};
    return Status::Error(StatusCode::io,
                         held_by_another_job(*claim, who) + "; or init as that job (--job " + claim->holder + ")");
  }
  return Status::Ok();
}

std::string model_words(const ClusterConfig& config) {
  return std::string(to_string(config.model.dtype)) + ", " + std::to_string(config.shards.size()) + " shards";
}

}  // namespace

int run_init(const std::string& cluster_file, const InitOptions& options) {
  auto config = load_cluster_file(cluster_file);
  if (!config.ok()) {
    print_error(config.message());
    return kExitFailed;
  }
  // The size first, before any shard is touched: a wrong file writes nothing.
  const std::uint64_t model_bytes = config->model.size_bytes;
  struct stat st {};
  if (::stat(options.from.c_str(), &st) != 0) {
    print_error(sys_error("--from " + options.from + ": cannot read it", errno));
    return kExitFailed;
  }
  if (!S_ISREG(st.st_mode)) {
    print_error("--from " + options.from + ": not a regular file");
    return kExitFailed;
  }
  if (static_cast<std::uint64_t>(st.st_size) != model_bytes) {
    print_error("--from " + options.from + " holds " + std::to_string(st.st_size) + " bytes, the model is " +
                std::to_string(model_bytes) + " bytes ([model] size of " + config->source + ", dtype " +
                std::string(to_string(config->model.dtype)) + "): nothing was written");
    return kExitFailed;
  }
  std::vector<std::byte> weights(model_bytes);
  if (Status s = read_exactly(options.from, weights); !s.ok()) {
    print_error(s.message());
    return kExitFailed;
  }
  OpenOptions open = OpenOptions::of_job(options.job);
  open.takeover = options.takeover;
  open.replace_place = options.relayout;
  auto cluster = Cluster::open(config.value(), open);
  if (!cluster.ok()) {
    print_error("init: " + cluster.message() + ": nothing was written");
    return kExitFailed;
  }
  // A worker of no job may not write the weights of a shard another job holds: say so before any shard is written.
  if (Status s = refuse_shards_held_by_a_job(*cluster.value()); !s.ok()) {
    print_error("init: " + s.message() + ": nothing was written");
    return kExitFailed;
  }
  if (Status s = cluster.value()->write_weights(weights); !s.ok()) {
    print_error("init: " + s.message());
    return kExitFailed;
  }
  const Cluster& c = *cluster.value();
  std::cout << "init: assigned " << format_bytes(model_bytes) << " of weights (" << model_words(config.value())
            << ", model " << c.model() << (c.job().empty() ? std::string() : ", job " + c.job()) << ") from "
            << options.from << "\n";
  return kExitOk;
}

int run_save(const std::string& cluster_file, const SaveOptions& options) {
  // No job: reading a shard's weights is allowed whoever holds it, and a save must not join (or disturb) a job.
  auto cluster = Cluster::open(cluster_file, OpenOptions::of_job(std::string()));
  if (!cluster.ok()) {
    print_error(cluster.message());
    return kExitFailed;
  }
  Cluster& c = *cluster.value();
  std::vector<std::byte> weights(c.model_bytes());
  if (Status s = c.read_weights(weights); !s.ok()) {
    print_error("save: " + s.message());
    return kExitFailed;
  }
  if (Status s = write_atomically(options.to, weights); !s.ok()) {
    print_error(s.message());
    return kExitFailed;
  }
  std::cout << "save: wrote " << format_bytes(c.model_bytes()) << " of weights (" << model_words(c.config()) << ") to "
            << options.to << "\n";
  return kExitOk;
}

int run_release(const std::string& cluster_file) {
  auto cluster = Cluster::open(cluster_file, OpenOptions::reading_status());
  if (!cluster.ok()) {
    print_error("release: " + cluster.message());
    return kExitFailed;
  }
  Cluster& c = *cluster.value();
  auto holders = c.release();
  if (!holders.ok()) {
    print_error("release: " + holders.message());
    return kExitFailed;
  }
  for (std::size_t i = 0; i < holders->size(); ++i) {
    const std::string& held_by = (*holders)[i];
    std::cout << "release: shard '" << c.config().shards[i].name
              << "': " << (held_by.empty() ? std::string("held by no job") : "released from job " + held_by) << "\n";
  }
  return kExitOk;
}

}  // namespace blockps::cli
