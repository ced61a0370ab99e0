// The C API (blockps/blockps.h) over the C++ Cluster. Every entry point catches everything (no exception unwinds
// into C code); a Status becomes a result code through its StatusCode (result_of, the one mapping) and this
// thread's last error message.
#include <chrono>
#include <cstddef>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "blockps/blockps.h"
#include "blockps/cluster.h"
#include "blockps/double_buffer.h"
#include "contract/log.h"

struct blockps_cluster {
  std::unique_ptr<blockps::Cluster> cluster;
};

// The handle owns the C++ Operation and the completion slot its callback fills: the callback is set after
// submission (blockps_op_on_done), so the slot says whether the operation finished before it was set.
struct blockps_op {
  struct Completion {
    std::mutex mutex;
    bool finished = false;
    bool callback_set = false;
    blockps_done_fn on_done = nullptr;
    void* user = nullptr;
  };
  blockps::Operation operation;
  std::shared_ptr<Completion> completion = std::make_shared<Completion>();
};

struct blockps_double_buffer {
  std::unique_ptr<blockps::DoubleBuffer> db;
};

namespace {

using blockps::CompressedFormat;
using blockps::Status;
using blockps::StatusCode;

// This thread's last error. `fixed` replaces `message` when recording the message itself ran out of memory.
thread_local std::string t_message;
thread_local const char* t_fixed = nullptr;

void clear_error() noexcept {
  t_message.clear();
  t_fixed = nullptr;
}

// Records "WHAT: WHY MORE" and returns `result`.
blockps_result fail(blockps_result result, std::string_view what, std::string_view why,
                    std::string_view more = {}) noexcept {
  try {
    t_message.assign(what);
    t_message.append(": ");
    t_message.append(why);
    t_message.append(more);
    t_fixed = nullptr;
  } catch (...) {
    t_fixed = "out of memory while recording the error message";
  }
  return result;
}

// StatusCode -> blockps_result. `unknown` is an error the library made without a kind (an exception caught
// inside it): INTERNAL, the code that promises nothing.
blockps_result result_of(StatusCode code) noexcept {
  switch (code) {
    case StatusCode::ok:
      return BLOCKPS_OK;
    case StatusCode::invalid_argument:
      return BLOCKPS_ERR_INVALID_ARGUMENT;
    case StatusCode::config:
    case StatusCode::unknown_option:
      return BLOCKPS_ERR_CONFIG;
    case StatusCode::connect:
      return BLOCKPS_ERR_CONNECT;
    case StatusCode::io:
      return BLOCKPS_ERR_IO;
    case StatusCode::mismatch:
      return BLOCKPS_ERR_MISMATCH;
    case StatusCode::unreachable:
      return BLOCKPS_ERR_UNREACHABLE;
    case StatusCode::conflict:
      return BLOCKPS_ERR_CONFLICT;
    case StatusCode::unknown:
      break;
  }
  return BLOCKPS_ERR_INTERNAL;
}

// Records a C++ outcome and returns its code. Its message already says what failed ("push: ...", the shard,
// the LU and the offsets): it is passed on as it is.
blockps_result finish(const Status& s) noexcept {
  if (s.ok()) {
    clear_error();
    return BLOCKPS_OK;
  }
  try {
    t_message = s.message();
    t_fixed = nullptr;
  } catch (...) {
    t_fixed = "out of memory while recording the error message";
  }
  return result_of(s.code());
}

// Runs an entry point's body; nothing escapes it.
template <class Body>
blockps_result guarded(const char* what, Body&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return fail(BLOCKPS_ERR_NO_MEMORY, what, "out of memory");
  } catch (const std::exception& e) {
    return fail(BLOCKPS_ERR_INTERNAL, what, e.what());
  } catch (...) {
    return fail(BLOCKPS_ERR_INTERNAL, what, "unknown exception");
  }
}

blockps_result null_argument(const char* what, const char* name) noexcept {
  return fail(BLOCKPS_ERR_INVALID_ARGUMENT, what, name, " is NULL");
}

// The checks every transfer shares before the C++ call (which checks sizes and ranges itself).
blockps_result check_transfer(const char* what, const blockps_cluster* cluster, const void* buffer, size_t bytes) {
  if (cluster == nullptr) return null_argument(what, "cluster");
  if (buffer == nullptr && bytes != 0)
    return fail(BLOCKPS_ERR_INVALID_ARGUMENT, what, "the buffer is NULL with bytes = ", std::to_string(bytes));
  return BLOCKPS_OK;
}

std::span<const std::byte> in(const void* data, size_t bytes) { return {static_cast<const std::byte*>(data), bytes}; }
std::span<std::byte> out(void* data, size_t bytes) { return {static_cast<std::byte*>(data), bytes}; }

// Blocking transfer: `start` returns the Status of the C++ call.
template <class Start>
blockps_result blocking(const char* what, blockps_cluster* cluster, const void* buffer, size_t bytes,
                        Start&& start) noexcept {
  return guarded(what, [&] {
    if (blockps_result r = check_transfer(what, cluster, buffer, bytes); r != BLOCKPS_OK) return r;
    return finish(start(*cluster->cluster));
  });
}

// Asynchronous transfer: `start(cluster, callback)` submits and returns the Operation. A request the C++ side
// refused before any I/O (a finished operation with invalid_argument) is this call's error, not the handle's.
template <class Start>
blockps_result asynchronous(const char* what, blockps_cluster* cluster, const void* buffer, size_t bytes,
                            blockps_op** out_op, Start&& start) noexcept {
  return guarded(what, [&] {
    if (out_op == nullptr) return null_argument(what, "out");
    *out_op = nullptr;
    if (blockps_result r = check_transfer(what, cluster, buffer, bytes); r != BLOCKPS_OK) return r;
    // Made before submitting: once the transfer runs, nothing may fail and leave it without a handle.
    auto op = std::make_unique<blockps_op>();
    blockps::CompletionCallback on_done = [completion = op->completion](const Status& s) noexcept {
      blockps_done_fn fn = nullptr;
      void* user = nullptr;
      {
        std::lock_guard lock(completion->mutex);
        completion->finished = true;
        fn = completion->on_done;
        user = completion->user;
      }
      if (fn != nullptr) fn(result_of(s.code()), s.message().c_str(), user);
    };
    op->operation = start(*cluster->cluster, std::move(on_done));
    // Submitted: unless it was refused (then it is finished and nothing uses the buffer), the handle goes out.
    blockps_result refused = BLOCKPS_OK;
    try {
      if (op->operation.ready()) {
        const Status s = op->operation.wait();
        if (s.code() == StatusCode::invalid_argument) refused = finish(s);
      }
    } catch (...) {  // blockps_op_wait reports the outcome
    }
    if (refused != BLOCKPS_OK) return refused;
    clear_error();
    *out_op = op.release();
    return BLOCKPS_OK;
  });
}

// INVALID_ARGUMENT, set as the last error, when `shard` is no index of the cluster's shards.
std::optional<blockps_result> shard_out_of_range(const char* what, const blockps_cluster& cluster, size_t shard) {
  const size_t shards = cluster.cluster->config().shards.size();
  if (shard < shards) return std::nullopt;
  return fail(
      BLOCKPS_ERR_INVALID_ARGUMENT, what,
      "shard " + std::to_string(shard) + " is out of range: the cluster has " + std::to_string(shards) + " shards");
}

// The fields of version 6's blockps_open_options: a caller built against it passes at least this many bytes.
constexpr size_t kOpenOptionsV6Bytes = offsetof(blockps_open_options, expect) + sizeof(int);

blockps_result open_cluster(const char* what, const char* cluster_file, const blockps_open_options* options,
                            blockps_cluster** out_cluster) noexcept {
  return guarded(what, [&] {
    if (out_cluster == nullptr) return null_argument(what, "out");
    *out_cluster = nullptr;
    if (cluster_file == nullptr) return null_argument(what, "cluster_file");
    blockps::OpenOptions open;
    if (options != nullptr) {
      if (options->struct_size < kOpenOptionsV6Bytes)
        return fail(BLOCKPS_ERR_INVALID_ARGUMENT, what,
                    "options->struct_size = " + std::to_string(options->struct_size) + ": must be at least " +
                        std::to_string(kOpenOptionsV6Bytes),
                    " (fill the options with blockps_open_options_init)");
      if (options->job != nullptr) open.job = std::string(options->job);
      open.takeover = options->takeover != 0;
      open.replace_place = options->replace_place != 0;
      switch (options->expect) {
        case BLOCKPS_SHARD_ANY:
          open.expect = blockps::ShardKind::any;
          break;
        case BLOCKPS_SHARD_OPTIMIZER:
          open.expect = blockps::ShardKind::optimizer;
          break;
        case BLOCKPS_SHARD_AVERAGING:
          open.expect = blockps::ShardKind::averaging;
          break;
        default:
          return fail(BLOCKPS_ERR_INVALID_ARGUMENT, what,
                      "options->expect = " + std::to_string(static_cast<int>(options->expect)),
                      ": must be BLOCKPS_SHARD_ANY (0), BLOCKPS_SHARD_OPTIMIZER (1) or BLOCKPS_SHARD_AVERAGING (2)");
      }
    }
    // Every refusal of the loader is the file's (unreadable, not TOML, a wrong key): CONFIG, whatever its code.
    auto config = blockps::load_cluster_file(cluster_file);
    if (!config.ok()) {
      finish(config.status());
      return BLOCKPS_ERR_CONFIG;
    }
    auto cluster = blockps::Cluster::open(config.value(), open);
    if (!cluster.ok()) return finish(cluster.status());
    *out_cluster = new blockps_cluster{std::move(cluster.value())};
    clear_error();
    return BLOCKPS_OK;
  });
}

}  // namespace

extern "C" {

int blockps_api_version(void) { return BLOCKPS_API_VERSION; }

const char* blockps_result_name(blockps_result result) {
  switch (result) {
    case BLOCKPS_OK:
      return "BLOCKPS_OK";
    case BLOCKPS_ERR_INVALID_ARGUMENT:
      return "BLOCKPS_ERR_INVALID_ARGUMENT";
    case BLOCKPS_ERR_CONFIG:
      return "BLOCKPS_ERR_CONFIG";
    case BLOCKPS_ERR_CONNECT:
      return "BLOCKPS_ERR_CONNECT";
    case BLOCKPS_ERR_IO:
      return "BLOCKPS_ERR_IO";
    case BLOCKPS_ERR_MISMATCH:
      return "BLOCKPS_ERR_MISMATCH";
    case BLOCKPS_ERR_NO_MEMORY:
      return "BLOCKPS_ERR_NO_MEMORY";
    case BLOCKPS_ERR_INTERNAL:
      return "BLOCKPS_ERR_INTERNAL";
    case BLOCKPS_ERR_UNREACHABLE:
      return "BLOCKPS_ERR_UNREACHABLE";
    case BLOCKPS_ERR_CONFLICT:
      return "BLOCKPS_ERR_CONFLICT";
  }
  return "BLOCKPS_ERR_UNKNOWN";
}

const char* blockps_last_error(void) { return t_fixed != nullptr ? t_fixed : t_message.c_str(); }

void blockps_set_log(void (*sink)(const char* line)) { blockps::set_log_sink(sink); }

void blockps_open_options_init(blockps_open_options* options) {
  if (options == nullptr) return;
  *options = blockps_open_options{};
  options->struct_size = sizeof(blockps_open_options);
  options->job = nullptr;
  options->takeover = 0;
  options->replace_place = 0;
  options->expect = BLOCKPS_SHARD_ANY;
}

blockps_result blockps_cluster_open(const char* cluster_file, blockps_cluster** out_cluster) {
  return open_cluster("blockps_cluster_open", cluster_file, nullptr, out_cluster);
}

blockps_result blockps_cluster_open_with(const char* cluster_file, const blockps_open_options* options,
                                         blockps_cluster** out_cluster) {
  return open_cluster("blockps_cluster_open_with", cluster_file, options, out_cluster);
}

const char* blockps_cluster_job(const blockps_cluster* cluster) {
  return cluster == nullptr ? "" : cluster->cluster->job().c_str();
}

const char* blockps_cluster_model(const blockps_cluster* cluster) {
  return cluster == nullptr ? "" : cluster->cluster->model().c_str();
}

blockps_result blockps_cluster_claim(blockps_cluster* cluster, const char* job, int takeover) {
  constexpr const char* what = "blockps_cluster_claim";
  return guarded(what, [&] {
    if (cluster == nullptr) return null_argument(what, "cluster");
    if (job == nullptr) return null_argument(what, "job");
    return finish(cluster->cluster->claim(job, takeover != 0));
  });
}

void blockps_cluster_close(blockps_cluster* cluster) {
  delete cluster;  // ~Cluster waits for the operations in flight; it does not throw
}

uint64_t blockps_cluster_model_bytes(const blockps_cluster* cluster) {
  return cluster == nullptr ? 0 : cluster->cluster->model_bytes();
}

uint64_t blockps_cluster_block_bytes(const blockps_cluster* cluster) {
  return cluster == nullptr ? 0 : cluster->cluster->layout().block_bytes();
}

uint64_t blockps_cluster_block_count(const blockps_cluster* cluster) {
  return cluster == nullptr ? 0 : cluster->cluster->layout().block_count();
}

uint64_t blockps_cluster_block_offset(const blockps_cluster* cluster, uint64_t block) {
  if (cluster == nullptr || block > cluster->cluster->layout().block_count()) return UINT64_MAX;
  return cluster->cluster->layout().model_offset_of_block(block);
}

const char* blockps_cluster_dtype(const blockps_cluster* cluster) {
  // to_string gives a view of a string literal: NUL-terminated.
  return cluster == nullptr ? "" : blockps::to_string(cluster->cluster->config().model.dtype).data();
}

size_t blockps_cluster_element_bytes(const blockps_cluster* cluster) {
  return cluster == nullptr ? 0 : blockps::wire_size(cluster->cluster->config().model.dtype);
}

size_t blockps_cluster_shard_count(const blockps_cluster* cluster) {
  return cluster == nullptr ? 0 : cluster->cluster->config().shards.size();
}

const char* blockps_cluster_shard_name(const blockps_cluster* cluster, size_t index) {
  if (cluster == nullptr || index >= cluster->cluster->config().shards.size()) return "";
  return cluster->cluster->config().shards[index].name.c_str();
}

blockps_result blockps_push(blockps_cluster* cluster, const void* grads, size_t bytes) {
  return blocking("blockps_push", cluster, grads, bytes, [&](blockps::Cluster& c) { return c.push(in(grads, bytes)); });
}

blockps_result blockps_pull(blockps_cluster* cluster, void* weights, size_t bytes) {
  return blocking("blockps_pull", cluster, weights, bytes,
                  [&](blockps::Cluster& c) { return c.pull(out(weights, bytes)); });
}

blockps_result blockps_push_blocks(blockps_cluster* cluster, uint64_t first_block, uint64_t block_count,
                                   const void* grads, size_t bytes) {
  return blocking("blockps_push_blocks", cluster, grads, bytes,
                  [&](blockps::Cluster& c) { return c.push_blocks(first_block, block_count, in(grads, bytes)); });
}

blockps_result blockps_pull_blocks(blockps_cluster* cluster, uint64_t first_block, uint64_t block_count, void* weights,
                                   size_t bytes) {
  return blocking("blockps_pull_blocks", cluster, weights, bytes,
                  [&](blockps::Cluster& c) { return c.pull_blocks(first_block, block_count, out(weights, bytes)); });
}

// The exchange's second buffer (the gradients; the weights buffer goes through check_transfer).
blockps_result check_exchange_grads(const char* what, const void* grads, size_t bytes) noexcept {
  if (grads == nullptr && bytes != 0)
    return fail(BLOCKPS_ERR_INVALID_ARGUMENT, what, "grads is NULL with bytes = ", std::to_string(bytes));
  return BLOCKPS_OK;
}

blockps_result blockps_exchange(blockps_cluster* cluster, const void* grads, void* weights, size_t bytes) {
  constexpr const char* what = "blockps_exchange";
  if (blockps_result r = check_exchange_grads(what, grads, bytes); r != BLOCKPS_OK) return r;
  return blocking(what, cluster, weights, bytes,
                  [&](blockps::Cluster& c) { return c.exchange(in(grads, bytes), out(weights, bytes)); });
}

blockps_result blockps_exchange_blocks(blockps_cluster* cluster, uint64_t first_block, uint64_t block_count,
                                       const void* grads, void* weights, size_t bytes) {
  constexpr const char* what = "blockps_exchange_blocks";
  if (blockps_result r = check_exchange_grads(what, grads, bytes); r != BLOCKPS_OK) return r;
  return blocking(what, cluster, weights, bytes, [&](blockps::Cluster& c) {
    return c.exchange_blocks(first_block, block_count, in(grads, bytes), out(weights, bytes));
  });
}

blockps_result blockps_write_weights(blockps_cluster* cluster, const void* weights, size_t bytes) {
  return blocking("blockps_write_weights", cluster, weights, bytes,
                  [&](blockps::Cluster& c) { return c.write_weights(in(weights, bytes)); });
}

blockps_result blockps_read_weights(blockps_cluster* cluster, void* weights, size_t bytes) {
  return blocking("blockps_read_weights", cluster, weights, bytes,
                  [&](blockps::Cluster& c) { return c.read_weights(out(weights, bytes)); });
}

blockps_result blockps_set_or_take_weights(blockps_cluster* cluster, blockps_set_weights_fn set_weights, void* user,
                                           uint64_t patience_ms, int* set_them) {
  constexpr const char* what = "blockps_set_or_take_weights";
  return guarded(what, [&] {
    if (cluster == nullptr) return null_argument(what, "cluster");
    if (set_weights == nullptr) return null_argument(what, "set_weights");
    if (set_them == nullptr) return null_argument(what, "set_them");
    if (patience_ms == 0 || patience_ms > 86'400'000)
      return fail(BLOCKPS_ERR_INVALID_ARGUMENT, what,
                  "patience_ms " + std::to_string(patience_ms) + ": must be 1..86400000 (a day)");
    blockps_result written = BLOCKPS_OK;  // set_weights()'s own result, returned as it is
    const blockps::Result<bool> outcome = cluster->cluster->set_or_take_weights(
        [&] {
          written = set_weights(user);
          return written == BLOCKPS_OK ? Status::Ok() : Status::Error("set_weights failed");
        },
        std::chrono::milliseconds(patience_ms));
    if (written != BLOCKPS_OK) return written;  // its message is the one set_weights left
    if (!outcome.ok()) return finish(outcome.status());
    *set_them = outcome.value() ? 1 : 0;
    clear_error();
    return BLOCKPS_OK;
  });
}

blockps_result blockps_status_page(blockps_cluster* cluster, size_t shard, char* json, size_t json_capacity,
                                   size_t* json_bytes) {
  constexpr const char* what = "blockps_status_page";
  return guarded(what, [&] {
    if (cluster == nullptr) return null_argument(what, "cluster");
    if (json == nullptr && json_capacity != 0) return null_argument(what, "json");
    if (std::optional<blockps_result> refused = shard_out_of_range(what, *cluster, shard)) return *refused;
    auto pages = cluster->cluster->status_pages();
    if (!pages.ok()) return finish(pages.status());
    const std::string& text = pages.value()[shard].json;
    if (json_bytes != nullptr) *json_bytes = text.size();
    if (json == nullptr || json_capacity < text.size() + 1) {  // json is NULL only with capacity 0
      return fail(BLOCKPS_ERR_INVALID_ARGUMENT, what,
                  "the buffer holds " + std::to_string(json_capacity) + " bytes, the status page of shard '" +
                      pages.value()[shard].shard + "' needs " + std::to_string(text.size() + 1) + " (with the NUL)");
    }
    std::memcpy(json, text.c_str(), text.size() + 1);
    clear_error();
    return BLOCKPS_OK;
  });
}

blockps_result blockps_get_shard_counters(blockps_cluster* cluster, size_t shard, blockps_shard_counters* out) {
  constexpr const char* what = "blockps_get_shard_counters";
  return guarded(what, [&] {
    if (cluster == nullptr) return null_argument(what, "cluster");
    if (out == nullptr) return null_argument(what, "out");
    if (std::optional<blockps_result> refused = shard_out_of_range(what, *cluster, shard)) return *refused;
    auto counters = cluster->cluster->recovery_counters();
    if (!counters.ok()) return finish(counters.status());
    const blockps::LuQueueCounters& c = counters.value()[shard];
    *out = blockps_shard_counters{c.commands, c.reconnects, c.unanswered_writes_dropped, c.unit_attentions_resent};
    clear_error();
    return BLOCKPS_OK;
  });
}

blockps_result blockps_push_async(blockps_cluster* cluster, const void* grads, size_t bytes, blockps_op** out_op) {
  return asynchronous("blockps_push_async", cluster, grads, bytes, out_op,
                      [&](blockps::Cluster& c, blockps::CompletionCallback done) {
                        return c.push_async(in(grads, bytes), std::move(done));
                      });
}

blockps_result blockps_pull_async(blockps_cluster* cluster, void* weights, size_t bytes, blockps_op** out_op) {
  return asynchronous("blockps_pull_async", cluster, weights, bytes, out_op,
                      [&](blockps::Cluster& c, blockps::CompletionCallback done) {
                        return c.pull_async(out(weights, bytes), std::move(done));
                      });
}

blockps_result blockps_push_blocks_async(blockps_cluster* cluster, uint64_t first_block, uint64_t block_count,
                                         const void* grads, size_t bytes, blockps_op** out_op) {
  return asynchronous("blockps_push_blocks_async", cluster, grads, bytes, out_op,
                      [&](blockps::Cluster& c, blockps::CompletionCallback done) {
                        return c.push_blocks_async(first_block, block_count, in(grads, bytes), std::move(done));
                      });
}

blockps_result blockps_pull_blocks_async(blockps_cluster* cluster, uint64_t first_block, uint64_t block_count,
                                         void* weights, size_t bytes, blockps_op** out_op) {
  return asynchronous("blockps_pull_blocks_async", cluster, weights, bytes, out_op,
                      [&](blockps::Cluster& c, blockps::CompletionCallback done) {
                        return c.pull_blocks_async(first_block, block_count, out(weights, bytes), std::move(done));
                      });
}

blockps_result blockps_exchange_async(blockps_cluster* cluster, const void* grads, void* weights, size_t bytes,
                                      blockps_op** out_op) {
  constexpr const char* what = "blockps_exchange_async";
  if (out_op != nullptr) *out_op = nullptr;
  if (blockps_result r = check_exchange_grads(what, grads, bytes); r != BLOCKPS_OK) return r;
  return asynchronous(what, cluster, weights, bytes, out_op,
                      [&](blockps::Cluster& c, blockps::CompletionCallback done) {
                        return c.exchange_async(in(grads, bytes), out(weights, bytes), std::move(done));
                      });
}

blockps_result blockps_exchange_blocks_async(blockps_cluster* cluster, uint64_t first_block, uint64_t block_count,
                                             const void* grads, void* weights, size_t bytes, blockps_op** out_op) {
  constexpr const char* what = "blockps_exchange_blocks_async";
  if (out_op != nullptr) *out_op = nullptr;
  if (blockps_result r = check_exchange_grads(what, grads, bytes); r != BLOCKPS_OK) return r;
  return asynchronous(what, cluster, weights, bytes, out_op,
                      [&](blockps::Cluster& c, blockps::CompletionCallback done) {
                        return c.exchange_blocks_async(first_block, block_count, in(grads, bytes), out(weights, bytes),
                                                       std::move(done));
                      });
}

namespace {
// The format an int holds (the C calls take ints: a value outside a C enum's range is undefined in C++).
std::optional<CompressedFormat> format_of(int format) {
  switch (format) {
    case BLOCKPS_COMPRESSED_SIGN1:
      return CompressedFormat::sign1;
    case BLOCKPS_COMPRESSED_INT8:
      return CompressedFormat::int8;
    default:
      return std::nullopt;
  }
}

blockps_result unknown_format(const char* what, int format) {
  return fail(BLOCKPS_ERR_INVALID_ARGUMENT, what, "unknown compressed format ",
              std::to_string(format) + " (BLOCKPS_COMPRESSED_SIGN1 or BLOCKPS_COMPRESSED_INT8)");
}

blockps::Cluster::CompressedPull pull_of(int pull) {
  return pull == BLOCKPS_PULL_WEIGHTS ? blockps::Cluster::CompressedPull::weights
                                      : blockps::Cluster::CompressedPull::average;
}

// The compressed exchange's checks before the C++ call (which checks the sizes itself).
blockps_result check_compressed(const char* what, int format, int pull, const void* packed, size_t packed_bytes) {
  if (!format_of(format)) return unknown_format(what, format);
  if (pull != BLOCKPS_PULL_COMPRESSED_AVERAGE && pull != BLOCKPS_PULL_WEIGHTS)
    return fail(BLOCKPS_ERR_INVALID_ARGUMENT, what, "unknown pull ",
                std::to_string(pull) + " (BLOCKPS_PULL_COMPRESSED_AVERAGE or BLOCKPS_PULL_WEIGHTS)");
  return check_exchange_grads(what, packed, packed_bytes);
}
}  // namespace

size_t blockps_compressed_block_bytes(int format, uint64_t elements) {
  const std::optional<CompressedFormat> f = format_of(format);
  return f ? compressed_block_bytes(*f, static_cast<std::size_t>(elements)) : 0;
}

blockps_result blockps_compress(int format, const float* x, float* residual, size_t elements, void* out_block,
                                size_t out_bytes) {
  constexpr const char* what = "blockps_compress";
  return guarded(what, [&] {
    const std::optional<CompressedFormat> f = format_of(format);
    if (!f) return unknown_format(what, format);
    if (x == nullptr && elements != 0) return null_argument(what, "x");
    if (out_block == nullptr && out_bytes != 0) return null_argument(what, "out");
    const std::span<float> feedback = residual ? std::span<float>(residual, elements) : std::span<float>();
    return finish(compress(*f, {x, elements}, feedback, out(out_block, out_bytes)));
  });
}

blockps_result blockps_decompress(int format, const void* in_block, size_t in_bytes, float* out_values,
                                  size_t elements) {
  constexpr const char* what = "blockps_decompress";
  return guarded(what, [&] {
    const std::optional<CompressedFormat> f = format_of(format);
    if (!f) return unknown_format(what, format);
    if (in_block == nullptr && in_bytes != 0) return null_argument(what, "in");
    if (out_values == nullptr && elements != 0) return null_argument(what, "out");
    return finish(decompress(*f, in(in_block, in_bytes), {out_values, elements}));
  });
}

uint64_t blockps_packed_bytes(const blockps_cluster* cluster, int format, uint64_t first_block, uint64_t block_count) {
  const std::optional<CompressedFormat> f = format_of(format);
  if (cluster == nullptr || !f) return 0;
  return cluster->cluster->packed_bytes(*f, first_block, block_count);
}

blockps_result blockps_exchange_compressed_blocks(blockps_cluster* cluster, uint64_t first_block, uint64_t block_count,
                                                  int format, int pull, const void* packed_grads, size_t packed_bytes,
                                                  void* pulled, size_t pulled_bytes) {
  constexpr const char* what = "blockps_exchange_compressed_blocks";
  if (blockps_result r = check_compressed(what, format, pull, packed_grads, packed_bytes); r != BLOCKPS_OK) return r;
  return blocking(what, cluster, pulled, pulled_bytes, [&](blockps::Cluster& c) {
    return c.exchange_compressed_blocks(first_block, block_count, *format_of(format), pull_of(pull),
                                        in(packed_grads, packed_bytes), out(pulled, pulled_bytes));
  });
}

blockps_result blockps_exchange_compressed_blocks_async(blockps_cluster* cluster, uint64_t first_block,
                                                        uint64_t block_count, int format, int pull,
                                                        const void* packed_grads, size_t packed_bytes, void* pulled,
                                                        size_t pulled_bytes, blockps_op** out_op) {
  constexpr const char* what = "blockps_exchange_compressed_blocks_async";
  if (out_op != nullptr) *out_op = nullptr;
  if (blockps_result r = check_compressed(what, format, pull, packed_grads, packed_bytes); r != BLOCKPS_OK) return r;
  return asynchronous(what, cluster, pulled, pulled_bytes, out_op,
                      [&](blockps::Cluster& c, blockps::CompletionCallback done) {
                        return c.exchange_compressed_blocks_async(first_block, block_count, *format_of(format),
                                                                  pull_of(pull), in(packed_grads, packed_bytes),
                                                                  out(pulled, pulled_bytes), std::move(done));
                      });
}

blockps_result blockps_op_wait(blockps_op* op) {
  constexpr const char* what = "blockps_op_wait";
  return guarded(what, [&] {
    if (op == nullptr) return null_argument(what, "op");
    return finish(op->operation.wait());
  });
}

int blockps_op_ready(const blockps_op* op) {
  if (op == nullptr) return -1;
  try {
    return op->operation.ready() ? 1 : 0;
  } catch (...) {  // a mutex that cannot be locked: say "not yet"; blockps_op_wait reports the error
    return 0;
  }
}

blockps_result blockps_op_on_done(blockps_op* op, blockps_done_fn on_done, void* user) {
  constexpr const char* what = "blockps_op_on_done";
  return guarded(what, [&] {
    if (op == nullptr) return null_argument(what, "op");
    if (on_done == nullptr) return null_argument(what, "on_done");
    blockps_op::Completion& c = *op->completion;
    {
      std::lock_guard lock(c.mutex);
      if (c.callback_set) return fail(BLOCKPS_ERR_INVALID_ARGUMENT, what, "the operation already has a callback");
      c.callback_set = true;
      // The Operation is finished (wait() returns) a moment before the I/O thread reaches the slot: then the
      // callback runs here, and the slot stays empty so that it runs once.
      if (!c.finished && !op->operation.ready()) {
        c.on_done = on_done;
        c.user = user;
        clear_error();
        return BLOCKPS_OK;  // the I/O thread calls it
      }
    }
    const Status s = op->operation.wait();  // finished: returns at once
    on_done(result_of(s.code()), s.message().c_str(), user);
    clear_error();
    return BLOCKPS_OK;
  });
}

void blockps_op_free(blockps_op* op) {
  if (op == nullptr) return;
  try {
    (void)op->operation.wait();  // the buffer is the caller's again once this returns
  } catch (...) {                // nothing to report to: the handle goes either way
  }
  delete op;
}

}  // extern "C"

void blockps_double_buffer_options_init(blockps_double_buffer_options* options) {
  if (options == nullptr) return;
  const blockps::PipelineOptions d;
  options->mode =
      d.mode == blockps::PipelineMode::sequential ? BLOCKPS_PIPELINE_SEQUENTIAL : BLOCKPS_PIPELINE_DOUBLE_BUFFER;
  options->adaptive_pull = d.adaptive_pull ? 1 : 0;
  options->concurrent_push_pull = 0;  // ignored since API version 3
  options->smoothing = d.smoothing;
  options->safety = d.safety;
  options->warmup_steps = d.warmup_steps;
}

blockps_result blockps_double_buffer_open(blockps_cluster* cluster, const blockps_double_buffer_options* options,
                                          blockps_double_buffer** out) {
  constexpr const char* what = "blockps_double_buffer_open";
  return guarded(what, [&] {
    if (out != nullptr) *out = nullptr;
    if (cluster == nullptr) return null_argument(what, "cluster");
    if (out == nullptr) return null_argument(what, "out");
    blockps::PipelineOptions o;
    if (options != nullptr) {
      if (options->mode != BLOCKPS_PIPELINE_SEQUENTIAL && options->mode != BLOCKPS_PIPELINE_DOUBLE_BUFFER)
        return fail(BLOCKPS_ERR_INVALID_ARGUMENT, what, "mode = " + std::to_string(static_cast<int>(options->mode)),
                    ": must be BLOCKPS_PIPELINE_SEQUENTIAL (0) or BLOCKPS_PIPELINE_DOUBLE_BUFFER (1)");
      o.mode = options->mode == BLOCKPS_PIPELINE_SEQUENTIAL ? blockps::PipelineMode::sequential
                                                            : blockps::PipelineMode::double_buffer;
      o.adaptive_pull = options->adaptive_pull != 0;
      o.smoothing = options->smoothing;
      o.safety = options->safety;
      o.warmup_steps = options->warmup_steps;
    }
    auto db = blockps::DoubleBuffer::create(*cluster->cluster, o);
    if (!db.ok()) return finish(db.status());
    *out = new blockps_double_buffer{std::move(db.value())};
    return finish(Status::Ok());
  });
}

void* blockps_double_buffer_weights(blockps_double_buffer* db) {
  return db == nullptr ? nullptr : db->db->weights().data();
}

void* blockps_double_buffer_grads(blockps_double_buffer* db) {
  return db == nullptr ? nullptr : db->db->grads().data();
}

blockps_result blockps_double_buffer_step(blockps_double_buffer* db, blockps_step_metrics* metrics) {
  constexpr const char* what = "blockps_double_buffer_step";
  return guarded(what, [&] {
    if (db == nullptr) return null_argument(what, "db");
    auto m = db->db->step();
    if (!m.ok()) return finish(m.status());
    if (metrics != nullptr) {
      metrics->step = m->step;
      metrics->compute_s = m->compute_s;
      metrics->stall_s = m->stall_s;
      metrics->bubble_s = m->bubble_s;
      metrics->push_s = m->push_s;
      metrics->pull_s = m->pull_s;
      metrics->weight_age_s = m->weight_age_s;
      metrics->concurrent = m->pipelined ? 1 : 0;
    }
    return finish(Status::Ok());
  });
}

void blockps_double_buffer_close(blockps_double_buffer* db) { delete db; }
