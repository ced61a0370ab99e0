#include "ps_backend/rounds/bsp_mode.h"

#include <algorithm>
#include <tuple>

#include "aggregator/gradient_average.h"
#include "contract/log.h"

namespace blockps {

BspMode::BspMode(RoundContext& ctx) : ctx_(ctx), blocks_(ctx.geometry.blocks()) {
  for (std::uint64_t b = 0; b < blocks_.size(); ++b) blocks_[b].applied = ctx_.model.block_step(b);
}

Admission BspMode::admit_push(const WorkerRef& worker, std::span<const BlockSpan> spans, Clock::time_point now,
                              Ticket& ticket) {
  // A second push of sectors the worker already pushed in an open round waits for that round to close.
  for (const BlockSpan& s : spans) {
    const auto& open = blocks_[s.block].open;
    if (const auto c = open.find(worker.itn); c != open.end() && c->second->claims_any(s)) return Admission::park;
  }
  // A push that would open a block's round (nobody pushed it yet: this worker is ahead there) waits while the
  // worker leads too far. A push into a round others opened catches up, and is never held.
  bool opens_a_round = false;
  for (const BlockSpan& s : spans) {
    const Block& b = blocks_[s.block];
    const auto t = b.tombstones.find(worker.itn);
    const bool rest_of_dropped_push = t != b.tombstones.end() && !t->second->claims_any(s);
    opens_a_round = opens_a_round || (!rest_of_dropped_push && b.open.empty());
  }
  if (opens_a_round && leads_too_far(worker.itn)) return Admission::park;
  // A compressed round takes each block whole, as one compressed block at the start of the block's range; a
  // full-precision round (the warm-up) takes the whole block in the wire dtype. A push of the other form is admitted
  // only to be refused when its data comes, with nothing claimed (its data must be taken off the wire first).
  for (const BlockSpan& s : spans) {
    const Block& b = blocks_[s.block];
    const auto mine = b.open.find(worker.itn);
    const std::uint64_t round = mine != b.open.end() ? mine->second->round : b.open_round();
    if (std::string wrong = wrong_form(s, round); !wrong.empty()) {
      ticket.push_back({nullptr, s, std::move(wrong), false});
      return Admission::run;
    }
  }
  for (const BlockSpan& s : spans) {
    Block& b = blocks_[s.block];
    if (const auto t = b.tombstones.find(worker.itn); t != b.tombstones.end()) {
      if (!t->second->claims_any(s)) {  // the rest of the dropped push
        t->second->claim(s);
        ticket.push_back({t->second, s, {}, false});
        if (t->second->fully_claimed()) b.tombstones.erase(t);
        continue;
      }
      b.tombstones.erase(t);
    }
    auto& c = b.open[worker.itn];
    if (!c) {
      if (b.open.size() == 1) {
        b.first_push = now;
        if (!b.listed_open) {
          b.listed_open = true;
          open_blocks_.push_back(s.block);
        }
      }
      const std::uint64_t round = b.open_round();
      c = std::make_shared<Contribution>(ctx_.geometry, s.block, round, worker, true,
                                         ctx_.policy.compressed_round(round) ? ctx_.policy.compress : std::nullopt);
      OpenPushes& mine = open_pushes_[worker.itn];
      if (mine.count++ == 0) mine.since = now;
    }
    c->claim(s);
    b.last_pushed[worker.itn] = c->round;
    ticket.push_back({c, s, {}, false});
  }
  return Admission::run;
}

Admission BspMode::admit_pull(std::uint64_t itn, std::uint64_t first_block, std::uint64_t last_block) {
  for (std::uint64_t b = first_block; b <= last_block; ++b) {
    const auto it = blocks_[b].last_pushed.find(itn);
    if (it != blocks_[b].last_pushed.end() && it->second >= blocks_[b].applied)
      return ctx_.members.degraded() ? Admission::not_ready : Admission::park;
  }
  return Admission::run;
}

std::string BspMode::wrong_form(const BlockSpan& s, std::uint64_t round) const {
  const bool compressed = ctx_.policy.compressed_round(round);
  if (!ctx_.policy.compress) return {};
  const std::uint64_t full = ctx_.geometry.elements_in_block(s.block) * wire_size(ctx_.geometry.dtype) / kSectorBytes;
  const std::uint32_t packed = compressed_sectors(ctx_.geometry, s.block, *ctx_.policy.compress);
  // Both forms take the block whole: the lengths tell them apart (lu_options refuses a geometry where they are equal).
  if (s.first_sector == 0 && s.sectors == (compressed ? packed : full)) return {};
  const std::string format(to_string(*ctx_.policy.compress));
  const std::string expected =
      compressed ? "one WRITE of its " + format + " block (" + std::to_string(packed * kSectorBytes) +
                       " bytes) at the start of the block, since rounds from compress_after=" +
                       std::to_string(ctx_.policy.compress_after) + " on are compressed"
                 : "the whole block in " + std::string(to_string(ctx_.geometry.dtype)) + " (" +
                       std::to_string(full * kSectorBytes) +
                       " bytes), since rounds before compress_after=" + std::to_string(ctx_.policy.compress_after) +
                       " are the full-precision warm-up";
  return "compress=" + format + ": a push of " + std::to_string(s.sectors * kSectorBytes) + " bytes at byte " +
         std::to_string(s.first_sector * kSectorBytes) + " of block " + std::to_string(s.block) + " in its round " +
         std::to_string(round) + " is refused, nothing applied: that round takes " + expected +
         " (a worker whose warm-up count disagrees with the shard's, or a /dev writer of the other form)";
}

Status BspMode::land(Ticket& ticket, std::span<const std::byte> data) {
  // A contribution dropped meanwhile (straggler close, worker dropped, reset) stays alive through the ticket and
  // is freed with it; one a round closed without is not decoded.
  Status first_refusal = Status::Ok();
  for (TicketPiece& p : ticket) {
    if (p.contribution->discarded) continue;
    if (Status decoded = p.contribution->decode(ctx_.geometry.dtype, p.span, data); !decoded.ok()) {
      p.rejected = true;
      if (first_refusal.ok())
        first_refusal = Status::Error(StatusCode::invalid_argument,
                                      "compress=" + std::string(to_string(*p.contribution->compressed)) +
                                          ": the push of block " + std::to_string(p.contribution->block) +
                                          " in its round " + std::to_string(p.contribution->round) +
                                          " is refused, nothing applied: " + decoded.message());
    }
  }
  return first_refusal;
}

void BspMode::landed(const Ticket& ticket) {
  for (const TicketPiece& p : ticket) {
    Contribution& c = *p.contribution;
    if (!p.rejected) {
      c.landed_n += static_cast<std::uint32_t>(p.span.sectors);
      continue;
    }
    // The worker did not push this block in this round after all: it may push it again.
    c.unclaim(p.span);
    Block& b = blocks_[c.block];
    const auto open = b.open.find(c.itn);
    if (c.claimed_n == 0 && open != b.open.end() && open->second.get() == &c) {
      b.open.erase(open);
      left_open_round(c.itn);
      if (c.round == 0)
        b.last_pushed.erase(c.itn);
      else
        b.last_pushed[c.itn] = c.round - 1;
    }
  }
}

Status BspMode::after_landing(const Ticket& ticket) {
  std::vector<std::uint64_t> touched;
  for (const TicketPiece& p : ticket) touched.push_back(p.contribution->block);
  return close_ready(std::move(touched));
}

void BspMode::tick() {
  std::vector<std::uint64_t> open_blocks;
  {
    std::lock_guard lock(ctx_.lock);
    // Blocks listed but closed meanwhile leave the list here, not on every close path.
    std::erase_if(open_blocks_, [this](std::uint64_t b) {
      Block& block = blocks_[b];
      block.listed_open = !block.open.empty();
      return !block.listed_open;
    });
    open_blocks = open_blocks_;
  }
  (void)close_ready(std::move(open_blocks));  // a failure is recorded in the context; nobody to answer here
}

bool BspMode::holds(const Membership::Member& m, const Block& b) {
  // A member that joined the formed shard after the round opened contributes from the rounds it enters (its push of
  // this one counts if it lands before the round closes); the members already there do not wait for it.
  return !m.late || m.joined <= b.first_push;
}

bool BspMode::closable(const Block& b, Clock::time_point now, bool& by_straggler) const {
  if (b.closing || b.open.empty()) return false;
  std::size_t complete = 0;
  for (const auto& [itn, c] : b.open) {
    if (c->in_flight()) return false;  // a push is still landing: wait for it (microseconds)
    if (c->complete()) ++complete;
  }
  if (complete == 0) return false;
  bool all_members = true;
  for (const auto& [itn, m] : ctx_.members.members()) {
    if (!holds(m, b)) continue;
    const auto it = b.open.find(itn);
    all_members = all_members && it != b.open.end() && it->second->complete();
  }
  if (all_members && ctx_.members.size() >= ctx_.members.quorum()) {
    by_straggler = false;
    return true;
  }
  by_straggler = true;
  return now >= b.first_push + std::chrono::milliseconds(ctx_.policy.straggler_ms) &&
         complete >= ctx_.policy.min_workers;
}

Status BspMode::close_ready(std::vector<std::uint64_t> candidates) {
  std::sort(candidates.begin(), candidates.end());
  candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());
  bool closed_any = false;
  Status first_failure = Status::Ok();
  for (std::uint64_t b : candidates) {
    for (;;) {  // the next round of a block may be complete by the time this one is applied
      std::vector<std::shared_ptr<Contribution>> complete;
      Clock::time_point first_push;
      std::uint64_t round = 0;
      {
        std::lock_guard lock(ctx_.lock);
        Block& block = blocks_[b];
        bool by_straggler = false;
        if (!closable(block, Clock::now(), by_straggler)) break;
        for (auto& [itn, c] : block.open)
          if (c->complete()) complete.push_back(c);
        if (by_straggler) {
          ctx_.members.mark_formed();  // the round formed without the missing workers
          for (const auto& [itn, m] : ctx_.members.members()) {
            if (!holds(m, block)) continue;
            const auto it = block.open.find(itn);
            if (it == block.open.end() || !it->second->complete()) ++ctx_.stragglers_dropped;
          }
          for (auto& [itn, c] : block.open) {
            if (c->complete()) continue;
            c->discarded = true;
            block.tombstones[itn] = c;
          }
        }
        for (const auto& [itn, c] : block.open) left_open_round(itn);
        block.open.clear();
        block.closing = true;
        first_push = block.first_push;
        round = block.applied + 1;
      }
      if (Status applied = apply(b, round, complete); !applied.ok() && first_failure.ok())
        first_failure = std::move(applied);
      ctx_.round_latency.add(static_cast<std::uint64_t>(std::chrono::nanoseconds(Clock::now() - first_push).count()));
      std::lock_guard lock(ctx_.lock);
      Block& block = blocks_[b];
      block.closing = false;
      ++block.applied;
      ++ctx_.rounds_closed;
      closed_any = true;
    }
  }
  if (closed_any) ctx_.parking.wake_if_parked();
  return first_failure;
}

Status BspMode::apply(std::uint64_t block, std::uint64_t round, std::vector<std::shared_ptr<Contribution>>& complete) {
  // A fixed order (IQN, then session) makes the f32 sum the same whatever order the pushes arrived in.
  std::sort(complete.begin(), complete.end(),
            [](const auto& x, const auto& y) { return std::tie(x->iqn, x->itn) < std::tie(y->iqn, y->itn); });
  const auto t0 = Clock::now();
  std::vector<const float*> grads;
  grads.reserve(complete.size());
  for (const auto& c : complete) grads.push_back(c->grad.data());
  std::vector<float>& average = complete.front()->grad;  // the closed round's: summed in place
  average_gradients(grads, average);
  Status applied = Status::Ok();
  if (CompressedAverages* compressed = ctx_.compressed_averages.get()) {
    // An averaging shard keeps, and its weights LU shows, what the workers decode from their READs.
    if (complete.front()->compressed)
      applied = compressed->publish(block, average);
    else
      compressed->forget(block);
  }
  if (applied.ok()) applied = ctx_.model.apply_gradient_f32(block * ctx_.geometry.block_bytes, average);
  if (!applied.ok()) {
    const std::string why = "sync: round " + std::to_string(round) + " of block " + std::to_string(block) +
                            " not applied: " + applied.message();
    ctx_.failed_to_apply(why);
    return Status::Error(applied.code(), why);
  }
  if (ctx_.on_applied) ctx_.on_applied(static_cast<std::uint64_t>(std::chrono::nanoseconds(Clock::now() - t0).count()));
  return Status::Ok();
}

bool BspMode::leads_too_far(std::uint64_t itn) const {
  const std::uint32_t lead = ctx_.policy.push_lead;
  if (lead == 0) return false;
  const auto mine = open_pushes_.find(itn);
  if (mine == open_pushes_.end() || mine->second.count < lead) return false;
  // The member with the fewest is never held back, so that some push can always land and close rounds. A member
  // that has not pushed since this worker got ahead does not set the pace: it may be computing its next
  // gradient, or dead (until its rounds close without it by straggler_ms, or it is dropped).
  std::uint32_t fewest = mine->second.count;
  for (const auto& [member, m] : ctx_.members.members()) {
    if (m.last_push < mine->second.since) continue;
    const auto it = open_pushes_.find(member);
    fewest = std::min(fewest, it == open_pushes_.end() ? 0u : it->second.count);
  }
  return mine->second.count >= fewest + lead;
}

void BspMode::left_open_round(std::uint64_t itn) {
  const auto it = open_pushes_.find(itn);
  if (it == open_pushes_.end()) return;
  if (--it->second.count == 0) open_pushes_.erase(it);
}

void BspMode::drop_worker(std::uint64_t itn) {
  // Its complete gradients of open rounds still count; half-pushed ones are discarded.
  for (Block& b : blocks_) {
    const auto c = b.open.find(itn);
    if (c != b.open.end() && !c->second->complete()) {
      b.open.erase(c);
      left_open_round(itn);
    }
    b.last_pushed.erase(itn);
    // Session numbers are recycled: a later session with this one must not inherit its tombstones.
    b.tombstones.erase(itn);
  }
}

void BspMode::reset() {
  open_pushes_.clear();
  for (Block& b : blocks_) {
    b.open.clear();
    b.tombstones.clear();
    b.last_pushed.clear();
    b.applied = 0;
  }
}

RoundProgress BspMode::progress() const {
  RoundProgress p;
  p.rounds_min = blocks_.empty() ? 0 : UINT64_MAX;
  for (const Block& b : blocks_) {
    p.rounds_min = std::min(p.rounds_min, b.applied);
    p.rounds_max = std::max(p.rounds_max, b.applied);
    p.open_rounds += b.open.empty() ? 0 : 1;
  }
  return p;
}

std::uint64_t BspMode::rounds_pushed(std::uint64_t itn) const {
  if (blocks_.empty()) return 0;
  std::uint64_t pushed = UINT64_MAX;
  for (const Block& b : blocks_) {
    const auto it = b.last_pushed.find(itn);
    pushed = std::min<std::uint64_t>(pushed, it == b.last_pushed.end() ? b.applied : it->second + 1);
  }
  return pushed;
}

}  // namespace blockps
