#include "client/job_and_place.h"

#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "contract/control_lines.h"
#include "contract/status_page.h"

namespace blockps {
namespace {

using pointer = nlohmann::json::json_pointer;

const nlohmann::json* at(const nlohmann::json& page, const char* field) {
  const pointer p(field);
  return page.contains(p) ? &page[p] : nullptr;
}
std::string string_at(const nlohmann::json& page, const char* field) {
  const nlohmann::json* v = at(page, field);
  return v != nullptr && v->is_string() ? v->get<std::string>() : std::string();
}
std::optional<double> number_at(const nlohmann::json& page, const char* field) {
  const nlohmann::json* v = at(page, field);
  if (v == nullptr || !v->is_number()) return std::nullopt;
  return v->get<double>();
}
std::uint64_t count_at(const nlohmann::json& page, const char* field) {
  const nlohmann::json* v = at(page, field);
  if (v == nullptr || !v->is_number_integer() || v->get<std::int64_t>() < 0) return 0;
  return v->get<std::uint64_t>();
}

std::string seconds(double s) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", s);
  return text;
}

std::string in_quotes(const std::string& name) { return "'" + name + "'"; }

// The newest reason the shard recorded for a refusal of this worker's initiator since `since_unix_ms`, or "".
std::string newest_refusal(const nlohmann::json& page, const AskingWorker& who) {
  const nlohmann::json* recent = at(page, status_page::kRefusalsRecent);
  if (recent == nullptr || !recent->is_array()) return {};
  for (auto it = recent->rbegin(); it != recent->rend(); ++it) {  // newest last
    if (!it->is_object()) continue;
    if (it->value(status_page::refusal::kIqn, std::string()) != who.initiator) continue;
    const nlohmann::json& when = (*it)[status_page::refusal::kUnixMs];
    if (!when.is_number() || when.get<std::int64_t>() < who.since_unix_ms) return {};
    return it->value(status_page::refusal::kReason, std::string());
  }
  return {};
}

}  // namespace

std::string_view to_string(ShardKind kind) {
  switch (kind) {
    case ShardKind::any:
      return "any";
    case ShardKind::optimizer:
      return "optimizer";
    case ShardKind::averaging:
      return "averaging";
  }
  return "?";
}

Place place_in(const std::string& model, std::size_t index, std::size_t count, LayoutKind layout) {
  return Place{model, static_cast<std::uint32_t>(index), static_cast<std::uint32_t>(count),
               layout == LayoutKind::range ? PlaceLayout::range : PlaceLayout::stripe};
}

std::string describe(const Place& place) {
  return "model " + place.model + " as shard " + std::to_string(place.index) + " of " + std::to_string(place.count) +
         " (" + std::string(to_string(place.layout)) + ")";
}

Result<ShardClaim> read_shard_claim(const nlohmann::json& page) {
  if (at(page, status_page::kJobHolder) == nullptr || at(page, status_page::kPlaceText) == nullptr)
    return Status::Error(StatusCode::mismatch,
                         std::string("the status page has no ") + status_page::kJobHolder + " or " +
                             status_page::kPlaceText +
                             ": the shard's module is older than jobs and places and would serve any job in any "
                             "place; update the module (bs_blockps.so) and restart the shard");
  ShardClaim c;
  c.opt = string_at(page, status_page::kShardOpt);
  c.holder = string_at(page, status_page::kJobHolder);
  c.sessions = count_at(page, status_page::kJobSessions);
  if (!c.holder.empty()) {
    c.last_active_s_ago = number_at(page, status_page::kJobLastActiveMsAgo);
    if (c.last_active_s_ago && *c.last_active_s_ago < 0) c.last_active_s_ago.reset();
    if (c.last_active_s_ago) *c.last_active_s_ago /= 1000.0;
  }
  c.claim_idle_s = number_at(page, status_page::kJobClaimIdleS);
  c.refused = count_at(page, status_page::kJobRefused);
  const nlohmann::json* lapsed = at(page, status_page::kJobLapsed);
  c.lapsed = lapsed != nullptr && lapsed->is_boolean() && lapsed->get<bool>();
  if (const std::string text = string_at(page, status_page::kPlaceText); !text.empty()) {
    auto place = parse_place(text);
    if (!place.ok())
      return Status::Error(StatusCode::mismatch,
                           std::string("the status page's ") + status_page::kPlaceText + ": " + place.message());
    c.place = std::move(place.value());
  } else {
    c.place = Place{};
  }
  return c;
}

std::string kind_refusal(ShardKind expect, const std::string& opt) {
  const bool averaging = opt == "average";
  if (expect == ShardKind::averaging && !averaging) {
    return "runs opt=" + opt +
           ": it steps its optimizer on every push and a pull returns weights, but this worker expects an averaging "
           "shard (opt=average), whose READ after a push returns the round's average gradient; point the cluster "
           "file at averaging shards, or train through these shards' optimizer (blockps.torch.DistributedOptimizer)";
  }
  if (expect == ShardKind::optimizer && averaging) {
    return "runs opt=average: it only averages the pushed gradients and a READ returns that average, but this worker "
           "expects a shard that steps an optimizer and returns weights; point the cluster file at optimizer shards "
           "(opt=sgd, adam, ...), or average through these shards (DistributedDataParallel with "
           "blockps.torch.averaging_hook)";
  }
  return {};
}

std::string new_model_id() {
  std::random_device random;
  const std::uint64_t id = (std::uint64_t{random()} << 32) ^ random();
  char text[24];
  std::snprintf(text, sizeof text, "m-%016llx", static_cast<unsigned long long>(id));
  return text;
}

ModelChoice choose_model(const std::string& named, const std::vector<Place>& held) {
  if (!named.empty()) return {named, false};
  std::map<std::string, std::size_t> votes;
  for (const Place& p : held)
    if (!p.model.empty()) ++votes[p.model];
  std::string best;
  std::size_t most = 0;
  for (const Place& p : held) {  // file order decides a tie
    if (p.model.empty() || votes[p.model] <= most) continue;
    best = p.model;
    most = votes[p.model];
  }
  if (!best.empty()) return {best, false};
  return {new_model_id(), true};
}

std::string place_refusal(const Place& held, const Place& wanted, bool named) {
  if (held.model.empty() || held == wanted) return {};
  const std::string as_wanted = held.model != wanted.model
                                    ? describe(wanted)
                                    : "shard " + std::to_string(wanted.index) + " of " + std::to_string(wanted.count) +
                                          " (" + std::string(to_string(wanted.layout)) + ")";
  constexpr std::string_view relayout = "re-initialise with `blockps init --relayout`";
  std::string why;
  if (held.model != wanted.model) {
    why = named
              ? "the file's [model] name is '" + wanted.model +
                    "', and this shard holds another model; point the "
                    "file at the shards of model " +
                    wanted.model + ", or " + std::string(relayout)
              : "the other shards of this file hold model " + wanted.model +
                    ", this shard another one; point the file at the shards of one model, or " + std::string(relayout);
  } else if (held.count != wanted.count) {
    why = "the file lists " + std::to_string(wanted.count) + " shards, the model was initialised over " +
          std::to_string(held.count) + "; list the shards that initialised it, or " + std::string(relayout);
  } else if (held.layout != wanted.layout) {
    why = "the file's [layout] kind is \"" + std::string(to_string(wanted.layout)) +
          "\", the model was initialised with \"" + std::string(to_string(held.layout)) + "\"; set [layout] kind = \"" +
          std::string(to_string(held.layout)) + "\", or " + std::string(relayout);
  } else {
    why = "the file lists the shards in another order than the one that initialised them; restore the order, or " +
          std::string(relayout);
  }
  return "holds " + describe(held) + "; this cluster file places it as " + as_wanted + ": " + why;
}

std::string open_control_lines(const std::string& job, bool takeover, const Place& held, const Place& wanted,
                               bool replace_place) {
  // One write, job first: the shard applies job= and takeover before place=, and refuses all of it or none.
  std::string lines;
  if (!job.empty()) {
    lines += join_line(job);
    if (takeover) lines += std::string(control::kTakeover) + "\n";
  }
  if (held != wanted && (held.model.empty() || replace_place)) {
    lines += std::string(control::kPlace) + "=" + format_place(wanted) + "\n";
    if (!held.model.empty()) lines += std::string(control::kReplacePlace) + "\n";
  }
  return lines;
}

std::string join_line(const std::string& job) { return std::string(control::kJob) + "=" + job + "\n"; }

std::optional<int> status_lun_on_target_of(const LuAddress& lu, const LuAddress& status) {
  if (lu.kind == LuAddress::Kind::device_path || status.kind != lu.kind) return std::nullopt;
  const auto lu_slash = lu.text.rfind('/');
  const auto status_slash = status.text.rfind('/');
  if (lu_slash == std::string::npos || status_slash == std::string::npos ||
      lu.text.compare(0, lu_slash, status.text, 0, status_slash) != 0 || lu_slash != status_slash)
    return std::nullopt;
  const std::string lun = status.text.substr(status_slash + 1);
  if (lun.empty() || lun.size() > 5 || lun.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  return std::stoi(lun);
}

std::string held_by_another_job(const ShardClaim& claim, const AskingWorker& who) {
  if (claim.holder.empty()) {
    return who.shard +
           " refused this session for a job that held the shard, and holds no claim now (released, or the holder was "
           "silent for longer than claim_idle_s): open the cluster again to claim it";
  }
  const std::string sessions = std::to_string(claim.sessions) + (claim.sessions == 1 ? " session" : " sessions");
  if (claim.holder == who.job) {
    return who.shard + " is held by this job (" + in_quotes(who.job) + ", " + sessions +
           "), but does not count this session among them (a takeover by another worker of the job drops the "
           "sessions the shard had); open the cluster again to join";
  }
  std::string held = who.shard + " is held by job " + in_quotes(claim.holder) + " (" + sessions;
  if (claim.last_active_s_ago) held += ", active " + seconds(*claim.last_active_s_ago) + " s ago";
  held += "); ";
  held += who.job.empty() ? "this worker names no job ([client] job, BLOCKPS_JOB, job=, --job)"
                          : "this job is " + in_quotes(who.job);
  return held + ". A shard serves one job at a time: stop job " + claim.holder +
         ", or take the shards over (`blockps release --cluster " + who.cluster_file +
         "`, or takeover=True / --takeover)";
}

std::string explain_answer(const nlohmann::json& page, ShardAnswer answer, const AskingWorker& who) {
  auto claim = read_shard_claim(page);
  const bool held_elsewhere = claim.ok() && claim->holder != who.job;
  // A conflict is the claim's, and the page says who holds the shard now; the other answers have reasons of
  // their own, which the shard recorded.
  if (answer == ShardAnswer::reservation_conflict && claim.ok()) return held_by_another_job(*claim, who);
  if (answer == ShardAnswer::job_refused && held_elsewhere && !claim->holder.empty())
    return held_by_another_job(*claim, who);
  if (std::string reason = newest_refusal(page, who); !reason.empty()) return who.shard + ": " + reason;
  const std::string degraded = string_at(page, status_page::kRoundsDegradedReason);
  switch (answer) {
    case ShardAnswer::reservation_conflict:
    case ShardAnswer::job_refused:
      return claim.ok() ? held_by_another_job(*claim, who) : std::string();
    case ShardAnswer::hardware_error:
      return degraded.empty() ? std::string() : who.shard + " is degraded: " + degraded;
    case ShardAnswer::not_ready: {
      if (!degraded.empty()) return who.shard + " is degraded: " + degraded;
      const nlohmann::json* live = at(page, status_page::kRoundsLiveWorkers);
      if (live == nullptr || !live->is_array() || at(page, status_page::kRoundsWorkers) == nullptr) return {};
      return who.shard + " counts " + std::to_string(live->size()) +
             " live workers of workers=" + std::to_string(count_at(page, status_page::kRoundsWorkers)) +
             " (min_workers=" + std::to_string(count_at(page, status_page::kRoundsMinWorkers)) +
             "): each worker of a job is one session per shard, and the job must run workers= of them";
    }
    case ShardAnswer::control_refused:
      if (held_elsewhere && !claim->holder.empty())
        return who.shard + " is held by job " + in_quotes(claim->holder) +
               ": only that job's sessions may write control lines other than checkpoint and release";
      return {};
  }
  return {};
}

}  // namespace blockps
