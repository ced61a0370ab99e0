#include "ps_backend/served_shard.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <nlohmann/json.hpp>
#include <random>
#include <utility>
#include <vector>

#include "ps_backend/checkpoint.h"
#include "ps_backend/log.h"

namespace blockps {
namespace {

// One engine per process: its threads serve every shard of this tgtd.
std::shared_ptr<CpuEngine> shared_engine() {
  static std::shared_ptr<CpuEngine> engine = std::make_shared<CpuEngine>(0);
  return engine;
}

// The engine for `c.device` (cpu, auto, gpu:N), or why it cannot be had. `from_checkpoint`: the value came from
// the checkpoint's options, not from this LU's (a checkpoint written on a GPU host may be opened on another).
std::variant<Device, std::string> choose_device(const ShardConfig& c, const std::string& path, bool from_checkpoint) {
  if (c.device == "auto") {
    std::string why;
    if (cuda_device_count(&why) > 0) {
      log_line(path + ": device=auto: aggregating on gpu:0");
      return Device::cuda(0);
    }
    log_line(path + ": device=auto: no usable GPU (" + why + "): aggregating on the CPU");
    return Device::cpu();
  }
  const std::optional<Device> device = parse_device(c.device);
  if (!device) return "device=" + c.device + ": must be cpu, auto or gpu:N";
  if (std::string why = device_error(*device); !why.empty())
    return from_checkpoint ? why + " (device=" + c.device + " is the checkpoint's; give device=cpu or device=auto "
                                   "to open it here)"
                           : why;
  return *device;
}

std::string initialise(ModelShard& model, const ShardConfig& c) {
  switch (c.init.kind) {
    case InitSpec::Kind::zeros:
      return "";
    case InitSpec::Kind::uniform: {
      std::mt19937_64 rng(c.seed);
      std::uniform_real_distribution<float> dist(static_cast<float>(-c.init.scale), static_cast<float>(c.init.scale));
      return model.fill_weights([&](std::uint64_t) { return dist(rng); });
    }
    case InitSpec::Kind::normal: {
      std::mt19937_64 rng(c.seed);
      std::normal_distribution<float> dist(0.0f, static_cast<float>(c.init.scale));
      return model.fill_weights([&](std::uint64_t) { return dist(rng); });
    }
    case InitSpec::Kind::file: {
      const int fd = ::open(c.init.path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) return "init=file:" + c.init.path + ": " + std::strerror(errno);
      struct stat st {};
      std::string err;
      if (::fstat(fd, &st) != 0 || static_cast<std::uint64_t>(st.st_size) != c.geometry.bytes) {
        err = "init=file:" + c.init.path + ": holds " + std::to_string(st.st_size) + " bytes, the shard needs " +
              std::to_string(c.geometry.bytes) + " (size) in dtype " + std::string(to_string(c.geometry.dtype));
      } else {
        std::vector<std::byte> chunk(c.geometry.block_bytes);
        for (std::uint64_t off = 0; off < c.geometry.bytes && err.empty(); off += chunk.size()) {
          const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(chunk.size(), c.geometry.bytes - off));
          const ssize_t r = ::pread(fd, chunk.data(), n, static_cast<off_t>(off));
          if (r != static_cast<ssize_t>(n)) err = "init=file:" + c.init.path + ": short read";
          else err = model.assign_weights(off, {chunk.data(), n});
        }
      }
      ::close(fd);
      return err;
    }
  }
  return "unknown init";
}

std::uint64_t now_unix() { return static_cast<std::uint64_t>(std::time(nullptr)); }

}  // namespace

ServedShard::ServedShard(std::string path, const ShardConfig& config, std::shared_ptr<CpuEngine> engine,
                         Device device)
    : path_(std::move(path)),
      config_(config),
      model_(config.geometry, config.optimizer, std::move(engine), device),
      started_unix_(now_unix()) {}

std::variant<std::shared_ptr<ServedShard>, std::string> ServedShard::create(const std::string& path,
                                                                           const LuOptions& opts) {
  try {
    ShardConfig config = opts.config;
    const bool from_checkpoint = checkpoint_exists(path);
    if (from_checkpoint) {
      auto header = read_checkpoint_header(path);
      if (auto* e = std::get_if<std::string>(&header)) return *e;
      const ShardConfig& saved = std::get<CheckpointHeader>(header).config;
      if (std::string err = merge_onto(opts, saved, /*structural_only=*/true, config); !err.empty())
        return "checkpoint " + path + " does not match the options: " + err +
               " (start with a new path, or remove the checkpoint to discard it)";
      const std::string before = format_shard_options(saved), after = format_shard_options(config);
      if (before != after) log_line(path + ": options differ from the checkpoint's; now: " + after);
    } else if (!opts.given.count("size")) {
      return "size= is required: no shard is open at " + path + " and it holds no checkpoint";
    }
    if (std::string err = geometry_error(config.geometry); !err.empty()) return err;

    // Two tgtd processes must never serve (and overwrite) one checkpoint file. Locked before the model (host or
    // GPU memory) is allocated, so a refused LU costs nothing.
    const std::string lock_path = path + ".lock";
    struct ClosedUnlessKept {
      int fd;
      ~ClosedUnlessKept() {
        if (fd >= 0) ::close(fd);
      }
    } lock{::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644)};
    if (lock.fd < 0) return "cannot open " + lock_path + ": " + std::strerror(errno);
    if (::flock(lock.fd, LOCK_EX | LOCK_NB) != 0)
      return errno == EWOULDBLOCK ? "checkpoint " + path + " is in use by another process (" + lock_path + " is locked)"
                                  : "cannot lock " + lock_path + ": " + std::strerror(errno);

    const auto device = choose_device(config, path, from_checkpoint && !opts.given.count("device"));
    if (auto* why = std::get_if<std::string>(&device)) return *why;
    std::shared_ptr<ServedShard> shard(new ServedShard(path, config, shared_engine(), std::get<Device>(device)));
    shard->lock_fd_ = std::exchange(lock.fd, -1);
    if (from_checkpoint) {
      if (std::string err = load_checkpoint(path, shard->model_); !err.empty()) return err;
      shard->file_is_current_ = true;
      log_line(path + ": loaded checkpoint (" + format_shard_options(config) + ")");
    } else {
      if (std::string err = initialise(shard->model_, config); !err.empty()) return err;
      log_line(path + ": new shard (" + format_shard_options(config) + ")");
    }
    if (config.rounds.mode != RoundPolicy::Mode::async) {
      ServedShard* s = shard.get();
      shard->rounds_ = std::make_unique<Rounds>(shard->model_, config.rounds, [s](std::uint64_t ns) {
        s->note_aggregation(ns);
        s->note_mutation();
      });
    }
    shard->serving_ = true;
    if (config.checkpoint_s > 0)
      shard->periodic_ = std::jthread([s = shard.get()](std::stop_token stop) { s->periodic_checkpoints(stop); });
    return shard;
  } catch (const std::bad_alloc&) {
    return "cannot allocate memory for a shard of size=" + format_byte_size(opts.config.geometry.bytes);
  } catch (const std::exception& e) {
    return std::string("cannot create shard: ") + e.what();
  }
}

ServedShard::~ServedShard() {
  try {
    rounds_.reset();  // no round is applied after the final checkpoint
    if (periodic_.joinable()) {
      periodic_.request_stop();
      periodic_cv_.notify_all();
      periodic_.join();
    }
    if (serving_ && dirty()) {
      if (std::string err = checkpoint(); err.empty()) log_line(path_ + ": final checkpoint written");
    }
  } catch (...) {
    log_line_noexcept("final checkpoint failed: ", path_.c_str());
  }
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the flock
}

bool ServedShard::dirty() {
  std::lock_guard lk(checkpoint_mutex_);
  return checkpointed_mutations_ != mutations_.load(std::memory_order_acquire);
}

ShardConfig ServedShard::config() const {
  std::lock_guard lk(config_mutex_);
  return config_;
}

void ServedShard::note_aggregation(std::uint64_t ns) {
  aggregation_latency_.add(ns);
  counters_.aggregation_ns.fetch_add(ns, std::memory_order_relaxed);
  std::uint64_t seen = counters_.aggregation_max_ns.load(std::memory_order_relaxed);
  while (ns > seen && !counters_.aggregation_max_ns.compare_exchange_weak(seen, ns, std::memory_order_relaxed)) {
  }
}

std::string ServedShard::checkpoint() {
  // Mutations are counted when they complete, so a write that started after the counter reached `wanted`
  // holds every change completed before this call.
  const std::uint64_t wanted = mutations_.load(std::memory_order_acquire);
  std::lock_guard lk(checkpoint_mutex_);
  if (file_is_current_ && checkpointed_mutations_ >= wanted) return "";
  const std::uint64_t at_start = mutations_.load(std::memory_order_acquire);
  std::string err;
  try {
    err = write_checkpoint(path_, model_, config());
  } catch (const std::exception& e) {
    err = std::string("checkpoint failed: ") + e.what();
  }
  if (err.empty()) {
    file_is_current_ = true;
    checkpointed_mutations_ = at_start;
    counters_.checkpoints.fetch_add(1, std::memory_order_relaxed);
    last_checkpoint_unix_.store(now_unix());
    std::lock_guard e(error_mutex_);
    last_checkpoint_error_.clear();
  } else {
    counters_.checkpoint_errors.fetch_add(1, std::memory_order_relaxed);
    log_line(path_ + ": " + err);
    std::lock_guard e(error_mutex_);
    last_checkpoint_error_ = err;
  }
  return err;
}

void ServedShard::periodic_checkpoints(std::stop_token stop) {
  const auto period = std::chrono::seconds(config().checkpoint_s);
  std::unique_lock lk(periodic_mutex_);
  while (!stop.stop_requested()) {
    if (periodic_cv_.wait_for(lk, stop, period, [] { return false; })) break;
    if (stop.stop_requested()) break;
    lk.unlock();
    try {
      if (dirty()) checkpoint();
    } catch (...) {
      log_line_noexcept("periodic checkpoint failed: ", path_.c_str());
    }
    lk.lock();
  }
}

std::string ServedShard::status_json() const {
  const ShardConfig c = config();
  const ShardGeometry& g = c.geometry;
  const auto& k = counters_;
  const auto rd = [](const std::atomic<std::uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  nlohmann::json j;
  j["blockps"] = {{"status_format", 1}};
  j["shard"] = {{"path", path_},
                {"options", format_shard_options(c)},
                {"size", g.bytes},
                {"dtype", to_string(g.dtype)},
                {"block", g.block_bytes},
                {"elements", g.elements()},
                {"blocks", g.blocks()},
                {"opt", to_string(c.optimizer.kind)},
                {"lr", c.optimizer.lr},
                {"mode", to_string(c.rounds)},
                {"device", c.device},
                {"engine", model_.device().name()},  // what device=auto chose
                {"checkpoint_s", c.checkpoint_s},
                {"started_unix", started_unix_}};
  const std::uint64_t pushes = rd(k.pushes);
  j["counters"] = {{"pushes", pushes},
                   {"push_bytes", rd(k.push_bytes)},
                   {"pulls", rd(k.pulls)},
                   {"pull_bytes", rd(k.pull_bytes)},
                   {"weight_writes", rd(k.weight_writes)},
                   {"weight_write_bytes", rd(k.weight_write_bytes)},
                   {"io_errors", rd(k.io_errors)}};
  j["aggregation"] = {{"total_ns", rd(k.aggregation_ns)},
                      {"mean_ns", pushes ? rd(k.aggregation_ns) / pushes : 0},
                      {"max_ns", rd(k.aggregation_max_ns)},
                      {"latency", aggregation_latency_.percentiles()}};
  j["rounds"] = rounds_ ? rounds_->status() : nlohmann::json{{"mode", "async"}};
  // A round's sum + optimizer step is what note_aggregation() records for sync shards.
  if (rounds_) j["rounds"]["apply_latency"] = j["aggregation"]["latency"];
  std::string last_error;
  {
    std::lock_guard e(error_mutex_);
    last_error = last_checkpoint_error_;
  }
  j["checkpoint"] = {{"count", rd(k.checkpoints)},
                     {"errors", rd(k.checkpoint_errors)},
                     {"last_unix", last_checkpoint_unix_.load()},
                     {"last_error", last_error}};
  return j.dump(2) + "\n";
}

std::string ServedShard::control(std::string_view text) {
  // The page is NUL-padded to whole blocks by whoever writes it.
  text = text.substr(0, std::min(text.size(), text.find('\0')));
  std::vector<std::pair<std::string, std::string>> actions;
  float new_lr = 0;  // the last lr= line's value
  while (!text.empty()) {
    const auto nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.remove_suffix(1);
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
    if (line.empty() || line.front() == '#') continue;
    const auto eq = line.find('=');
    const std::string key(line.substr(0, eq));
    const std::string value = eq == std::string_view::npos ? "" : std::string(line.substr(eq + 1));
    if (key == "lr") {
      // The bsopts table is the one definition of what lr accepts.
      const auto parsed = parse_lu_options("role=grad;lr=" + value, 512);
      if (const auto* e = std::get_if<OptionError>(&parsed)) return "control " + std::string(line) + ": " + e->message;
      new_lr = std::get<LuOptions>(parsed).config.optimizer.lr;
    } else if ((key == "checkpoint" || key == "reset-rounds") && eq == std::string_view::npos) {
      if (key == "reset-rounds" && !rounds_) return "control reset-rounds: this shard is mode=async and has no rounds";
    } else {
      return "control '" + std::string(line) + "': unknown (known: lr=VALUE, checkpoint, reset-rounds)";
    }
    actions.emplace_back(key, value);
  }
  if (actions.empty()) return "control: no key=value line in the data written";
  for (const auto& [key, value] : actions) {
    if (key == "lr") {
      std::lock_guard lk(config_mutex_);
      config_.optimizer.lr = new_lr;
      model_.set_params(config_.optimizer);
      note_mutation();  // the next checkpoint records the new lr
      log_line(path_ + ": control: lr=" + value);
    } else if (key == "checkpoint") {
      if (std::string err = checkpoint(); !err.empty()) return "control checkpoint: " + err;
    } else {
      rounds_->reset();
    }
  }
  return "";
}

std::string canonical_shard_path(const std::string& path, std::string& out) {
  if (path.empty()) return "the backing-store path is empty";
  const auto slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  if (name.empty() || name == "." || name == "..") return "the backing-store path " + path + " names no file";
  char resolved[PATH_MAX];
  if (::realpath(path.c_str(), resolved)) {  // the file exists: symlinks and all resolved
    out = resolved;
    return "";
  }
  if (!::realpath(dir.c_str(), resolved))
    return "the directory of " + path + " does not exist or cannot be resolved: " + std::strerror(errno);
  out = std::string(resolved) + (std::string(resolved) == "/" ? "" : "/") + name;
  return "";
}

ShardRegistry& ShardRegistry::instance() {
  static ShardRegistry registry;
  return registry;
}

std::variant<std::shared_ptr<ServedShard>, std::string> ShardRegistry::attach(const std::string& path,
                                                                             const LuOptions& opts) {
  std::string canonical;
  if (std::string err = canonical_shard_path(path, canonical); !err.empty()) return err;
  std::lock_guard lk(mutex_);
  std::erase_if(shards_, [](const auto& entry) { return entry.second.expired(); });
  if (auto it = shards_.find(canonical); it != shards_.end()) {
    if (auto shard = it->second.lock()) {
      ShardConfig merged;
      if (std::string err = merge_onto(opts, shard->config(), /*structural_only=*/false, merged); !err.empty())
        return "the shard at " + canonical + " is already open with other options: " + err;
      return shard;
    }
  }
  auto created = ServedShard::create(canonical, opts);
  if (auto* shard = std::get_if<std::shared_ptr<ServedShard>>(&created)) shards_[canonical] = *shard;
  return created;
}

}  // namespace blockps
