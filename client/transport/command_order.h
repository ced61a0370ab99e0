// The order in which a transport issues a batch of commands where some wait for others (LuCommand::after):
// the one definition both transports (libiscsi's queue, the posix engines) follow.
//
// Commands without a predecessor go out in index order. A command whose predecessor completed joins a ready
// queue and goes out before the next independent command: it is the older work (in the exchange, the READ of
// a block whose WRITE has just been applied). The queue depth is thereby shared between the two directions by
// the traffic itself: each completed WRITE hands its slot to its READ, each completed READ to the next WRITE,
// and both directions of the link stay busy.
//
// One slot stays with the independent commands while any are left, or may still come (a batch that grows while it
// runs, a shard's stream: will_grow): a READ of a sync shard parks at the target until every worker has pushed its
// block, so READs holding every slot could stop this worker's remaining WRITEs, and another worker that waits on
// those, forever. A sync shard admits every WRITE of a block's open round at once (only READs, and a worker's
// second push into a round it already pushed, park), so with that slot every worker's WRITEs of a round go out in
// whatever order they are queued, and every round closes.
//
// In a batch with dependents, at most QueueLimits::exchange_writes independent commands are in flight. On one
// iSCSI session every command shares one TCP connection: a READ issued now is sent behind the data of every
// WRITE already queued, so each WRITE in flight beyond what keeps the link busy delays every pull by its
// transmission time (bench/cluster, 2 workers and 2 shard hosts on 1 Gbit/s links, 64 MiB: 16 WRITEs in flight
// per shard gave 1.15-1.22 x M/B per exchange, 2 gave 1.055-1.07; bench/RESULTS.md).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "blockps/queue_counters.h"
#include "client/transport/lu_command.h"

namespace blockps {

// Told of every command of a batch as it completes, with when it was issued, when it completed and whether it
// succeeded: the per-command spans of a worker's trace (client/trace.h), which show where an exchange's time goes,
// and the end of each exchange of a batch (client/shard_io_thread.h), which need not wait for the whole batch.
using CommandObserver = std::function<void(const LuCommand& command, std::chrono::steady_clock::time_point issued,
                                           std::chrono::steady_clock::time_point completed, bool ok)>;

// How long a transport whose batch grows while it runs (LuTransport::run_growing) waits for a completion before it
// asks for more commands again: the longest a queued exchange waits behind commands in flight (parked READs).
inline constexpr std::chrono::milliseconds kFeedPollInterval{1};

class CommandOrder {
 public:
  // "" when every `after` from command `first` on names an earlier command, else what is wrong.
  static std::string check(std::span<const LuCommand> commands, std::size_t first = 0) {
    for (std::size_t i = first; i < commands.size(); ++i) {
      const std::size_t a = commands[i].after;
      if (a != kNoPredecessor && a >= i)
        return "command " + std::to_string(i) + " waits for command " + std::to_string(a) +
               ", which is not an earlier command of the batch";
    }
    return "";
  }

  // `counters` (optional) is added to; `observer` (optional, empty: none) is told of every completion.
  CommandOrder(std::span<const LuCommand> commands, QueueLimits limits, LuQueueCounters* counters = nullptr,
               CommandObserver observer = {})
      : depth_(limits.depth < 1 ? 1 : limits.depth),
        exchange_writes_(limits.exchange_writes),
        counters_(counters),
        observer_(std::move(observer)) {
    grew(commands);
  }

  // The batch may grow while it runs (a shard's stream: exchanges queued meanwhile join it): `commands` is the whole
  // batch, its first commands those this order already has, in the same places. Each new command's predecessor
  // must be an earlier command (check()); one whose predecessor already completed with success is ready at once.
  void grew(std::span<const LuCommand> commands) {
    const std::size_t known = successors_.size();
    commands_ = commands;
    successors_.resize(commands.size());
    succeeded_.resize(commands.size(), false);
    if (observer_) issued_at_.resize(commands.size());
    for (std::size_t i = known; i < commands.size(); ++i) {
      const std::size_t a = commands[i].after;
      if (a == kNoPredecessor) {
        ++independent_left_;
        continue;
      }
      if (a >= i) continue;  // refused by check(): never issued
      has_dependents_ = true;
      if (succeeded_[a])
        ready_.push_back(i);
      else
        successors_[a].push_back(i);
    }
    independent_window_ =
        has_dependents_ && exchange_writes_ >= 1 ? exchange_writes_ : std::numeric_limits<int>::max();
  }

  // The batch may grow while it runs (a feed): one slot stays kept for independent commands even when none is
  // left, since the next one to come may be a WRITE that another worker's parked READ waits for.
  void will_grow() { growing_ = true; }

  // The command to issue now, counted as issued; nullopt when none can go until one completes (or none is left).
  // Call only with a free slot.
  std::optional<std::size_t> next() {
    const bool reserve_for_independent = (independent_left_ > 0 || growing_) && dependents_in_flight_ + 1 >= depth_;
    std::optional<std::size_t> pick;
    if (!ready_.empty() && !reserve_for_independent) {
      pick = ready_.front();
      ready_.pop_front();
      ++dependents_in_flight_;
    } else if (independent_left_ > 0 && in_flight_[0] + in_flight_[1] - dependents_in_flight_ < independent_window_) {
      while (commands_[next_independent_].after != kNoPredecessor) ++next_independent_;
      pick = next_independent_++;
      --independent_left_;
    }
    if (!pick) return std::nullopt;
    const int direction = static_cast<int>(commands_[*pick].direction);
    if (counters_ != nullptr) {
      ++counters_->commands;
      if (in_flight_[1 - direction] > 0) ++counters_->issued_beside_other_direction;
    }
    ++in_flight_[direction];
    ++issued_;
    if (observer_) issued_at_[*pick] = std::chrono::steady_clock::now();
    return pick;
  }

  // Command i (issued by next()) completed; with success its successors become ready.
  void completed(std::size_t i, bool ok) {
    if (observer_) observer_(commands_[i], issued_at_[i], std::chrono::steady_clock::now(), ok);
    --in_flight_[static_cast<int>(commands_[i].direction)];
    if (commands_[i].after != kNoPredecessor) --dependents_in_flight_;
    if (!ok) return;
    succeeded_[i] = true;
    for (std::size_t s : successors_[i]) ready_.push_back(s);
    successors_[i].clear();
  }

  bool all_issued() const { return issued_ == commands_.size(); }
  // Every independent command (WRITE) has been issued: a batch that grows takes in its next commands now. (Not when
  // all are issued: a READ may wait for a slot behind parked READs while the slot kept for WRITEs is free.) The
  // commands that joined last are thereby the ones whose WRITEs are in flight or still to go out: what has not
  // joined yet can still be chosen by its priority (client/shard_io_thread.h, ShardIoThread::Stream).
  bool wants_more() const { return independent_left_ == 0; }

 private:
  std::span<const LuCommand> commands_;
  int depth_;
  int exchange_writes_;
  bool has_dependents_ = false;
  // The batch may grow while it runs, so more independent commands may come: the slot kept for them stays kept.
  bool growing_ = false;
  int independent_window_ = 1;  // the most independent commands in flight, >= 1 (with none in flight, one goes)
  LuQueueCounters* counters_;
  CommandObserver observer_;
  std::vector<std::chrono::steady_clock::time_point> issued_at_;  // by command, when observed
  std::vector<std::vector<std::size_t>> successors_;
  std::vector<bool> succeeded_;  // by command: completed with success (a command that joins later may wait for it)
  std::deque<std::size_t> ready_;
  std::size_t independent_left_ = 0;
  std::size_t next_independent_ = 0;
  std::size_t issued_ = 0;
  int dependents_in_flight_ = 0;
  int in_flight_[2] = {0, 0};  // by IoDirection
};

}  // namespace blockps
