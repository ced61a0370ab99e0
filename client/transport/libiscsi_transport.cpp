// The libiscsi transport: an IscsiLun session whose commands run on libiscsi's own poll loop (run_commands),
// and that logs in again when its session is lost.
//
// What is sent again after a lost session, and why a push is never applied twice:
//   - a READ (a pull) that had no answer: reading the weights again has no effect on the shard;
//   - a command never handed to libiscsi: it is sent for the first time. IscsiLun finds a connection the target
//     closed while no command was in flight before it hands the session a command, so such a batch comes back
//     with every command not issued (a shard killed and restarted between two steps loses none of the next);
//   - a WRITE (a push) that had no answer is NOT sent again. The target may have applied it before the session
//     broke (the answer was lost, not the command), and a second WRITE of the same gradient would add it twice;
//     it is counted (LuQueueCounters::unanswered_writes_dropped) and that gradient is lost, as a gradient of a
//     worker that died would be. A READ that waited for it no longer does.
//   - a command the target answered (GOOD or a refusal) is never sent again.
// The session comes back with the same initiator name and ISID, so the target treats the login as the same
// worker's session reinstatement (RFC 7143 6.3.5) and closes what is left of the old one. A session of a job
// (join_job) writes its job= line again before anything is sent again: the shard counts a new login as a new
// session, which is no member of the job until it says so (a restarted shard knows the job from its checkpoint,
// not its sessions), and would refuse every command of it with RESERVATION CONFLICT.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

#include "client/transport/iscsi_lun.h"
#include "client/transport/lu_transport.h"
#include "contract/control_lines.h"

namespace blockps {
namespace {

using Clock = std::chrono::steady_clock;

// Pauses between login attempts: from the first, doubling, at most the last. A restarted tgtd takes a second or
// two to listen and configure its LUs; a shard whose host is down should not be hammered.
constexpr std::chrono::milliseconds kFirstRetryPause{250};
constexpr std::chrono::milliseconds kLongestRetryPause{4000};

std::string seconds_text(std::chrono::milliseconds ms) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", static_cast<double>(ms.count()) / 1000.0);
  return text;
}

class LibiscsiTransport final : public LuTransport {
 public:
  LibiscsiTransport(IscsiLun lun, std::string name, std::chrono::milliseconds reconnect_for)
      : lun_(std::move(lun)), name_(std::move(name)), reconnect_for_(reconnect_for) {}
  const std::string& describe() const override { return name_; }
  std::uint64_t capacity_bytes() const override { return lun_.capacity_bytes(); }
  std::uint32_t block_size() const override { return lun_.block_size(); }
  std::uint64_t max_command_bytes() const override { return lun_.max_command_bytes(); }
  std::uint64_t max_safe_write_bytes() const override { return kLibiscsiImmediateWriteBytes; }
  LuQueueCounters queue_counters() const override { return counters_; }
  std::string last_session_loss() const override { return last_loss_; }

  std::optional<LuFailure> run_growing(std::vector<LuCommand>& commands, QueueLimits limits,
                                       CommandFeed* feed) override {
    // The commands still to run (indices into `commands`, ascending). The first try runs `commands` itself; after a
    // lost session, a copy of the pending ones with their `after` renumbered into it (`again`).
    std::vector<std::size_t> pending(commands.size());
    for (std::size_t i = 0; i < pending.size(); ++i) pending[i] = i;
    std::vector<LuCommand> again;
    bool first_try = true;
    std::optional<Clock::time_point> give_up_at;  // set when the session is first found lost
    std::string lost_because = std::exchange(lost_while_idle_, {});
    if (lost_because.empty()) lost_because = "an earlier transport failure dropped the session";
    const auto first_pending = [&] { return pending.empty() ? commands.size() : pending.front(); };
    // What the feed adds goes to `commands` (the caller's, whose indices the failures name) and is pending; on a
    // try after a lost session, renumbered into that try's batch too.
    const IscsiLun::GrowBatch grow = [&](std::vector<LuCommand>& batch) {
      const std::size_t known = commands.size();
      feed->more(commands);
      for (std::size_t i = known; i < commands.size(); ++i) {
        pending.push_back(i);
        if (&batch != &commands) batch.push_back(renumbered_one(commands, pending, pending.size() - 1));
      }
    };
    for (;;) {
      if (!lun_.connected()) {
        if (reconnect_for_.count() == 0) return LuFailure::io(first_pending(), "disconnected (" + lost_because + ")");
        if (!give_up_at) give_up_at = Clock::now() + reconnect_for_;
        if (std::optional<std::string> why = log_in_again(*give_up_at)) {
          return LuFailure::unreachable(first_pending(), lost_because + "; not logged in again within " +
                                                             seconds_text(reconnect_for_) +
                                                             " s ([client] reconnect_s); the last login: " + *why);
        }
        last_loss_ = lost_because;
        if (!join_.lines.empty()) {
          const ScsiResult joined = write_join();
          if (!joined.ok() && !lun_.connected()) {  // lost again: log in again, within the same time
            lost_because = "the session was lost again while it joined its job: " + joined.describe();
            continue;
          }
          if (!joined.ok()) return join_failure(first_pending(), joined, "logged in again, and ");
        }
      }
      if (!first_try) again = renumbered(commands, pending);
      std::vector<LuCommand>& batch = first_try ? commands : again;
      first_try = false;
      const CommandBatchResult r = feed != nullptr
                                       ? lun_.run_growing_commands(batch, grow, limits, &counters_, observer_)
                                       : lun_.run_commands(batch, limits, &counters_, observer_);
      if (r.ok()) return std::nullopt;
      const std::size_t failed = r.failed_command < pending.size() ? pending[r.failed_command] : first_pending();
      if (!r.session_lost || reconnect_for_.count() == 0 || r.outcomes.size() != batch.size())
        return failure_of(failed, r.error);
      lost_because = "the session was lost: " + r.error.describe();
      std::vector<std::size_t> still;
      for (std::size_t j = 0; j < batch.size(); ++j) {
        switch (r.outcomes[j]) {
          case CommandOutcome::succeeded:
            break;
          case CommandOutcome::refused:  // the target's answer stands: it is this batch's failure
            return failure_of(pending[j], r.error);
          case CommandOutcome::unanswered:
            if (batch[j].direction == IoDirection::write) {
              ++counters_.unanswered_writes_dropped;
              break;
            }
            still.push_back(pending[j]);
            break;
          case CommandOutcome::not_issued:
            still.push_back(pending[j]);
            break;
        }
      }
      if (still.empty()) return std::nullopt;
      pending = std::move(still);
    }
  }

  // A session found closed here is dropped (IscsiLun::keep_alive); the next run() logs in again as after any
  // lost session, before it sends anything, and says why.
  void keep_alive() override {
    if (!lun_.connected()) return;  // already lost: the next run() logs in again
    if (const ScsiResult r = lun_.keep_alive(); !r.ok())
      lost_while_idle_ = "the session was lost while idle: " + r.describe();
  }

  std::optional<LuFailure> join_job(const SessionJoin& join) override {
    join_ = join;
    if (join_.lines.empty()) return std::nullopt;
    join_write_.assign(control::control_write_bytes(join_.lines.size(), join_.status_block_bytes), std::byte{0});
    std::memcpy(join_write_.data(), join_.lines.data(), join_.lines.size());
    const ScsiResult r = write_join();
    if (r.ok()) return std::nullopt;
    return join_failure(0, r, "");
  }

 private:
  // A join= write that failed (`context`: what happened before it, "" or "logged in again, and "): where the target
  // answered, the shard refused the job (conflict; nothing of the batch was sent again); else the session's own
  // failure as it is (no answer came: it did not refuse anything).
  LuFailure join_failure(std::size_t command, const ScsiResult& r, const std::string& context) const {
    LuFailure f = failure_of(command, r);
    const std::string after = context.empty() ? "" : " (nothing was sent again)";
    if (!f.answered()) {
      f.status = Status::Error(
          f.status.code(), context + "this session's " + join_words() + " could not be sent: " + f.reason() + after);
      return f;
    }
    return std::move(f).refusing_job([&](const std::string& why) {
      return context + "the shard refused this session's " + join_words() + ": " + why + after;
    });
  }

  static LuFailure failure_of(std::size_t command, const ScsiResult& r) {
    if (r.status < kScsiTransportCancelled)  // the target's answer, not libiscsi's
      return LuFailure::answered(command, r.status, r.sense_key, r.describe());
    return LuFailure::io(command, r.describe());
  }

  ScsiResult write_join() { return lun_.write_to_lun(join_.status_lun, join_.status_block_bytes, 0, join_write_); }

  // "job=NAME" (the lines without their newline), for messages.
  std::string join_words() const {
    std::string words = join_.lines;
    while (!words.empty() && words.back() == '\n') words.pop_back();
    return "`" + words + "`";
  }

  // commands[pending[k]], its `after` pointing at its predecessor's place among `pending`, or at none where the
  // predecessor is no longer pending (it succeeded, or it was a WRITE given up above). `pending` ascends.
  static LuCommand renumbered_one(std::span<const LuCommand> commands, const std::vector<std::size_t>& pending,
                                  std::size_t k) {
    LuCommand c = commands[pending[k]];
    if (c.after != kNoPredecessor) {
      const auto end = pending.begin() + static_cast<std::ptrdiff_t>(k);
      const auto it = std::lower_bound(pending.begin(), end, c.after);
      c.after = it != end && *it == c.after ? static_cast<std::size_t>(it - pending.begin()) : kNoPredecessor;
    }
    return c;
  }

  // renumbered_one() of every pending command: the batch of a try after a lost session.
  static std::vector<LuCommand> renumbered(std::span<const LuCommand> commands,
                                           const std::vector<std::size_t>& pending) {
    std::vector<LuCommand> batch;
    batch.reserve(pending.size());
    for (std::size_t k = 0; k < pending.size(); ++k) batch.push_back(renumbered_one(commands, pending, k));
    return batch;
  }

  // Logs in again, with pauses that grow, until it works or `give_up_at` would pass. nullopt on success, else the
  // last login's error.
  std::optional<std::string> log_in_again(Clock::time_point give_up_at) {
    std::chrono::milliseconds pause = kFirstRetryPause;
    for (;;) {
      Status s = lun_.reconnect();
      if (s.ok()) {
        ++counters_.reconnects;
        return std::nullopt;
      }
      const auto now = Clock::now();
      if (now >= give_up_at) return s.message();
      std::this_thread::sleep_for(std::min<Clock::duration>(pause, give_up_at - now));  // the last try at the limit
      pause = std::min(pause * 2, kLongestRetryPause);
    }
  }

  IscsiLun lun_;
  std::string name_;
  std::string last_loss_;  // why the session was last lost, once logged in again
  std::chrono::milliseconds reconnect_for_;
  LuQueueCounters counters_;
  std::string lost_while_idle_;        // why keep_alive() found the session lost, for the next run()'s messages
  SessionJoin join_;                   // lines empty: this session belongs to no job
  std::vector<std::byte> join_write_;  // join_.lines, NUL-padded to whole blocks of the status LU
};

}  // namespace

Result<std::unique_ptr<LuTransport>> open_libiscsi_transport(const std::string& url, const TransportOptions& options) {
  IscsiLun lun;
  ConnectOptions connect;
  connect.timeout = options.timeout;
  if (Status s = lun.connect(url, options.initiator, connect); !s.ok()) return s;
  return std::unique_ptr<LuTransport>(
      std::make_unique<LibiscsiTransport>(std::move(lun), "libiscsi " + url, options.reconnect_for));
}

}  // namespace blockps
