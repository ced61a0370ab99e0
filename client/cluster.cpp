// libblockps's Cluster: a facade over one I/O thread per shard (client/shard_io_thread.h), which owns that shard's
// LU sessions: opening and checking the shards, the job's claim, and each request planned into the shards' parts.
#include "blockps/cluster.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>
#include <utility>

#include "client/job_and_place.h"
#include "client/send_order.h"
#include "client/shard_io_thread.h"
#include "client/trace.h"
#include "client/transport/aligned_buffer.h"
#include "client/transport/lu_transport.h"
#include "contract/control_lines.h"
#include "contract/limits.h"
#include "contract/log.h"
#include "contract/scsi_codes.h"
#include "contract/status_page.h"

namespace blockps {

using detail::failure_code;
using detail::OperationState;
using detail::read_status_page;
using detail::ShardIoThread;
using detail::unix_ms_now;

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

// Checks one shard's LUs and status page against what the file and the layout say; the page, as JSON.
Result<nlohmann::json> check_shard(ShardIoThread& shard, std::size_t index, const ClusterConfig& config,
                                   const Layout& layout) {
  const std::uint64_t need = layout.shard_bytes(index);
  const std::string why = " (model " + std::to_string(config.model.size_bytes) + " bytes in blocks of " +
                          std::to_string(config.model.block_bytes) + ", " + std::string(to_string(config.layout)) +
                          " layout over " + std::to_string(config.shards.size()) + " shards)";
  for (LuRole role : {LuRole::grad, LuRole::weights}) {
    const std::uint64_t have = shard.lu(role).capacity_bytes();
    if (have != need) {
      return Status::Error(StatusCode::mismatch, config.source + ": " + shard.lu_name(role) + ": capacity is " +
                                                     std::to_string(have) + " bytes, the layout gives this shard " +
                                                     std::to_string(need) + why);
    }
  }
  auto page = read_status_page(shard);
  if (!page.ok()) return page.status();
  const std::string prefix = config.source + ": shard '" + shard.spec().name + "': status page ";
  nlohmann::json j = nlohmann::json::parse(page.value(), nullptr, false);
  using pointer = nlohmann::json::json_pointer;
  if (j.is_discarded() || !j.is_object() || !j.contains(pointer(status_page::kShard)) ||
      !j[pointer(status_page::kShard)].is_object())
    return Status::Error(StatusCode::mismatch,
                         prefix + "is not a blockps status page (no JSON object with a \"shard\" member)");
  auto number = [&](const char* field) -> std::optional<std::uint64_t> {
    const pointer p(field);
    if (!j.contains(p) || !j[p].is_number_unsigned()) return std::nullopt;
    return j[p].get<std::uint64_t>();
  };
  const auto size = number(status_page::kShardSize);
  const auto block = number(status_page::kShardBlock);
  const pointer dtype_field(status_page::kShardDtype);
  const std::string dtype =
      j.contains(dtype_field) && j[dtype_field].is_string() ? j[dtype_field].get<std::string>() : "";
  if (!size || !block || dtype.empty())
    return Status::Error(StatusCode::mismatch, prefix + "lacks shard.size, shard.dtype or shard.block");
  if (*size != need)
    return Status::Error(StatusCode::mismatch, prefix + "says size = " + std::to_string(*size) +
                                                   " bytes, the cluster file's layout needs " + std::to_string(need) +
                                                   why);
  if (dtype != to_string(config.model.dtype))
    return Status::Error(StatusCode::mismatch, prefix + "says dtype = " + dtype + ", the cluster file says dtype = " +
                                                   std::string(to_string(config.model.dtype)));
  if (*block != config.model.block_bytes)
    return Status::Error(StatusCode::mismatch,
                         prefix + "says block = " + std::to_string(*block) +
                             " bytes, the cluster file says block = " + std::to_string(config.model.block_bytes));
  return j;
}

// The job a worker opening `config` with `options` belongs to ("" none): OpenOptions::job says which name wins.
Result<std::string> job_of(const OpenOptions& options, const ClusterConfig& config) {
  if (options.job) {
    if (!options.job->empty() && !control::is_name(*options.job))
      return Status::Error(StatusCode::invalid_argument,
                           "job = \"" + *options.job + "\": must be " + std::string(control::kNameRule));
    return *options.job;
  }
  if (!config.client.job.empty()) return config.client.job;
  const char* env = std::getenv("BLOCKPS_JOB");
  if (env == nullptr || *env == '\0') return std::string();
  if (!control::is_name(env))
    return Status::Error(StatusCode::config,
                         "BLOCKPS_JOB = \"" + std::string(env) + "\": must be " + std::string(control::kNameRule));
  return std::string(env);
}

// Control lines as one line of text: "job=A; place=m-.. 0/2 stripe".
std::string lines_in_words(std::string_view lines) {
  std::string words(lines);
  while (!words.empty() && words.back() == '\n') words.pop_back();
  for (std::size_t at = words.find('\n'); at != std::string::npos; at = words.find('\n', at))
    words.replace(at, 1, "; ");
  return words;
}

// "FILE: shard 'S' (STATUS LU ADDRESS)": how open's refusals name a shard.
std::string shard_words(const ClusterConfig& config, std::size_t index) {
  const ShardSpec& spec = config.shards[index];
  return config.source + ": shard '" + spec.name + "' (" + spec.status.text + ")";
}

}  // namespace

Cluster::Cluster(ClusterConfig config, std::unique_ptr<Layout> layout)
    : config_(std::move(config)), layout_(std::move(layout)) {}

Cluster::~Cluster() { shards_.clear(); }  // each worker finishes its queue, then its sessions close

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
  auto named = job_of(options, config);
  if (!named.ok()) return Status::Error(named.status().code(), config.source + ": " + named.message());
  if (options.takeover && named->empty())
    return Status::Error(StatusCode::invalid_argument,
                         config.source +
                             ": takeover needs a job to take the shards over for (job=, [client] job, "
                             "BLOCKPS_JOB or --job)");
  return named;
}

// Logs in to every shard at once (a login is a few round trips, and a cluster may have many shards) and checks each
// one's LUs and status page against the file (check_shard); every shard's page, as JSON. `shards` are made here.
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
            auto page = check_shard(shard, i, config, layout);
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

// The largest WRITE request the connected shards take, with client.max_request_bytes lowered to what every LU
// carries in one command. A transport that carries at most N bytes per command (libiscsi over iser://:
// kLibiscsiIserMaxCommandBytes) caps the requests; a model block cannot be split (a push of part of a block is a
// step of the whole block). A transport whose larger WRITEs are fragile (libiscsi 1.19 and NOP-In) caps the WRITE
// requests likewise.
Result<std::uint64_t> cap_requests(const std::vector<std::unique_ptr<ShardIoThread>>& shards, ClusterConfig& config) {
  std::uint64_t write_cap = config.client.max_request_bytes;
  for (const auto& shard : shards) {
    for (LuRole role : {LuRole::grad, LuRole::weights}) {
      if (const std::uint64_t safe = shard->lu(role).max_safe_write_bytes(); safe != 0)
        write_cap = std::min(write_cap, std::max(safe, config.model.block_bytes));
      const std::uint64_t limit = shard->lu(role).max_command_bytes();
      if (limit == 0) continue;
      if (config.model.block_bytes > limit) {
        return Status::Error(StatusCode::config,
                             config.source + ": shard '" + shard->spec().name + "': " + shard->lu_name(role) +
                                 " carries at most " + std::to_string(limit) +
                                 " bytes per command (libiscsi 1.19's iSER transport), less than [model] block = " +
                                 std::to_string(config.model.block_bytes) +
                                 ": use block <= 256K, iscsi:// URLs, or the kernel initiator's devices");
      }
      config.client.max_request_bytes = std::min(config.client.max_request_bytes, limit);
    }
  }
  return std::min(config.client.max_request_bytes, write_cap);
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

// Each shard's job and place from its status page, as read at open, and a refusal of a shard of another kind than
// `expect`.
Result<std::vector<ShardClaim>> read_claims(const ClusterConfig& config, const std::vector<nlohmann::json>& pages,
                                            ShardKind expect) {
  std::vector<ShardClaim> claims;
  for (std::size_t i = 0; i < pages.size(); ++i) {
    auto claim = read_shard_claim(pages[i]);
    if (!claim.ok()) return Status::Error(claim.status().code(), shard_words(config, i) + ": " + claim.message());
    if (std::string why = kind_refusal(expect, claim->opt); !why.empty())
      return Status::Error(StatusCode::mismatch, shard_words(config, i) + " " + why);
    claims.push_back(std::move(claim.value()));
  }
  return claims;
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
    if (Status s = cluster->settle(job.value(), options, std::move(claims.value())); !s.ok()) return s;
    return cluster;
  } catch (const std::exception& e) {
    return Status::Error(config.source + ": opening the cluster failed: " + e.what());
  }
}

Status Cluster::settle(const std::string& job, const OpenOptions& options, std::vector<ShardClaim> claims) {
  std::vector<Place> held;
  held.reserve(claims.size());
  for (const ShardClaim& c : claims) held.push_back(c.place);
  const ModelChoice model = choose_model(config_.model.name, held);
  model_ = model.model;
  model_generated_ = model.generated;
  if (!options.replace_place) {
    for (std::size_t i = 0; i < claims.size(); ++i) {
      if (std::string why = place_refusal(claims[i].place, place_of(i), !config_.model.name.empty()); !why.empty())
        return Status::Error(StatusCode::mismatch, shard_words(config_, i) + " " + why);
    }
  }
  return claim_shards(job, options.takeover, options.replace_place, std::move(claims));
}

void Cluster::prefer_send_order(SendOrder order) {
  if (config_.client.send_order) return;  // the cluster file's choice stands
  for (auto& shard : shards_) shard->set_send_order(order);
}

Place Cluster::place_of(std::size_t shard) const {
  return place_in(model_, shard, config_.shards.size(), config_.layout);
}

Status Cluster::claim(const std::string& job, bool takeover) {
  if (status_only_)
    return Status::Error(StatusCode::invalid_argument,
                         config_.source + ": claim: this cluster was opened only to read status pages");
  if (!control::is_name(job))
    return Status::Error(StatusCode::invalid_argument,
                         config_.source + ": claim: job = \"" + job + "\": must be " + std::string(control::kNameRule));
  std::vector<ShardClaim> claims(shards_.size());
  Status read = on_every_shard([&](ShardIoThread& shard, std::size_t i) {
    auto text = read_status_page(shard);
    if (!text.ok()) return text.status();
    const nlohmann::json page = nlohmann::json::parse(text.value(), nullptr, false);
    auto claim = read_shard_claim(page.is_discarded() ? nlohmann::json::object() : page);
    if (!claim.ok()) return Status::Error(claim.status().code(), shard_words(config_, i) + ": " + claim.message());
    claims[i] = std::move(claim.value());
    return Status::Ok();
  });
  if (!read.ok()) return read;
  return claim_shards(job, takeover, false, std::move(claims));
}

namespace {

// How long until the claim of a holder none of whose sessions is left lapses (plus a little, for the shard's clock
// and the page's age), or none when a session of it is left or its claim never lapses.
std::optional<double> lapse_wait_s(const ShardClaim& held) {
  if (held.sessions != 0 || !held.claim_idle_s || *held.claim_idle_s <= 0 || !held.last_active_s_ago)
    return std::nullopt;
  return std::max(0.0, *held.claim_idle_s - *held.last_active_s_ago) + 0.25;
}

}  // namespace

Status Cluster::claim_shards(const std::string& job, bool takeover, bool replace_place,
                             std::vector<ShardClaim> claims) {
  // Who asks, from what never changes (this may run beside the shards' I/O threads).
  const auto who = [&](std::size_t i) {
    return AskingWorker{.shard = "shard '" + config_.shards[i].name + "' (" + config_.shards[i].status.text + ")",
                        .initiator = config_.client.initiator,
                        .job = job,
                        .cluster_file = config_.source,
                        .since_unix_ms = 0};
  };
  // The status session's write: job (+ takeover) and the place. A shard another job holds takes no place= from a
  // worker of no job: it would be refused, and that worker only reads.
  const auto open_write = [&](ShardIoThread& shard, std::size_t i) -> Status {
    int waits_for_lapse = 0;
    for (;;) {
      const ShardClaim& held = claims[i];
      const bool may_place = !job.empty() || !held.held_against(job);
      const std::string lines =
          open_control_lines(job, takeover, held.place, may_place ? place_of(i) : held.place, replace_place);
      if (lines.empty()) return Status::Ok();
      const std::int64_t issued = unix_ms_now();
      const std::optional<LuFailure> f = shard.write_control(lines);
      if (!f) return Status::Ok();
      // Refused, or lost: what the shard holds now says why.
      std::string why = f->reason;
      auto text = read_status_page(shard);
      nlohmann::json page = text.ok() ? nlohmann::json::parse(text.value(), nullptr, false) : nlohmann::json();
      if (!page.is_object()) page = nlohmann::json::object();
      if (auto now = read_shard_claim(page); now.ok()) {
        if (!job.empty() && !takeover && now->held_against(job)) {
          // A holder none of whose sessions is left (a job that ended or died: the page counts only the sessions
          // tgt still has) loses the shard claim_idle_s after its last command: a relaunch waits that out
          // instead of failing. A holder with a live session refuses at once.
          if (const std::optional<double> wait = lapse_wait_s(*now); wait && waits_for_lapse++ < 2) {
            char seconds[64];
            std::snprintf(seconds, sizeof seconds, "%.1f s after its last command (claim_idle_s): waiting %.1f s",
                          *now->claim_idle_s, *wait);
            log_line("shard '" + config_.shards[i].name + "' is held by job '" + now->holder +
                     "', none of whose sessions is left; its claim lapses " + seconds);
            std::this_thread::sleep_for(std::chrono::duration<double>(*wait));
            continue;
          }
          return Status::Error(StatusCode::conflict, config_.source + ": " + held_by_another_job(*now, who(i)));
        }
        // Two workers of one job that made up a model identity each: the first to place shard 0 names the model.
        const Place wanted = place_of(i);
        if (i == 0 && model_generated_ && !replace_place && !now->place.model.empty() &&
            now->place.index == wanted.index && now->place.count == wanted.count &&
            now->place.layout == wanted.layout) {
          model_ = now->place.model;
          model_generated_ = false;
          claims[0].place = now->place;
          continue;
        }
        if (std::string refusal = place_refusal(now->place, wanted, !config_.model.name.empty());
            !refusal.empty() && !replace_place)
          return Status::Error(StatusCode::mismatch, shard_words(config_, i) + " " + refusal);
        AskingWorker w = who(i);
        w.since_unix_ms = issued - detail::kRefusalClockSlackMs;
        const ShardAnswer answer = job.empty() ? ShardAnswer::control_refused : ShardAnswer::job_refused;
        if (std::string explained = explain_answer(page, answer, w); !explained.empty()) why += ": " + explained;
      }
      return Status::Error(failure_code(*f), shard.lu_name(LuRole::status) + ": the control write \"" +
                                                 lines_in_words(lines) + "\" failed: " + why);
    }
  };
  // Every session of the shard joins the job through its own session (the status LU's too, after its write).
  const auto join_sessions = [&](ShardIoThread& shard, std::size_t i) -> Status {
    shard.set_job(job);
    if (job.empty()) return Status::Ok();
    const ShardSpec& spec = config_.shards[i];
    for (LuRole role : {LuRole::grad, LuRole::weights, LuRole::status}) {
      SessionJoin join{0, shard.lu(LuRole::status).block_size(), join_line(job)};
      if (spec.lu(role).kind != LuAddress::Kind::device_path) {
        const std::optional<int> lun = status_lun_on_target_of(spec.lu(role), spec.status);
        if (!lun)
          return Status::Error(StatusCode::config,
                               shard_words(config_, i) + ": its " + std::string(to_string(role)) + " LU (" +
                                   spec.lu(role).text +
                                   ") and its status LU are not LUs of one target: a job claims a shard through every "
                                   "session, and a session reaches only its own target's LUs; give the shard's three "
                                   "LUs of one target");
        join.status_lun = *lun;
      }
      const std::int64_t issued = unix_ms_now();
      if (const std::optional<LuFailure> f = shard.lu(role).join_job(join)) {
        std::string why = f->reason;
        if (std::string explained = shard.explain_from_page(ShardAnswer::job_refused, issued); !explained.empty())
          why += ": " + explained;
        return Status::Error(failure_code(*f), shard.lu_name(role) + ": " + why);
      }
    }
    return Status::Ok();
  };
  const auto settle_shard = [&](ShardIoThread& shard, std::size_t i) -> Status {
    if (Status s = open_write(shard, i); !s.ok()) return s;
    return join_sessions(shard, i);
  };
  // The order. First, one at a time, the shards whose page says another job holds them: the shard decides (its page
  // may still count the sessions of a holder that is gone, whose claim has then lapsed), and a refusal there leaves
  // no claim of this job on the other shards. Then shard 0, whose place names the model where workers made up an
  // identity each (above); then the others at once.
  std::vector<std::size_t> contested, rest;
  for (std::size_t i = 0; i < claims.size(); ++i) {
    const bool held = !job.empty() && !takeover && claims[i].held_against(job);
    (held ? contested : rest).push_back(i);
  }
  for (std::size_t i : contested) {
    if (Status s = on_shards({i}, settle_shard); !s.ok()) return s;
  }
  if (!rest.empty() && rest.front() == 0) {
    if (Status s = on_shards({0}, settle_shard); !s.ok()) return s;
    rest.erase(rest.begin());
  }
  if (Status s = on_shards(rest, settle_shard); !s.ok()) return s;
  job_ = job;
  model_generated_ = false;  // the shards hold it now: a later claim() keeps it
  return Status::Ok();
}

Operation Cluster::submit(Transfer transfer, std::uint64_t first_block, std::uint64_t block_count, Buffers buffers,
                          CompletionCallback on_done) {
  try {
    return submit_or_throw(transfer, first_block, block_count, buffers, on_done);
  } catch (const std::exception& e) {  // bad_alloc while building the requests: an error value, never an escape
    return finished(Status::Error(std::string("request not started: ") + e.what()), on_done);
  }
}

const char* Cluster::name_of(Transfer transfer) {
  switch (transfer) {
    case Transfer::push:
      return "push";
    case Transfer::pull:
      return "pull";
    case Transfer::exchange:
      return "exchange";
    case Transfer::assign_weights:
      return "write_weights";
    case Transfer::read_weights:
      return "read_weights";
  }
  return "?";
}

Operation Cluster::submit_or_throw(Transfer transfer, std::uint64_t first_block, std::uint64_t block_count,
                                   Buffers buffers, CompletionCallback& on_done) {
  if (Status s = check_request(transfer, first_block, block_count, buffers); !s.ok()) return finished(s, on_done);
  if (block_count == 0) return finished(Status::Ok(), on_done);
  return post(transfer, plan(transfer, first_block, block_count, buffers), on_done);
}

Status Cluster::check_request(Transfer transfer, std::uint64_t first_block, std::uint64_t block_count,
                              const Buffers& buffers) const {
  const char* what = name_of(transfer);
  const std::uint64_t blocks = layout_->block_count();
  if (first_block > blocks || block_count > blocks - first_block) {
    return Status::Error(StatusCode::invalid_argument, std::string(what) + ": blocks [" + std::to_string(first_block) +
                                                           ", " + std::to_string(first_block + block_count) +
                                                           ") are outside the model's " + std::to_string(blocks) +
                                                           " blocks");
  }
  const std::uint64_t need =
      layout_->model_offset_of_block(first_block + block_count) - layout_->model_offset_of_block(first_block);
  const bool exchanging = transfer == Transfer::exchange;
  for (const auto& [bytes, name] : {std::pair{buffers.data_bytes, exchanging ? "gradient buffer" : "buffer"},
                                    std::pair{exchanging ? buffers.pulled_bytes : need, "weights buffer"}}) {
    if (bytes != need) {
      return Status::Error(StatusCode::invalid_argument,
                           std::string(what) + ": the " + name + " holds " + std::to_string(bytes) +
                               " bytes, blocks [" + std::to_string(first_block) + ", " +
                               std::to_string(first_block + block_count) + ") are " + std::to_string(need) + " bytes");
    }
  }
  return Status::Ok();
}

// How many commands an exchange's part on one shard is cut into at least, where its blocks allow (Cluster::plan).
constexpr std::uint64_t kExchangeSlices = 8;

std::vector<detail::ShardCommands> Cluster::plan(Transfer transfer, std::uint64_t first_block,
                                                 std::uint64_t block_count, const Buffers& buffers) const {
  const std::uint64_t base = layout_->model_offset_of_block(first_block);
  const bool exchanging = transfer == Transfer::exchange;
  const bool writing = transfer == Transfer::push || transfer == Transfer::assign_weights || exchanging;
  std::vector<detail::ShardCommands> parts(shards_.size());
  auto command = [&](IoDirection direction, const ShardRun& run, std::byte* data) {
    LuCommand c{direction, run.shard_offset, {}};
    for (const ModelPiece& p : run.pieces) c.segments.push_back({data + (p.model_offset - base), p.bytes});
    return c;
  };
  // An exchange pairs each WRITE with a READ of the same run (so READs use the WRITE size cap): a shard's
  // WRITEs first, in order, then their READs, each waiting for its WRITE (client/transport/command_order.h
  // interleaves them on the wire). Its runs are also cut so that each shard gets kExchangeSlices of them where
  // its blocks allow: a sync shard answers a READ when the rounds of all its blocks closed, so one READ of a shard's
  // whole part (a small model: one 1 MiB bucket is the whole Fashion-MNIST MLP) waits for the last push of the
  // exchange, and the pull cannot overlap the push (bench/RESULTS.md, issue 48: the MLP at 10 Mbit/s, 0.69x DDP
  // with one command a shard, 1.32x with at least 8).
  std::uint64_t cap = writing ? max_write_request_bytes_ : config_.client.max_request_bytes;
  if (exchanging) {
    const std::uint64_t block = layout_->block_bytes();
    const std::uint64_t per_shard = block_count * block / shards_.size();
    cap = std::min(cap, std::max(block, per_shard / kExchangeSlices / block * block));
  }
  for (ShardRun& run : layout_->runs(first_block, block_count, cap)) {
    detail::ShardCommands& part = parts[run.shard];
    part.model_offsets.push_back(run.pieces.front().model_offset);
    part.commands.push_back(command(writing ? IoDirection::write : IoDirection::read, run, buffers.data));
  }
  if (!exchanging) return parts;
  for (detail::ShardCommands& part : parts) {
    const std::size_t writes = part.commands.size();
    for (std::size_t w = 0; w < writes; ++w) {
      LuCommand read = part.commands[w];
      read.direction = IoDirection::read;
      read.after = w;
      for (IoSegment& segment : read.segments) segment.data = buffers.pulled + (segment.data - buffers.data);
      part.commands.push_back(std::move(read));
      part.model_offsets.push_back(part.model_offsets[w]);
    }
  }
  return parts;
}

Operation Cluster::post(Transfer transfer, std::vector<detail::ShardCommands> parts, CompletionCallback& on_done) {
  const char* what = name_of(transfer);
  const LuRole role =
      transfer == Transfer::assign_weights || transfer == Transfer::read_weights ? LuRole::weights : LuRole::grad;
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
  std::vector<std::size_t> all(shards_.size());
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
  return on_shards(all, job);
}

Status Cluster::on_shards(const std::vector<std::size_t>& which,
                          const std::function<Status(detail::ShardIoThread&, std::size_t)>& job) {
  if (which.empty()) return Status::Ok();
  auto state = std::make_shared<OperationState>();
  state->parts_left = which.size();
  for (std::size_t i : which) {
    ShardIoThread* shard = shards_[i].get();
    shard->post([shard, i, &job] { return job(*shard, i); }, state);
  }
  return Operation(state).wait();
}

Status Cluster::control(std::string_view lines) {
  return on_every_shard([&](ShardIoThread& shard, std::size_t) {
    LuTransport& lu = shard.lu(LuRole::status);
    const std::uint64_t block = lu.block_size();
    const std::uint64_t bytes = (lines.size() + block) / block * block;         // whole blocks, at least one NUL after
    AlignedBuffer page = make_aligned_buffer(static_cast<std::size_t>(bytes));  // zeroed: the NUL padding
    if (!page) return Status::Error(StatusCode::unknown, "no memory for a control write");
    std::memcpy(page.get(), lines.data(), lines.size());
    std::vector<LuCommand> write{{IoDirection::write, 0, {{page.get(), static_cast<std::size_t>(bytes)}}}};
    return shard.run(LuRole::status, write, {});
  });
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
