#include "ps_backend/control/job_claim.h"

#include <algorithm>
#include <ctime>
#include <utility>

namespace blockps {
namespace {

// A job's sessions come and go with restarts and reconnects (tgt tells a store nothing of logouts): beyond this
// many, the one idle longest is forgotten. A live session of a running job sends a command every step.
constexpr std::size_t kMaxSessions = 4096;
// Refused sessions remembered only to log each once.
constexpr std::size_t kMaxRefusedSessions = 4096;

std::int64_t ms_between(JobClaim::Clock::time_point a, JobClaim::Clock::time_point b) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(b - a).count();
}

std::string seconds_text(std::int64_t ms) {
  return std::to_string(ms / 1000) + "." + std::to_string(ms % 1000 / 100) + " s";
}

}  // namespace

std::string sessions_joined(std::uint64_t n) {
  return std::to_string(n) + (n == 1 ? " session joined" : " sessions joined");
}

JobClaim::JobClaim(std::uint32_t idle_s, Now now) : idle_s_(idle_s), now_(std::move(now)) {}

bool JobClaim::lapsed_locked(Clock::time_point now) const {
  // A job with a live session holds on however long it is quiet (an evaluation pass, a checkpoint save); one whose
  // sessions are all gone (it ended, or died) keeps the shard for idle_s after its last command, so that a torchrun
  // restart, or a shard restarted from its checkpoint, finds it still the job's.
  return !holder_.empty() && idle_s_ > 0 && sessions_.empty() && now - last_active_ >= std::chrono::seconds(idle_s_);
}

void JobClaim::forget_gone_sessions(const SessionProbe& alive) {
  std::lock_guard lock(mutex_);
  std::erase_if(sessions_, [&](const auto& s) { return !alive(std::get<0>(s.first), std::get<1>(s.first)); });
}

void JobClaim::hold_locked(const std::string& job, Clock::time_point now) {
  holder_ = job;
  claimed_unix_ = static_cast<std::uint64_t>(std::time(nullptr));
  last_active_ = now;
  sessions_.clear();
  refused_sessions_.clear();
}

void JobClaim::join_locked(const WorkerRef& session, Clock::time_point now) {
  last_active_ = now;
  sessions_[key_of(session)] = now;
  if (sessions_.size() <= kMaxSessions) return;
  sessions_.erase(std::min_element(sessions_.begin(), sessions_.end(),
                                   [](const auto& a, const auto& b) { return a.second < b.second; }));
}

Result<JobClaim::Joined> JobClaim::join(const WorkerRef& session, const std::string& job, bool takeover) {
  const Clock::time_point now = now_();
  std::lock_guard lock(mutex_);
  Joined joined;
  if (holder_.empty()) {
    hold_locked(job, now);
  } else if (holder_ == job) {
    joined.kind = Joined::Kind::joined;
  } else if (takeover || lapsed_locked(now)) {
    joined = {Joined::Kind::took_over, holder_, !takeover};
    hold_locked(job, now);
    ++takeovers_;
  } else {
    ++refused_;
    return Status::Error(
        StatusCode::invalid_argument,
        "job " + holder_ + " holds it (" +
            (sessions_.empty() ? std::string("none of its sessions is left") : sessions_joined(sessions_.size())) +
            ", its last command " + seconds_text(ms_between(last_active_, now)) + " ago" +
            (idle_s_ == 0 ? "; claim_idle_s=0: the claim never lapses"
             : sessions_.empty()
                 ? "; the claim lapses claim_idle_s=" + std::to_string(idle_s_) + " s after its last command"
                 : "; the claim lapses claim_idle_s=" + std::to_string(idle_s_) +
                       " s after its last command once none of its sessions is left") +
            ")");
  }
  join_locked(session, now);
  return joined;
}

std::string JobClaim::release() {
  std::lock_guard lock(mutex_);
  std::string previous = std::move(holder_);
  holder_.clear();
  claimed_unix_ = 0;
  sessions_.clear();
  refused_sessions_.clear();
  return previous;
}

void JobClaim::restore(const std::string& job, std::uint64_t claimed_unix) {
  const Clock::time_point now = now_();
  std::lock_guard lock(mutex_);
  hold_locked(job, now);
  if (claimed_unix != 0) claimed_unix_ = claimed_unix;
}

JobClaim::Check JobClaim::check(const WorkerRef& session) {
  std::lock_guard lock(mutex_);
  if (holder_.empty()) return {};
  const auto it = sessions_.find(view_of(session));
  Check a;
  if (it != sessions_.end()) {
    it->second = last_active_ = now_();
    a.verdict = Verdict::member;
    return a;
  }
  ++refused_;
  a.verdict = Verdict::refused;
  a.first_refusal = refused_sessions_.size() < kMaxRefusedSessions &&
                    refused_sessions_.find(view_of(session)) == refused_sessions_.end() &&
                    refused_sessions_.insert(key_of(session)).second;
  a.holder = holder_;
  a.sessions = sessions_.size();
  return a;
}

std::string JobClaim::holder() const {
  std::lock_guard lock(mutex_);
  return holder_;
}

ClaimStatus JobClaim::status() const {
  const Clock::time_point now = now_();
  std::lock_guard lock(mutex_);
  ClaimStatus s;
  s.holder = holder_;
  s.idle_s = idle_s_;
  s.refused = refused_;
  s.takeovers = takeovers_;
  if (holder_.empty()) return s;
  s.claimed_unix = claimed_unix_;
  s.sessions = sessions_.size();
  s.last_active_ms_ago = std::max<std::int64_t>(0, ms_between(last_active_, now));
  s.lapsed = lapsed_locked(now);
  return s;
}

}  // namespace blockps
