#include "ps_backend/control/shard_control.h"

#include <utility>

#include "contract/log.h"
#include "ps_backend/shard/served_shard.h"

namespace blockps {
namespace {

Status refuse(std::string why) { return Status::Error(StatusCode::invalid_argument, std::move(why)); }

/// Whether the write acts on the training (anything but checkpoint and release): then only the holder's sessions
/// may send it.
bool acts_on_training(const ControlWrite& write) {
  bool acts = write.place.has_value();
  for (const ControlAction& action : write.actions) acts = acts || action.kind != ControlAction::Kind::checkpoint;
  return acts;
}

}  // namespace

Status ShardControl::apply(std::string_view text, const WorkerRef* sender) {
  const Result<ControlWrite> parsed = parse_control_lines(text);
  if (!parsed.ok()) return parsed.status();
  const ControlWrite& write = *parsed;
  for (const ControlAction& action : write.actions)
    if (action.kind == ControlAction::Kind::reset_rounds && !shard_.rounds())
      return refuse("control reset-rounds: this shard is mode=async and has no rounds");
  const WorkerRef unknown;
  const WorkerRef& who = sender ? *sender : unknown;
  const std::string session = "session " + std::to_string(who.itn) + " of " + (sender ? who.iqn : "(unknown)");

  std::lock_guard serial(mutex_);
  if (Status claim = check_claim(write, who, session); !claim.ok()) return claim;
  if (Status place = check_place(write); !place.ok()) return place;
  if (Status joined = join(write, sender); !joined.ok()) return joined;
  // Applied: nothing below is refused.
  if (write.release) release(session);
  if (write.place) set_place(*write.place, session);
  for (const ControlAction& action : write.actions)
    if (Status done = act(action, sender); !done.ok()) return done;
  return Status::Ok();
}

Status ShardControl::check_claim(const ControlWrite& write, const WorkerRef& who, const std::string& session) {
  if (write.job || !acts_on_training(write)) return Status::Ok();
  const JobClaim::Check claim = shard_.claim().check(who);
  if (claim.verdict != JobClaim::Verdict::refused) return Status::Ok();
  return refuse("control: shard " + shard_.path() + " is held by job " + claim.holder + " (" +
                sessions_joined(claim.sessions) + ") and " + session + " has not joined it: send job=" + claim.holder +
                " first (in the same write or before), take the shard over (job=NAME with takeover), or release it "
                "(release)");
}

Status ShardControl::check_place(const ControlWrite& write) {
  if (!write.place) return Status::Ok();
  const std::optional<Place> held = shard_.place();
  if (!held || *held == *write.place || write.replace_place) return Status::Ok();
  return refuse("control place=" + format_place(*write.place) + ": shard " + shard_.path() + " holds place " +
                format_place(*held) +
                ": a cluster file that lists the shards in another order, another layout or another model opens it "
                "in the wrong place; fix the cluster file, or re-lay the model deliberately (replace-place in the "
                "same write: blockps init)");
}

Status ShardControl::join(const ControlWrite& write, const WorkerRef* sender) {
  if (!write.job) return Status::Ok();
  if (!sender) return refuse("control job=" + *write.job + ": the session that sent it is not known to the shard");
  const Result<JobClaim::Joined> joined = shard_.claim().join(*sender, *write.job, write.takeover);
  if (!joined.ok())
    return refuse("control job=" + *write.job + ": shard " + shard_.path() +
                  " is held by another job: " + joined.message() + "; take it over with job=" + *write.job +
                  " and takeover in one write (blockps --takeover), or release it (blockps release)");
  joined_job(*joined, *write.job, *sender);
  return Status::Ok();
}

void ShardControl::joined_job(const JobClaim::Joined& joined, const std::string& job, const WorkerRef& sender) {
  const std::string& path = shard_.path();
  const std::string session = "session " + std::to_string(sender.itn) + " of " + sender.iqn;
  switch (joined.kind) {
    case JobClaim::Joined::Kind::joined:
      log_line(path + ": job " + job + ": " + session + " joined");
      return;
    case JobClaim::Joined::Kind::claimed:
      log_line(path + ": job " + job + " claims the shard (" + session + ")");
      shard_.note_mutation();  // the next checkpoint records the holder
      return;
    case JobClaim::Joined::Kind::took_over:
      break;
  }
  const std::string why = "job " + job + " took shard " + path + " over from job " + joined.previous +
                          (joined.lapsed ? " (whose claim lapsed: no session left and no command for claim_idle_s=" +
                                               std::to_string(shard_.config().claim_idle_s) + " s)"
                                         : " (takeover by " + session + ")");
  log_line(path + ": " + why);
  shard_.note_mutation();
  // The old job's rounds must not mix into the new job's: its members, open rounds and parked commands go. The
  // weights are the new job's to set.
  if (Rounds* rounds = shard_.rounds()) rounds->restart(why);
  shard_.weights_init().restart();
}

void ShardControl::release(const std::string& session) {
  const std::string previous = shard_.claim().release();
  log_line(shard_.path() + ": control: release by " + session +
           (previous.empty() ? ": the shard was not held" : ": job " + previous + " no longer holds the shard"));
  if (!previous.empty()) shard_.note_mutation();  // the next checkpoint records it
}

void ShardControl::set_place(const Place& place, const std::string& session) {
  const std::optional<Place> previous = shard_.set_place(place);
  if (previous == place) return;
  log_line(shard_.path() + ": control: place " + format_place(place) +
           (previous ? " replaces " + format_place(*previous) : std::string(" set")) + " by " + session);
  shard_.note_mutation();
}

Status ShardControl::act(const ControlAction& action, const WorkerRef* sender) {
  switch (action.kind) {
    case ControlAction::Kind::set_lr:
      shard_.set_lr(action.lr);  // the next checkpoint records the new lr
      log_line(shard_.path() + ": control: " + action.line);
      return Status::Ok();
    case ControlAction::Kind::checkpoint:
      if (Status written = shard_.checkpoint(); !written.ok())
        return Status::Error(written.code(), "control checkpoint: " + written.message());
      return Status::Ok();
    case ControlAction::Kind::reset_rounds:
      shard_.rounds()->reset();
      return Status::Ok();
    case ControlAction::Kind::init_weights:
    case ControlAction::Kind::init_done:
      if (!sender) return refuse("control " + action.line + ": the session that sent it is not known to the shard");
      if (action.kind == ControlAction::Kind::init_done) return shard_.weights_init().done(*sender);
      shard_.weights_init().ask(*sender, shard_.trained());
      return Status::Ok();
  }
  return Status::Ok();
}

}  // namespace blockps
