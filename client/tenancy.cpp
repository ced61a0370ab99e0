// Tenancy: which job, which kind and place, the claim (client/tenancy.h).
#include "client/tenancy.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "client/shard_io_thread.h"
#include "contract/control_lines.h"
#include "contract/log.h"

namespace blockps {

using detail::read_status_page;
using detail::ShardIoThread;
using detail::unix_ms_now;

namespace {

// `name` is "" or a job name; else the error `code` naming where it came from.
Status check_name(const std::string& name, const std::string& where, StatusCode code) {
  if (name.empty() || control::is_name(name)) return Status::Ok();
  return Status::Error(code, where + " = \"" + name + "\": must be " + std::string(control::kNameRule));
}

// Control lines as one line of text: "job=A; place=m-.. 0/2 stripe".
std::string lines_in_words(std::string_view lines) {
  std::string words(lines);
  while (!words.empty() && words.back() == '\n') words.pop_back();
  for (std::size_t at = words.find('\n'); at != std::string::npos; at = words.find('\n', at))
    words.replace(at, 1, "; ");
  return words;
}

// How long until the claim of a holder none of whose sessions is left lapses (plus a little, for the shard's clock
// and the page's age), or none when a session of it is left or its claim never lapses.
std::optional<double> lapse_wait_s(const ShardClaim& held) {
  if (held.sessions != 0 || !held.claim_idle_s || *held.claim_idle_s <= 0 || !held.last_active_s_ago)
    return std::nullopt;
  return std::max(0.0, *held.claim_idle_s - *held.last_active_s_ago) + 0.25;
}

// The shard's status page as JSON; an empty object when it cannot be read or parsed (the callers then know less,
// not nothing: a claim read from it is an error of its own).
nlohmann::json page_or_empty(ShardIoThread& shard) {
  auto text = read_status_page(shard);
  nlohmann::json page = text.ok() ? nlohmann::json::parse(text.value(), nullptr, false) : nlohmann::json();
  return page.is_object() ? page : nlohmann::json::object();
}

}  // namespace

Result<std::string> choose_job(const JobSources& sources) {
  if (sources.asked) {
    if (Status s = check_name(*sources.asked, "job", StatusCode::invalid_argument); !s.ok()) return s;
    return *sources.asked;
  }
  if (!sources.file.empty()) {
    if (Status s = check_name(sources.file, "[client] job", StatusCode::config); !s.ok()) return s;
    return sources.file;
  }
  if (sources.environment != nullptr && *sources.environment != '\0') {
    const std::string env(sources.environment);
    if (Status s = check_name(env, "BLOCKPS_JOB", StatusCode::config); !s.ok()) return s;
    return env;
  }
  if (sources.fallback && !sources.fallback->empty()) {
    if (Status s = check_name(*sources.fallback, "the default job", StatusCode::invalid_argument); !s.ok()) return s;
    return *sources.fallback;
  }
  if (!sources.no_fallback_because.empty())
    return Status::Error(StatusCode::invalid_argument,
                         sources.no_fallback_because +
                             " (or set BLOCKPS_JOB, or the cluster file's [client] job); the shards serve one job at "
                             "a time (docs/OPTIONS.md, \"Jobs and places\")");
  return std::string();
}

Result<std::string> choose_job(const ClusterConfig& config, const OpenOptions& options,
                               const std::optional<std::string>& asked) {
  auto named = choose_job(JobSources{.asked = asked,
                                     .file = config.client.job,
                                     .environment = std::getenv("BLOCKPS_JOB"),
                                     .fallback = options.default_job,
                                     .no_fallback_because = options.no_default_job_because});
  if (!named.ok()) return Status::Error(named.status().code(), config.source + ": " + named.message());
  return named;
}

std::string shard_words(const ClusterConfig& config, std::size_t index) {
  const ShardSpec& spec = config.shards[index];
  return config.source + ": shard '" + spec.name + "' (" + spec.status.text + ")";
}

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

Tenancy::Tenancy(const ClusterConfig& config, std::vector<std::unique_ptr<ShardIoThread>>& shards)
    : config_(config), shards_(shards) {}

Place Tenancy::place_of(std::size_t shard) const {
  return place_in(model_, shard, config_.shards.size(), config_.layout);
}

AskingWorker Tenancy::asking(std::size_t index, const std::string& job) const {
  const ShardSpec& spec = config_.shards[index];
  return AskingWorker{.shard = "shard '" + spec.name + "' (" + spec.status.text + ")",
                      .initiator = config_.client.initiator,
                      .job = job,
                      .cluster_file = config_.source,
                      .since_unix_ms = 0};
}

Status Tenancy::settle(const std::string& job, const OpenOptions& options, std::vector<ShardClaim> claims) {
  std::vector<Place> held;
  held.reserve(claims.size());
  for (const ShardClaim& c : claims) held.push_back(c.place);
  const ModelChoice model = choose_model(config_.model.name, held);
  model_ = model.model;
  model_generated_ = model.generated;
  if (!options.replace_place) {
    if (Status placed = check_places(claims); !placed.ok()) return placed;
  }
  return claim_shards(job, options.takeover, options.replace_place, std::move(claims));
}

Status Tenancy::check_places(const std::vector<ShardClaim>& claims) const {
  for (std::size_t i = 0; i < claims.size(); ++i) {
    if (std::string why = place_refusal(claims[i].place, place_of(i), !config_.model.name.empty()); !why.empty())
      return Status::Error(StatusCode::mismatch, shard_words(config_, i) + " " + why);
  }
  return Status::Ok();
}

Result<std::vector<ShardClaim>> Tenancy::read_claims_now(ShardKind expect) {
  std::vector<nlohmann::json> pages(shards_.size());
  Status read = detail::run_on_shards(shards_, detail::all_shards(shards_), [&](ShardIoThread& shard, std::size_t i) {
    auto text = read_status_page(shard);
    if (!text.ok()) return text.status();
    pages[i] = nlohmann::json::parse(text.value(), nullptr, false);
    if (!pages[i].is_object()) pages[i] = nlohmann::json::object();  // read_shard_claim says what it lacks
    return Status::Ok();
  });
  if (!read.ok()) return read;
  return read_claims(config_, pages, expect);
}

Status Tenancy::check_kind(ShardKind expect) { return read_claims_now(expect).status(); }

Status Tenancy::claim(const std::string& job, bool takeover, ShardKind expect) {
  if (!control::is_name(job))
    return Status::Error(StatusCode::invalid_argument,
                         config_.source + ": claim: job = \"" + job + "\": must be " + std::string(control::kNameRule));
  auto claims = read_claims_now(expect);
  if (!claims.ok()) return claims.status();
  // A shard re-initialised since open() may hold another model now: nothing is written to it.
  if (Status placed = check_places(claims.value()); !placed.ok()) return placed;
  return claim_shards(job, takeover, false, std::move(claims.value()));
}

Result<std::vector<std::string>> Tenancy::release() {
  std::vector<std::string> holders(shards_.size());
  Status s =
      detail::run_on_shards(shards_, detail::all_shards(shards_), [&](ShardIoThread& shard, std::size_t i) -> Status {
        if (auto claim = read_shard_claim(page_or_empty(shard)); claim.ok()) holders[i] = claim->holder;
        if (const std::optional<LuFailure> f = shard.write_control(std::string(control::kRelease) + "\n"))
          return Status::Error(f->status.code(), shard.lu_name(LuRole::status) + ": release: " + f->reason());
        return Status::Ok();
      });
  if (!s.ok()) return s;
  job_.clear();
  return holders;
}

Status Tenancy::write_claim(ShardIoThread& shard, std::size_t i, const std::string& job, bool takeover,
                            bool replace_place, std::vector<ShardClaim>& claims) {
  int waits_for_lapse = 0;
  for (;;) {
    const ShardClaim& held = claims[i];
    // A shard another job holds takes no place= from a worker of no job: it would be refused, and that worker only
    // reads.
    const bool may_place = !job.empty() || !held.held_against(job);
    const std::string lines =
        open_control_lines(job, takeover, held.place, may_place ? place_of(i) : held.place, replace_place);
    if (lines.empty()) return Status::Ok();
    const std::int64_t issued = unix_ms_now();
    const std::optional<LuFailure> f = shard.write_control(lines);
    if (!f) return Status::Ok();
    // Refused, or lost: what the shard holds now says why.
    std::string why = f->reason();
    const nlohmann::json page = page_or_empty(shard);
    if (auto now = read_shard_claim(page); now.ok()) {
      if (!job.empty() && !takeover && now->held_against(job)) {
        // A holder none of whose sessions is left (a job that ended or died: the page counts only the sessions tgt
        // still has) loses the shard claim_idle_s after its last command: a relaunch waits that out instead of
        // failing. A holder with a live session refuses at once.
        if (const std::optional<double> wait = lapse_wait_s(*now); wait && waits_for_lapse++ < 2) {
          char seconds[64];
          std::snprintf(seconds, sizeof seconds, "%.1f s after its last command (claim_idle_s): waiting %.1f s",
                        *now->claim_idle_s, *wait);
          log_line("shard '" + config_.shards[i].name + "' is held by job '" + now->holder +
                   "', none of whose sessions is left; its claim lapses " + seconds);
          shard.wait_keeping_sessions(std::chrono::duration<double>(*wait));
          continue;
        }
        return Status::Error(StatusCode::conflict, config_.source + ": " + held_by_another_job(*now, asking(i, job)));
      }
      // Two workers of one job that made up a model identity each: the first to place shard 0 names the model.
      const Place wanted = place_of(i);
      if (i == 0 && model_generated_ && !replace_place && !now->place.model.empty() &&
          now->place.index == wanted.index && now->place.count == wanted.count && now->place.layout == wanted.layout) {
        model_ = now->place.model;
        model_generated_ = false;
        claims[0].place = now->place;
        continue;
      }
      if (std::string refusal = place_refusal(now->place, wanted, !config_.model.name.empty());
          !refusal.empty() && !replace_place)
        return Status::Error(StatusCode::mismatch, shard_words(config_, i) + " " + refusal);
      AskingWorker w = asking(i, job);
      w.since_unix_ms = issued - detail::kRefusalClockSlackMs;
      const ShardAnswer answer = job.empty() ? ShardAnswer::control_refused : ShardAnswer::job_refused;
      if (std::string explained = explain_answer(page, answer, w); !explained.empty()) why += ": " + explained;
    }
    return Status::Error(f->status.code(), shard.lu_name(LuRole::status) + ": the control write \"" +
                                               lines_in_words(lines) + "\" failed: " + why);
  }
}

Status Tenancy::join_sessions(ShardIoThread& shard, std::size_t i, const std::string& job) {
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
      std::string why = f->reason();
      if (std::string explained = shard.explain_from_page(ShardAnswer::job_refused, issued); !explained.empty())
        why += ": " + explained;
      return Status::Error(f->status.code(), shard.lu_name(role) + ": " + why);
    }
  }
  return Status::Ok();
}

Status Tenancy::claim_shards(const std::string& job, bool takeover, bool replace_place,
                             std::vector<ShardClaim> claims) {
  const auto settle_shard = [&](ShardIoThread& shard, std::size_t i) -> Status {
    if (Status s = write_claim(shard, i, job, takeover, replace_place, claims); !s.ok()) return s;
    return join_sessions(shard, i, job);
  };
  // The order. First, one at a time, the shards whose page says another job holds them: the shard decides (its page
  // may still count the sessions of a holder that is gone, whose claim has then lapsed), and a refusal there stops
  // before the shards no other job holds (a contested shard that took the claim before it keeps it, until the claim
  // lapses or is released, as any shard a job stopped using). Then shard 0, whose place names the model where workers
  // made up an identity each (write_claim); then the others at once.
  std::vector<std::size_t> contested, rest;
  for (std::size_t i = 0; i < claims.size(); ++i) {
    const bool held = !job.empty() && !takeover && claims[i].held_against(job);
    (held ? contested : rest).push_back(i);
  }
  for (std::size_t i : contested) {
    if (Status s = detail::run_on_shards(shards_, {i}, settle_shard); !s.ok()) return s;
  }
  if (!rest.empty() && rest.front() == 0) {
    if (Status s = detail::run_on_shards(shards_, {0}, settle_shard); !s.ok()) return s;
    rest.erase(rest.begin());
  }
  if (Status s = detail::run_on_shards(shards_, rest, settle_shard); !s.ok()) return s;
  job_ = job;
  model_generated_ = false;  // the shards hold it now: a later claim keeps it
  return Status::Ok();
}

}  // namespace blockps
