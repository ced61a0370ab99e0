// The workers of a shard with rounds: who joined and when, when each last pushed, who was dropped and why, and
// whether the live ones are too few to wait for (min_workers). Not thread-safe: the coordinator (rounds.h) and
// its round mode call it under their shared lock.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ps_backend/config/round_policy.h"
#include "ps_backend/rounds/worker_ref.h"

namespace blockps {

class Membership {
 public:
  using Clock = std::chrono::steady_clock;
  struct Member {
    WorkerRef ref;
    Clock::time_point joined, last_push;
    std::uint64_t pushes = 0;  // landed
    // Joined a formed shard (a host added to a running job): the rounds already open when it joined do not wait
    // for it. The members that formed the shard hold every round.
    bool late = false;
  };

  /// Reads workers, max_workers, min_workers and worker_timeout_ms of `policy`.
  explicit Membership(const RoundPolicy& policy);

  /// A push of `worker` was admitted at `now`: its first makes it a member.
  void admitted_push(const WorkerRef& worker, Clock::time_point now);
  /// A push of member `itn` landed at `now` (nothing for a worker dropped meanwhile).
  void landed_push(std::uint64_t itn, Clock::time_point now);
  /// Drop `itn`, logged and kept in the drop log with `why`; false when it is no member. The last member's drop
  /// un-forms the shard.
  bool drop(std::uint64_t itn, const std::string& why);
  /// The members with no push for worker_timeout_ms at `now`.
  std::vector<std::uint64_t> silent(Clock::time_point now) const;

  bool contains(std::uint64_t itn) const { return members_.count(itn) != 0; }
  /// `worker` is not a member and max_workers are already: a push of it would make one more worker than the shard
  /// takes (a job with more ranks than max_workers=, or a second set of sessions).
  bool full_without(const WorkerRef& worker) const { return !contains(worker.itn) && members_.size() >= max_workers_; }
  /// Why `worker` is refused when full_without(worker): the count and the members, in words.
  std::string full_reason(const WorkerRef& worker) const;
  std::size_t size() const { return members_.size(); }
  const std::map<std::uint64_t, Member>& members() const { return members_; }

  /// Formed: the expected workers were all there once, or a round closed without the missing ones; no longer
  /// once every member was dropped (the next workers form anew).
  bool formed() const { return formed_; }
  void mark_formed() { formed_ = true; }
  /// After the rounds were reset: formed again only when the expected workers are there now.
  void reform() { formed_ = members_.size() >= workers_; }
  /// The live workers a round waits for before it closes without stragglers: `workers` until the cluster
  /// formed, then min_workers.
  std::size_t quorum() const { return formed_ ? min_workers_ : workers_; }

  /// The cluster formed and fewer than min_workers are live: commands that would wait are refused instead.
  bool degraded() const { return formed_ && members_.size() < min_workers_; }
  /// Why commands are refused now ("" when they are not), with the last drop.
  std::string degraded_reason() const;

  std::uint64_t dropped() const { return dropped_; }
  /// The last few "IQN (session N): why" drop lines, oldest first.
  const std::vector<std::string>& recent_drops() const { return drop_log_; }

 private:
  const std::size_t workers_, max_workers_, min_workers_;
  const std::chrono::milliseconds timeout_;
  std::map<std::uint64_t, Member> members_;
  bool formed_ = false;
  std::uint64_t dropped_ = 0;
  std::vector<std::string> drop_log_;
};

}  // namespace blockps
