// The order in which a transport issues a batch of commands where some wait for others (LuCommand::after):
// the one definition both transports (libiscsi's queue, the posix engines) follow.
//
// Commands without a predecessor go out in index order. A command whose predecessor completed joins a ready
// queue and goes out before the next independent command: it is the older work (in the exchange, the READ of
// a block whose WRITE has just been applied). The queue depth is thereby shared between the two directions by
// the traffic itself: each completed WRITE hands its slot to its READ, each completed READ to the next WRITE,
// and both directions of the link stay busy.
//
// One slot stays with the independent commands while any are left: a READ of a sync shard parks at the target
// until every worker has pushed its block, so READs holding every slot could stop this worker's remaining
// WRITEs, and another worker that waits on those, forever.
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
// and the end of each exchange of a batch (client/cluster.cpp), which need not wait for the whole batch.
using CommandObserver = std::function<void(const LuCommand& command, std::chrono::steady_clock::time_point issued,
                                           std::chrono::steady_clock::time_point completed, bool ok)>;

class CommandOrder {
 public:
  // "" when every `after` names an earlier command, else what is wrong.
  static std::string check(std::span<const LuCommand> commands) {
    for (std::size_t i = 0; i < commands.size(); ++i) {
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
      : commands_(commands),
        depth_(limits.depth < 1 ? 1 : limits.depth),
        counters_(counters),
        observer_(std::move(observer)),
        successors_(commands.size()) {
    if (observer_) issued_at_.resize(commands.size());
    bool has_dependents = false;
    for (std::size_t i = 0; i < commands.size(); ++i) {
      if (commands[i].after == kNoPredecessor) {
        ++independent_left_;
      } else {
        successors_[commands[i].after].push_back(i);
        has_dependents = true;
      }
    }
    independent_window_ =
        has_dependents && limits.exchange_writes >= 1 ? limits.exchange_writes : std::numeric_limits<int>::max();
  }

  // The command to issue now, counted as issued; nullopt when none can go until one completes (or none is left).
  // Call only with a free slot.
  std::optional<std::size_t> next() {
    const bool reserve_for_independent = independent_left_ > 0 && dependents_in_flight_ + 1 >= depth_;
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
    for (std::size_t s : successors_[i]) ready_.push_back(s);
  }

  bool all_issued() const { return issued_ == commands_.size(); }

 private:
  std::span<const LuCommand> commands_;
  int depth_;
  int independent_window_ = 1;  // the most independent commands in flight, >= 1 (with none in flight, one goes)
  LuQueueCounters* counters_;
  CommandObserver observer_;
  std::vector<std::chrono::steady_clock::time_point> issued_at_;  // by command, when observed
  std::vector<std::vector<std::size_t>> successors_;
  std::deque<std::size_t> ready_;
  std::size_t independent_left_ = 0;
  std::size_t next_independent_ = 0;
  std::size_t issued_ = 0;
  int dependents_in_flight_ = 0;
  int in_flight_[2] = {0, 0};  // by IoDirection
};

}  // namespace blockps
