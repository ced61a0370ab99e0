// mode=sync, bulk synchronous rounds (docs/OPTIONS.md, "Synchronous rounds"): per block and round every
// worker's gradient is collected, averaged in f32 in a fixed worker order and applied once. A worker's second
// push of a block, and its READ of a block it pushed, wait until that block's round is applied; a round closes
// when every member pushed (and at least the quorum), or after straggler_ms with min_workers.
#pragma once

#include <map>
#include <memory>
#include <unordered_map>
#include <vector>

#include "ps_backend/rounds/round_mode.h"

namespace blockps {

class BspMode final : public RoundMode {
 public:
  /// Each block's round counter starts at its step count (a shard loaded from a checkpoint resumes its rounds).
  explicit BspMode(RoundContext& ctx);

  Admission admit_push(const WorkerRef& worker, std::span<const BlockSpan> spans, Clock::time_point now,
                       Ticket& ticket) override;
  Admission admit_pull(std::uint64_t itn, std::uint64_t first_block, std::uint64_t last_block) override;
  void landed(const Ticket& ticket) override;
  void drop_worker(std::uint64_t itn) override;
  void reset() override;
  RoundProgress progress() const override;
  std::uint64_t rounds_pushed(std::uint64_t itn) const override;

  Status land(Ticket& ticket, std::span<const std::byte> data) override;
  Status after_landing(const Ticket& ticket) override;
  void tick() override;

 private:
  struct Block {
    std::uint64_t applied = 0;  // rounds applied (since the shard opened or the last reset)
    bool closing = false;       // a round's contributions were taken and are being applied
    Clock::time_point first_push{};
    std::map<std::uint64_t, std::shared_ptr<Contribution>> open;   // the open round's contributions, by worker
    std::unordered_map<std::uint64_t, std::uint64_t> last_pushed;  // worker -> the last round it pushed into
    // A straggler's half-pushed gradient of a round that closed without it: the rest of that push (sectors it
    // has not claimed yet) is dropped as it arrives, so it never starts the next round with the old round's
    // data. A push of sectors it did claim is the worker's next round and ends the tombstone.
    std::unordered_map<std::uint64_t, std::shared_ptr<Contribution>> tombstones;
    bool listed_open = false;  // in open_blocks_
    std::uint64_t open_round() const { return applied + (closing ? 1 : 0); }
  };

  // Under the lock: why span `s` of a push cannot join round `round` of its block ("" when it can): with compress=,
  // a compressed round takes the whole compressed block at the block's start, a warm-up round the whole block in the
  // wire dtype.
  std::string wrong_form(const BlockSpan& s, std::uint64_t round) const;
  // Whether member `m` holds block `b`'s open round: it was a member when the round opened.
  static bool holds(const Membership::Member& m, const Block& b);
  // Under the lock: whether block `b`'s open round may close at `now`, and whether without some members.
  bool closable(const Block& b, Clock::time_point now, bool& by_straggler) const;
  // Without the lock: close and apply the rounds of `candidates` that may close, then wake the parked commands.
  // The first failed apply's error, if any.
  Status close_ready(std::vector<std::uint64_t> candidates);
  // Without the lock: the average of a closed round's gradients, applied to `block` as its round `round`.
  Status apply(std::uint64_t block, std::uint64_t round, std::vector<std::shared_ptr<Contribution>>& complete);
  // Under the lock: whether worker `itn` already has push_lead more blocks in open rounds than the member with
  // the fewest among those pushing since `itn` got ahead, so that its push that would open another block's round
  // must wait.
  bool leads_too_far(std::uint64_t itn) const;
  // Under the lock: one contribution of `itn` left an open round (closed, dropped or reset).
  void left_open_round(std::uint64_t itn);

  RoundContext& ctx_;
  std::vector<Block> blocks_;
  // Every block with an open round (and some closed since), so the keeper's straggler check does not walk
  // the whole shard under the lock. admit_push lists a block as its round opens; tick() prunes.
  std::vector<std::uint64_t> open_blocks_;
  // Per worker: its contributions in open rounds (blocks it pushed whose rounds have not closed), and since when
  // it has had any. The member with the fewest sets the pace (RoundPolicy::push_lead): without it, the W flows
  // into a shard drift apart (TCP shares the links unevenly), every round waits for the flow furthest behind,
  // and the READs of the flows ahead stay parked until the end of the step, when they all leave at once
  // (bench/RESULTS.md, issue 27). Only members that pushed since the worker got ahead count: one that stopped
  // (computing its next gradient, or dead) would hold the others for nothing.
  struct OpenPushes {
    std::uint32_t count = 0;
    Clock::time_point since{};
  };
  std::unordered_map<std::uint64_t, OpenPushes> open_pushes_;
};

}  // namespace blockps
