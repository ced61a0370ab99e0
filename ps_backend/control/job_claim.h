// Which job holds a shard (docs/OPTIONS.md, "Jobs and places"): its name, the sessions that joined it, when one of
// them last sent a command, and the commands of other sessions it refused. A shard serves one job at a time: a
// session joins with the control line job=NAME; while a job holds the shard, the grad and weights LUs refuse the
// sessions that did not join it (the admission gate, ps_backend/shard/admission_gate.h, decides with this claim's
// check). Thread-safe: admissions run on tgtd's main thread, control lines and the status page on I/O threads.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <tuple>

#include "contract/result.h"
#include "ps_backend/rounds/worker_ref.h"

namespace blockps {

/// Whether a session (tgt's target and I_T nexus) still exists: tgt's it_nexus_lookup, on its main thread only.
using SessionProbe = std::function<bool(int tid, std::uint64_t itn)>;

/// "1 session joined", "N sessions joined": how the refusals count a job's sessions.
std::string sessions_joined(std::uint64_t n);

/// What the status page shows of a claim (contract/status_page.h, /job).
struct ClaimStatus {
  std::string holder;  // "" when unclaimed
  std::uint64_t claimed_unix = 0;
  std::uint64_t sessions = 0;
  std::int64_t last_active_ms_ago = -1;  // -1 when unclaimed
  std::uint32_t idle_s = 0;
  bool lapsed = false;
  std::uint64_t refused = 0, takeovers = 0;
};

class JobClaim {
 public:
  using Clock = std::chrono::steady_clock;
  using Now = std::function<Clock::time_point()>;

  /// `idle_s` (bsopts claim_idle_s): how long after its last command a holder with no session left may be replaced
  /// by another job's job= line; 0: never. `now`: the clock that measures it (tests pass their own).
  explicit JobClaim(std::uint32_t idle_s, Now now = Clock::now);

  /// How a job= line changed the claim.
  struct Joined {
    enum class Kind { claimed, joined, took_over } kind = Kind::claimed;
    std::string previous;  // took_over: the job that held the shard
    bool lapsed = false;   // took_over: without `takeover`, the previous holder having been idle for idle_s
  };
  /// `session` joins `job`: an unclaimed shard is claimed, the holder's claim joined; a shard another job holds
  /// is taken over with `takeover` or when that job has been idle for idle_s (its sessions are refused from then
  /// on), else refused (invalid_argument, naming the holder, its sessions and idle time) and counted, with
  /// nothing changed. `job` must be a control::is_name (control/control_parser.cpp checks it).
  Result<Joined> join(const WorkerRef& session, const std::string& job, bool takeover);
  /// Forget the joined sessions `alive` says are gone (tgt tells a store nothing of logouts: the caller asks, on
  /// tgt's main thread). A claim whose sessions are all gone lapses claim_idle_s after its last command.
  void forget_gone_sessions(const SessionProbe& alive);
  /// Drop the claim; returns the job that held it ("" when none did).
  std::string release();
  /// A claim read from a checkpoint: `job` holds the shard, no session has joined yet, and its idle clock starts
  /// now.
  void restore(const std::string& job, std::uint64_t claimed_unix);

  /// How the claim stands toward one command of `session` that it fences (a grad-LU READ or WRITE, a weights-LU
  /// WRITE, a control line that acts on training). An input of the admission (ps_backend/shard/admission_gate.h)
  /// and of the control lines (shard_control.h), not an answer of its own: they decide what becomes of the command.
  enum class Verdict {
    open,    // unclaimed: as if there were no claims
    member,  // the session joined the holder: its activity is counted
    refused  // another job holds the shard: counted
  };
  struct Check {
    Verdict verdict = Verdict::open;
    // refused: whether it is the first time for this session since the holder changed, and who holds the shard
    bool first_refusal = false;
    std::string holder;
    std::uint64_t sessions = 0;
  };
  Check check(const WorkerRef& session);

  /// The holder ("" when unclaimed).
  std::string holder() const;
  ClaimStatus status() const;

 private:
  // A session: tgt's target and I_T nexus and the initiator's name (the nexus number alone is recycled). Looked
  // up without a copy of the name: admissions run on tgtd's main thread for every fenced command.
  using SessionKey = std::tuple<int, std::uint64_t, std::string>;
  using SessionView = std::tuple<int, std::uint64_t, std::string_view>;
  static SessionKey key_of(const WorkerRef& w) { return {w.tid, w.itn, w.iqn}; }
  static SessionView view_of(const WorkerRef& w) { return {w.tid, w.itn, w.iqn}; }
  // Orders keys and views alike (as views: comparing a tuple of string with one of string_view is not portable).
  struct SessionOrder {
    using is_transparent = void;
    template <class A, class B>
    bool operator()(const A& a, const B& b) const {
      return SessionView(std::get<0>(a), std::get<1>(a), std::get<2>(a)) <
             SessionView(std::get<0>(b), std::get<1>(b), std::get<2>(b));
    }
  };
  bool lapsed_locked(Clock::time_point now) const;
  void hold_locked(const std::string& job, Clock::time_point now);
  void join_locked(const WorkerRef& session, Clock::time_point now);

  const std::uint32_t idle_s_;
  const Now now_;
  mutable std::mutex mutex_;
  std::string holder_;
  std::uint64_t claimed_unix_ = 0;
  Clock::time_point last_active_{};
  std::map<SessionKey, Clock::time_point, SessionOrder> sessions_;  // joined, with each one's last command
  std::set<SessionKey, SessionOrder> refused_sessions_;  // refused since the holder changed (logged once each)
  std::uint64_t refused_ = 0, takeovers_ = 0;
};

}  // namespace blockps
