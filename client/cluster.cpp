// libblockps's Cluster: a facade over one I/O thread per shard (client/shard_io_thread.h), which owns that shard's
// LU sessions. Here: opening (the shards connected at once, their shape checked by client/open_checks.h, the job's
// tenancy settled by client/tenancy.h) and each request checked and planned into the shards' parts.
#include "blockps/cluster.h"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>
#include <utility>

#include "client/job_and_place.h"
#include "client/open_checks.h"
#include "client/send_order.h"
#include "client/shard_io_thread.h"
#include "client/tenancy.h"
#include "client/trace.h"
#include "client/transport/aligned_buffer.h"
#include "client/transport/lu_transport.h"
#include "contract/control_lines.h"
#include "contract/limits.h"
#include "contract/log.h"
#include "contract/scsi_codes.h"
#include "contract/status_page.h"

namespace blockps {

using detail::OperationState;
using detail::read_status_page;
using detail::ShardIoThread;

Status Operation::wait() const {
  if (!state_) return Status::Ok();
  std::unique_lock lock(state_->mutex);
  state_->finished_cv.wait(lock, [&] { return state_->finished; });
  return state_->first_error ? *state_->first_error : Status::Ok();
}

bool Operation::ready() const {
  if (!state_) return true;
  std::lock_guard lock(state_->mutex);
  return state_->finished;
}

namespace {

Operation finished(const Status& s, const CompletionCallback& on_done) {
  auto state = std::make_shared<OperationState>();
  state->finished = true;
  if (!s.ok()) state->first_error = s;
  if (on_done) on_done(s);
  return Operation(std::move(state));
}

}  // namespace

Cluster::Cluster(ClusterConfig config, std::unique_ptr<Layout> layout)
    : config_(std::move(config)), layout_(std::move(layout)), tenancy_(std::make_unique<Tenancy>(config_, shards_)) {}

Cluster::~Cluster() { shards_.clear(); }  // each worker finishes its queue, then its sessions close

const std::string& Cluster::job() const { return tenancy_->job(); }
const std::string& Cluster::model() const { return tenancy_->model(); }

Result<std::unique_ptr<Cluster>> Cluster::open(const std::string& cluster_file, const OpenOptions& options) {
  auto config = load_cluster_file(cluster_file);
  if (!config.ok()) return config.status();
  return open(config.value(), options);
}

namespace {

// open()'s first step, before anything is sent: the shards to open and the job this worker belongs to ("" none; "" when
// opened status_only).
Result<std::string> job_to_open(const ClusterConfig& config, const OpenOptions& options) {
  if (config.shards.empty()) return Status::Error(StatusCode::config, config.source + ": no shards");
  if (options.status_only) return std::string();
  auto named = choose_job(config, options, options.job);
  if (!named.ok()) return named.status();
  if (options.takeover && named->empty())
    return Status::Error(StatusCode::invalid_argument,
                         config.source +
                             ": takeover needs a job to take the shards over for (job=, [client] job, "
                             "BLOCKPS_JOB or --job)");
  return named;
}

// Logs in to every shard at once (a login is a few round trips, and a cluster may have many shards) and checks each
// one's LUs and status page against the file (check_shard_shape); every shard's page, as JSON. `shards` are made
// here.
Result<std::vector<nlohmann::json>> connect_shards(const ClusterConfig& config, const Layout& layout,
                                                   std::vector<std::unique_ptr<ShardIoThread>>& shards) {
  const TransportOptions transport{
      config.client.initiator, config.client.engine, config.client.queue_depth,
      std::chrono::milliseconds(static_cast<std::int64_t>(config.client.reconnect_s * 1000)),
      std::chrono::seconds(config.client.timeout_s)};
  const AskingWorker asking{
      .shard = {}, .initiator = config.client.initiator, .job = {}, .cluster_file = config.source, .since_unix_ms = 0};
  for (const ShardSpec& spec : config.shards) {
    shards.push_back(
        std::make_unique<ShardIoThread>(spec, QueueLimits{config.client.queue_depth, config.client.exchange_writes},
                                        config.client.send_order.value_or(SendOrder::ascending), asking));
  }
  std::vector<std::optional<Status>> outcome(config.shards.size());
  std::vector<nlohmann::json> pages(config.shards.size());
  {
    // jthreads: if starting one throws, those already started are joined, not std::terminate()d; and nothing
    // may escape a thread's function (that would terminate the process too).
    std::vector<std::jthread> openers;
    openers.reserve(config.shards.size());
    for (std::size_t i = 0; i < config.shards.size(); ++i) {
      openers.emplace_back([&, i] {
        try {
          ShardIoThread& shard = *shards[i];
          Status s = shard.connect(transport);
          if (s.ok()) {
            auto page = check_shard_shape(shard, i, config, layout);
            if (page.ok()) pages[i] = std::move(page.value());
            s = page.status();
          }
          outcome[i] = std::move(s);
        } catch (const std::exception& e) {
          outcome[i] =
              Status::Error(StatusCode::unknown, "shard " + config.shards[i].name + ": opening it failed: " + e.what());
        }
      });
    }
  }
  for (const auto& s : outcome)
    if (!s->ok()) return *s;
  return pages;
}

// The trace BLOCKPS_TRACE asks for (null: none), with a lane per shard and one per shard's commands.
Result<std::unique_ptr<Trace>> trace_shards(const std::vector<std::unique_ptr<ShardIoThread>>& shards) {
  auto trace = Trace::from_environment();
  if (!trace.ok() || trace.value() == nullptr) return trace;
  for (std::size_t i = 0; i < shards.size(); ++i) {
    ShardIoThread& shard = *shards[i];
    trace.value()->name_lane(Trace::shard_lane(i), "shard " + shard.spec().name);
    trace.value()->name_lane(Trace::command_lane(i), "shard " + shard.spec().name + ": commands");
    shard.trace_to(trace.value().get(), Trace::shard_lane(i), Trace::command_lane(i));
  }
  return trace;
}

}  // namespace

Result<std::unique_ptr<Cluster>> Cluster::open(const ClusterConfig& config, const OpenOptions& options) {
  try {
    auto job = job_to_open(config, options);  // a wrong name is refused before anything is sent
    if (!job.ok()) return job.status();
    auto layout = make_layout(config.layout, config.model.size_bytes, config.model.block_bytes, config.shards.size());
    std::unique_ptr<Cluster> cluster(new Cluster(config, std::move(layout)));
    cluster->status_only_ = options.status_only;
    auto pages = connect_shards(cluster->config_, *cluster->layout_, cluster->shards_);
    if (!pages.ok()) return pages.status();
    auto write_cap = cap_requests(cluster->shards_, cluster->config_);
    if (!write_cap.ok()) return write_cap.status();
    cluster->max_write_request_bytes_ = write_cap.value();
    auto trace = trace_shards(cluster->shards_);
    if (!trace.ok()) return trace.status();
    cluster->trace_ = std::move(trace.value());
    for (auto& shard : cluster->shards_) shard->start();
    if (options.status_only) return cluster;
    auto claims = read_claims(cluster->config_, pages.value(), options.expect);
    if (!claims.ok()) return claims.status();
    if (Status s = cluster->tenancy_->settle(job.value(), options, std::move(claims.value())); !s.ok()) return s;
    return cluster;
  } catch (const std::exception& e) {
    return Status::Error(config.source + ": opening the cluster failed: " + e.what());
  }
}

void Cluster::prefer_send_order(SendOrder order) {
  if (config_.client.send_order) return;  // the cluster file's choice stands
  for (auto& shard : shards_) shard->set_send_order(order);
}

Status Cluster::claim(const std::string& job, bool takeover, ShardKind expect) {
  if (status_only_)
    return Status::Error(StatusCode::invalid_argument,
                         config_.source + ": claim: this cluster was opened only to read status pages");
  return tenancy_->claim(job, takeover, expect);
}

Status Cluster::claim(const OpenOptions& options) {
  if (status_only_)
    return Status::Error(StatusCode::invalid_argument,
                         config_.source + ": claim: this cluster was opened only to read status pages");
  // The job it holds comes before the file's and the environment's (open() chose it from them).
  const std::optional<std::string> asked =
      options.job ? options.job : (job().empty() ? std::nullopt : std::optional(job()));
  auto named = choose_job(config_, options, asked);
  if (!named.ok()) return named.status();
  // Nothing to claim (no job, or the one it holds): still a worker of the kind it expects.
  if (named->empty() || (*named == job() && !options.takeover)) return tenancy_->check_kind(options.expect);
  return tenancy_->claim(*named, options.takeover, options.expect);
}

Result<std::vector<std::string>> Cluster::release() { return tenancy_->release(); }

Operation Cluster::submit(Transfer transfer, std::uint64_t first_block, std::uint64_t block_count,
                          const Buffers& buffers, CompletionCallback on_done) {
  try {
    return submit_or_throw(transfer, first_block, block_count, buffers, on_done);
  } catch (const std::exception& e) {  // bad_alloc while building the requests: an error value, never an escape
    return finished(Status::Error(std::string("request not started: ") + e.what()), on_done);
  }
}

Operation Cluster::submit_or_throw(Transfer transfer, std::uint64_t first_block, std::uint64_t block_count,
                                   const Buffers& buffers, CompletionCallback& on_done) {
  if (Status s = detail::check_request(*layout_, transfer, first_block, block_count, buffers); !s.ok())
    return finished(s, on_done);
  if (block_count == 0) return finished(Status::Ok(), on_done);
  const detail::RequestCaps caps{.write_bytes = max_write_request_bytes_,
                                 .read_bytes = config_.client.max_request_bytes};
  return post(transfer, detail::plan_request(*layout_, caps, transfer, first_block, block_count, buffers), on_done);
}

Operation Cluster::post(Transfer transfer, std::vector<detail::ShardCommands> parts, CompletionCallback& on_done) {
  const char* what = detail::name_of(transfer);
  const LuRole role = detail::uses_weights_lu(transfer) ? LuRole::weights : LuRole::grad;
  auto state = std::make_shared<OperationState>();
  state->on_done = std::move(on_done);
  for (const detail::ShardCommands& p : parts) state->parts_left += p.commands.empty() ? 0 : 1;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (parts[i].commands.empty()) continue;
    ShardIoThread* shard = shards_[i].get();
    if (transfer == Transfer::exchange) {
      shard->post_exchange(std::move(parts[i]), state);
      continue;
    }
    shard->post([shard, role, part = std::move(parts[i]),
                 what] { return shard->run_traced(what, role, part.commands, part.model_offsets); },
                state);
  }
  return Operation(std::move(state));
}

namespace {
// push only reads the caller's buffer; the commands take a non-const pointer because reads share them.
std::byte* as_mutable(std::span<const std::byte> s) { return const_cast<std::byte*>(s.data()); }
}  // namespace

Status Cluster::push(std::span<const std::byte> grads) { return push_async(grads).wait(); }
Status Cluster::pull(std::span<std::byte> weights) { return pull_async(weights).wait(); }
Status Cluster::exchange(std::span<const std::byte> grads, std::span<std::byte> weights) {
  return exchange_async(grads, weights).wait();
}

Operation Cluster::push_async(std::span<const std::byte> grads, CompletionCallback on_done) {
  return push_blocks_async(0, layout_->block_count(), grads, std::move(on_done));
}
Operation Cluster::pull_async(std::span<std::byte> weights, CompletionCallback on_done) {
  return pull_blocks_async(0, layout_->block_count(), weights, std::move(on_done));
}
Operation Cluster::exchange_async(std::span<const std::byte> grads, std::span<std::byte> weights,
                                  CompletionCallback on_done) {
  return exchange_blocks_async(0, layout_->block_count(), grads, weights, std::move(on_done));
}

Status Cluster::push_blocks(std::uint64_t first_block, std::uint64_t block_count, std::span<const std::byte> grads) {
  return push_blocks_async(first_block, block_count, grads).wait();
}
Status Cluster::pull_blocks(std::uint64_t first_block, std::uint64_t block_count, std::span<std::byte> weights) {
  return pull_blocks_async(first_block, block_count, weights).wait();
}
Status Cluster::exchange_blocks(std::uint64_t first_block, std::uint64_t block_count, std::span<const std::byte> grads,
                                std::span<std::byte> weights) {
  return exchange_blocks_async(first_block, block_count, grads, weights).wait();
}
Operation Cluster::push_blocks_async(std::uint64_t first_block, std::uint64_t block_count,
                                     std::span<const std::byte> grads, CompletionCallback on_done) {
  return submit(Transfer::push, first_block, block_count, {as_mutable(grads), grads.size()}, std::move(on_done));
}
Operation Cluster::pull_blocks_async(std::uint64_t first_block, std::uint64_t block_count, std::span<std::byte> weights,
                                     CompletionCallback on_done) {
  return submit(Transfer::pull, first_block, block_count, {weights.data(), weights.size()}, std::move(on_done));
}
Operation Cluster::exchange_blocks_async(std::uint64_t first_block, std::uint64_t block_count,
                                         std::span<const std::byte> grads, std::span<std::byte> weights,
                                         CompletionCallback on_done) {
  return submit(Transfer::exchange, first_block, block_count,
                {as_mutable(grads), grads.size(), weights.data(), weights.size()}, std::move(on_done));
}

namespace {
detail::CompressedExchange compressed_exchange(const ClusterConfig& config, CompressedFormat format,
                                               Cluster::CompressedPull pull) {
  return {format, wire_size(config.model.dtype), pull == Cluster::CompressedPull::average};
}
}  // namespace

std::uint64_t Cluster::packed_bytes(CompressedFormat format, std::uint64_t first_block,
                                    std::uint64_t block_count) const {
  if (first_block > layout_->block_count() || block_count > layout_->block_count() - first_block) return 0;
  return detail::packed_bytes(*layout_, compressed_exchange(config_, format, CompressedPull::average), first_block,
                              block_count);
}

Status Cluster::exchange_compressed_blocks(std::uint64_t first_block, std::uint64_t block_count,
                                           CompressedFormat format, CompressedPull pull,
                                           std::span<const std::byte> packed_grads, std::span<std::byte> pulled) {
  return exchange_compressed_blocks_async(first_block, block_count, format, pull, packed_grads, pulled).wait();
}

Operation Cluster::exchange_compressed_blocks_async(std::uint64_t first_block, std::uint64_t block_count,
                                                    CompressedFormat format, CompressedPull pull,
                                                    std::span<const std::byte> packed_grads,
                                                    std::span<std::byte> pulled, CompletionCallback on_done) {
  const detail::CompressedExchange how = compressed_exchange(config_, format, pull);
  const Buffers buffers{as_mutable(packed_grads), packed_grads.size(), pulled.data(), pulled.size()};
  try {
    if (Status s = detail::check_compressed_exchange(*layout_, how, first_block, block_count, buffers); !s.ok())
      return finished(s, on_done);
    if (block_count == 0) return finished(Status::Ok(), on_done);
    return post(Transfer::exchange, detail::plan_compressed_exchange(*layout_, how, first_block, block_count, buffers),
                on_done);
  } catch (const std::exception& e) {  // bad_alloc while building the requests: an error value, never an escape
    return finished(Status::Error(std::string("request not started: ") + e.what()), on_done);
  }
}

Status Cluster::write_weights(std::span<const std::byte> weights) {
  return write_weights_blocks(0, layout_->block_count(), weights);
}
Status Cluster::read_weights(std::span<std::byte> weights) {
  return read_weights_blocks(0, layout_->block_count(), weights);
}
Status Cluster::write_weights_blocks(std::uint64_t first_block, std::uint64_t block_count,
                                     std::span<const std::byte> weights) {
  return submit(Transfer::assign_weights, first_block, block_count, {as_mutable(weights), weights.size()}, {}).wait();
}
Status Cluster::read_weights_blocks(std::uint64_t first_block, std::uint64_t block_count,
                                    std::span<std::byte> weights) {
  return submit(Transfer::read_weights, first_block, block_count, {weights.data(), weights.size()}, {}).wait();
}

Status Cluster::on_every_shard(const std::function<Status(detail::ShardIoThread&, std::size_t)>& job) {
  return detail::run_on_shards(shards_, detail::all_shards(shards_), job);
}

Status Cluster::control(std::string_view lines) {
  return on_every_shard([&](ShardIoThread& shard, std::size_t) { return shard.control(lines); });
}

Result<std::vector<ShardStatusPage>> Cluster::status_pages() {
  std::vector<ShardStatusPage> pages(shards_.size());
  const Status s = on_every_shard([&](ShardIoThread& shard, std::size_t i) {
    pages[i].shard = shard.spec().name;
    auto text = read_status_page(shard);
    if (!text.ok()) return text.status();
    pages[i].json = std::move(text.value());
    return Status::Ok();
  });
  if (!s.ok()) return s;
  return pages;
}

Result<bool> Cluster::set_or_take_weights(const std::function<Status()>& set_weights,
                                          std::chrono::milliseconds patience) {
  // One shard decides, so that two hosts asking at once cannot each win a shard: the first in the file.
  const std::vector<std::size_t> first{0};
  const std::string ask(control::kInitWeights), done(control::kInitDone);
  const std::string& me = config_.client.initiator;
  const auto deadline = std::chrono::steady_clock::now() + patience;
  bool asked = false;
  for (;;) {
    nlohmann::json page;
    Status read = detail::run_on_shards(shards_, first, [&](ShardIoThread& shard, std::size_t) -> Status {
      if (!asked)
        if (Status s = shard.control(ask); !s.ok()) return s;
      Result<std::string> text = read_status_page(shard);
      if (!text.ok()) return text.status();
      page = nlohmann::json::parse(text.value(), nullptr, false, true);
      return Status::Ok();
    });
    if (!read.ok()) return read;
    asked = true;
    const nlohmann::json::json_pointer state_at(status_page::kInitState), by_at(status_page::kInitBy);
    if (page.is_discarded() || !page.contains(state_at) || !page[state_at].is_string())
      return Status::Error(StatusCode::mismatch, "shard " + shards_[0]->spec().name +
                                                     ": its status page has no /init/state: a shard older than this "
                                                     "library (update blockps on the shard host)");
    const std::string state = page[state_at].get<std::string>();
    const std::string by = page.value(by_at, std::string());
    if (state == "set") return false;
    if (state == "granted" && by == me) {
      if (Status written = set_weights(); !written.ok()) return written;
      if (Status said = detail::run_on_shards(shards_, first,
                                              [&](ShardIoThread& shard, std::size_t) { return shard.control(done); });
          !said.ok())
        return said;
      return true;
    }
    if (state == "unset") asked = false;  // the grant lapsed (its holder's session is gone): ask again
    if (std::chrono::steady_clock::now() >= deadline)
      return Status::Error(
          StatusCode::io, "shard " + shards_[0]->spec().name + ": the weights of job " + job() + " are not set after " +
                              std::to_string(patience.count()) + " ms: " +
                              (state == "granted" ? by + " holds the init-weights grant and has not said init-done"
                                                  : "nobody holds the grant") +
                              " (is that host still starting? its session is dropped once gone, and the grant with "
                              "it)");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

Result<std::vector<LuQueueCounters>> Cluster::recovery_counters() {
  std::vector<LuQueueCounters> counters(shards_.size());
  const Status s = on_every_shard([&](ShardIoThread& shard, std::size_t i) {
    for (LuRole role : {LuRole::grad, LuRole::weights, LuRole::status}) counters[i] += shard.lu(role).queue_counters();
    return Status::Ok();
  });
  if (!s.ok()) return s;
  return counters;
}

Result<std::vector<LuQueueCounters>> Cluster::grad_queue_counters() {
  std::vector<LuQueueCounters> counters(shards_.size());
  const Status s = on_every_shard([&](ShardIoThread& shard, std::size_t i) {
    counters[i] = shard.lu(LuRole::grad).queue_counters();
    return Status::Ok();
  });
  if (!s.ok()) return s;
  return counters;
}

}  // namespace blockps
