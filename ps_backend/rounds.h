// Synchronous rounds (mode=sync, docs/OPTIONS.md, "Synchronous rounds"): per block and round the workers' gradients
// are collected, averaged in f32 in a fixed worker order and applied once; worker membership; and which
// commands must wait ("park") until a round closes. mode=ssp:K shares the membership and parking: every push is
// applied at once, and a worker's push of a block waits while it is more than K pushes ahead of the slowest
// live worker on that block. Nothing here knows tgt: the glue asks before it queues a
// grad-LU READ or WRITE (admit_*), hands parked commands back when woken (process_parked), and reports which
// sessions still exist (the `alive` callback).
//
// Threads: admit_*, process_parked and the alive callback run on tgtd's main thread; land_push on tgt's I/O
// pool threads; a keeper thread closes rounds on the straggler deadline and drops silent workers. The math of a
// round (sum, average, optimizer step) never runs on the main thread.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "aggregator/model_shard.h"
#include "ps_backend/lu_options.h"

namespace blockps {

/// A worker is one I_T nexus (session): tid + itn locate it in tgt, iqn names it.
struct WorkerRef {
  int tid = 0;
  std::uint64_t itn = 0;
  std::string iqn;
};

/// What the glue does with a command now.
enum class Admission {
  run,       // queue it to the I/O threads
  park,      // hold it (tgt's asynchronous completion); it comes back through process_parked
  not_ready  // fail it: CHECK CONDITION, NOT READY, ASC/ASCQ 0x04/0x03 (see degraded_reason())
};

/// Latency samples (ns) over a sliding window, for the status page's percentiles.
/// Lock-free: every push adds a sample from tgt's I/O threads.
class LatencyWindow {
 public:
  void add(std::uint64_t ns);
  /// {"count", "p50_ns", "p90_ns", "p99_ns", "max_ns"} over the last kSamples samples, and since the start
  /// "total_count" and "total_ns" (what a monitoring system's summary needs: blockps exporter).
  nlohmann::json percentiles() const;

 private:
  static constexpr std::size_t kSamples = 4096;
  std::array<std::atomic<std::uint64_t>, kSamples> samples_{};
  std::atomic<std::uint64_t> added_{0};
  std::atomic<std::uint64_t> total_ns_{0};
};

class SyncRounds {
 public:
  /// Starts the keeper thread. `model` must outlive this object. Round counters start at the blocks' step
  /// counts (a shard loaded from a checkpoint resumes its rounds). `on_applied(ns)` is called after each round
  /// is applied, with the time its sum and optimizer step took.
  SyncRounds(ModelShard& model, const RoundPolicy& policy, std::function<void(std::uint64_t ns)> on_applied);
  ~SyncRounds();
  SyncRounds(const SyncRounds&) = delete;
  SyncRounds& operator=(const SyncRounds&) = delete;

  /// A grad-LU WRITE of [offset, offset+len) by `worker` (the first one makes it a member). run: its blocks are
  /// claimed for the worker in their open rounds and `handle` must reach land_push; park: it overlaps what the
  /// worker already pushed in an open round (a second push of a block waits for the round to close).
  Admission admit_push(const void* handle, const WorkerRef& worker, std::uint64_t offset, std::uint64_t len);
  /// The data of an admitted push (I/O thread). False when `handle` was not admitted (nothing is changed).
  bool land_push(const void* handle, std::span<const std::byte> data);
  /// A grad-LU READ: park while `itn` pushed one of the blocks in a round not applied yet; not_ready instead of
  /// parking when live workers are below min_workers.
  Admission admit_pull(std::uint64_t itn, std::uint64_t offset, std::uint64_t len);

  /// Hold a command the glue parked; `owner` is the LU whose glue resubmits it. With a `refusal`, the command is
  /// only held until the glue's next wake, which fails it with that reason (a store can complete a command
  /// with its own sense only asynchronously).
  void park(const void* owner, const void* handle, bool is_push, const WorkerRef& worker, std::uint64_t offset,
            std::uint64_t len, std::string refusal = {});
  struct Parked {
    const void* handle;
    bool is_push;
    WorkerRef worker;
    std::uint64_t offset, len;
    std::chrono::steady_clock::time_point deadline;
    std::string refusal;
  };
  /// Main thread, when woken: drop workers whose session is gone (`alive(tid, itn)` false), then give back every
  /// command of `owner` that may go on (`resubmit`), is refused, past its deadline or aborted (`fail`),
  /// keeping the rest parked.
  void process_parked(const void* owner, const std::function<bool(int tid, std::uint64_t itn)>& alive,
                      const std::function<bool(const void* handle)>& aborted,
                      const std::function<void(const Parked&)>& resubmit,
                      const std::function<void(const Parked&, bool aborted, const std::string& why)>& fail);

  /// Every command parked for `owner` fails (with `why`) at the glue's next process_parked: its LU is closing.
  void refuse_parked(const void* owner, const std::string& why);

  /// `wake` is called (from any thread) when parked commands of `owner` may go on; it must only signal.
  void subscribe(const void* owner, std::function<void()> wake);
  void unsubscribe(const void* owner);

  /// Control: drop every open round (nothing of them is applied) and restart the round counters at 0.
  void reset();
  /// Why commands are refused now ("" when they are not).
  std::string degraded_reason() const;
  nlohmann::json status() const;

 private:
  struct Contribution;
  struct BlockRounds;
  // The part of an admitted push that falls into one block: its sectors are claimed for that push alone.
  struct TicketPiece {
    std::shared_ptr<Contribution> contribution;
    std::uint64_t data_offset;       // bytes into the WRITE's data
    std::uint64_t element_in_block;  // first element of the piece within the block
    std::uint64_t elements;
    std::uint32_t sectors;
  };
  struct Member {
    WorkerRef ref;
    std::chrono::steady_clock::time_point joined, last_push;
    std::uint64_t pushes = 0;
  };
  using Clock = std::chrono::steady_clock;

  RoundPolicy::Mode policy_mode() const;
  bool degraded_locked() const;
  std::string degraded_reason_locked() const;
  bool closable_locked(const BlockRounds& b, Clock::time_point now, bool& by_straggler) const;
  void close_ready_blocks(std::vector<std::uint64_t> candidates);
  void remove_member_locked(std::uint64_t itn, const std::string& why);
  void wake_all();
  void wake_parked();  // wake_all when a command is parked (the data path's wake-ups)
  void keep(std::stop_token stop);

  ModelShard& model_;
  const std::function<void(std::uint64_t)> on_applied_;
  const ShardGeometry geometry_;

  mutable std::mutex mutex_;
  RoundPolicy policy_;
  std::vector<BlockRounds> blocks_;
  // sync: every block with an open round (and some closed since), so the keeper's straggler check does not
  // walk the whole shard under the lock. admit_push lists a block as its round opens; the keeper prunes.
  std::vector<std::uint64_t> open_blocks_;
  std::map<std::uint64_t, Member> members_;
  bool formed_ = false;  // the expected workers were all there once (or a round closed without stragglers)
  std::unordered_map<const void*, std::vector<TicketPiece>> tickets_;
  std::multimap<const void*, Parked> parked_;
  std::map<const void*, std::function<void()>> subscribers_;
  std::uint64_t rounds_closed_ = 0, stragglers_dropped_ = 0, workers_dropped_ = 0;
  std::vector<std::string> drop_log_;  // the last few "worker X dropped: why" lines
  LatencyWindow round_latency_;        // first push of a round -> applied

  std::condition_variable_any keeper_cv_;
  bool recheck_ = false;
  std::jthread keeper_;
};

}  // namespace blockps
