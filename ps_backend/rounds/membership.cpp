#include "ps_backend/rounds/membership.h"

#include "contract/log.h"

namespace blockps {
namespace {

constexpr std::size_t kDropLogLines = 8;

}  // namespace

Membership::Membership(const RoundPolicy& policy)
    : workers_(policy.workers),
      max_workers_(policy.most_workers()),
      min_workers_(policy.min_workers),
      timeout_(std::chrono::milliseconds(policy.worker_timeout_ms)) {}

void Membership::admitted_push(const WorkerRef& worker, Clock::time_point now) {
  auto [it, joined] = members_.try_emplace(worker.itn);
  Member& m = it->second;
  if (joined) {  // tid, session and IQN of a session never change
    m.ref = worker;
    m.joined = now;
    m.late = formed_;
    log_line("rounds: worker " + worker.iqn + " (session " + std::to_string(worker.itn) + ") joined");
  }
  m.last_push = now;
  if (members_.size() >= workers_) formed_ = true;
}

void Membership::landed_push(std::uint64_t itn, Clock::time_point now) {
  const auto m = members_.find(itn);
  if (m == members_.end()) return;
  m->second.last_push = now;
  ++m->second.pushes;
}

bool Membership::drop(std::uint64_t itn, const std::string& why) {
  const auto it = members_.find(itn);
  if (it == members_.end()) return false;
  const std::string line = it->second.ref.iqn + " (session " + std::to_string(itn) + "): " + why;
  log_line("rounds: worker dropped: " + line);
  drop_log_.push_back(line);
  if (drop_log_.size() > kDropLogLines) drop_log_.erase(drop_log_.begin());
  members_.erase(it);
  ++dropped_;
  if (members_.empty() && formed_) {
    // Every worker is gone: the job ended or all its ranks died (torchrun restarts them all). The next ranks are a
    // new formation; were the shard to stay formed, the first of them would close rounds alone (quorum
    // min_workers) and the others would read averages they are not in.
    formed_ = false;
    log_line("rounds: every worker left; the next rounds wait for all " + std::to_string(workers_) +
             " expected workers again");
  }
  return true;
}

std::vector<std::uint64_t> Membership::silent(Clock::time_point now) const {
  std::vector<std::uint64_t> silent;
  for (const auto& [itn, m] : members_)
    if (now - m.last_push > timeout_) silent.push_back(itn);
  return silent;
}

std::string Membership::full_reason(const WorkerRef& worker) const {
  std::string names;
  for (const auto& [itn, m] : members_)
    names += (names.empty() ? "" : ", ") + m.ref.iqn + " (session " + std::to_string(itn) + ")";
  const std::string bound =
      max_workers_ == workers_ ? "workers=" + std::to_string(workers_) : "max_workers=" + std::to_string(max_workers_);
  return "membership full: " + bound + " and " + std::to_string(members_.size()) + " workers are live (" + names +
         "); " + worker.iqn + " (session " + std::to_string(worker.itn) +
         ") would be one more: run the job with at most that many ranks (or hosts), or give the shards max_workers= "
         "as many as may push to them";
}

std::string Membership::degraded_reason() const {
  if (!degraded()) return "";
  std::string why =
      "live workers " + std::to_string(members_.size()) + " < min_workers=" + std::to_string(min_workers_);
  if (!drop_log_.empty()) why += "; last drop: " + drop_log_.back();
  return why;
}

}  // namespace blockps
