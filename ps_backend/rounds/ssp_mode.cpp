#include "ps_backend/rounds/ssp_mode.h"

#include <algorithm>

#include "aggregator/wire_convert.h"
#include "contract/log.h"

namespace blockps {

SspMode::SspMode(RoundContext& ctx) : ctx_(ctx), blocks_(ctx.geometry.blocks()) {}

Admission SspMode::admit_push(const WorkerRef& worker, std::span<const BlockSpan> spans, Clock::time_point,
                              Ticket& ticket) {
  for (const BlockSpan& s : spans) {
    Block& b = blocks_[s.block];
    // Pushing sectors again means the worker's previous push of this block is over (even a partial one).
    if (const auto found = b.open.find(worker.itn); found != b.open.end() && found->second->claims_any(s)) {
      if (found->second->in_flight()) return Admission::park;
      ++b.clock[worker.itn];
      b.open.erase(found);
    }
    // A worker new to the block starts one push behind the slowest, so that it is level once this first push
    // lands: it holds nobody back for longer than that push (a worker joining mid-training is not behind by every
    // push made before it came), and it gets no credit for pushes it never made (starting level would let the
    // others run one push further ahead of it than K allows; a worker a moment late to its very first push, as
    // every worker but the first at the start of training, is such a joiner).
    std::uint64_t slowest = UINT64_MAX;  // of the other live workers on the block
    for (const auto& [itn, c] : b.clock)
      if (itn != worker.itn && ctx_.members.contains(itn)) slowest = std::min(slowest, c);
    const std::uint64_t joins_at = slowest == UINT64_MAX || slowest == 0 ? 0 : slowest - 1;
    const std::uint64_t mine = b.clock.try_emplace(worker.itn, joins_at).first->second;
    if (slowest != UINT64_MAX && mine > slowest + ctx_.policy.staleness)
      return ctx_.members.degraded() ? Admission::not_ready : Admission::park;
  }
  for (const BlockSpan& s : spans) {
    Block& b = blocks_[s.block];
    auto& c = b.open[worker.itn];
    if (!c) c = std::make_shared<Contribution>(ctx_.geometry, s.block, b.clock[worker.itn], worker, false);
    c->claim(s);
    ticket.push_back({c, s, {}, false});
  }
  return Admission::run;
}

Admission SspMode::admit_pull(std::uint64_t, std::uint64_t, std::uint64_t) { return Admission::run; }

Status SspMode::land(Ticket& ticket, std::span<const std::byte> data) {
  if (ticket.empty()) return Status::Ok();
  // One optimizer step over the whole contiguous request: the engine runs its blocks in parallel.
  const std::size_t esize = wire_size(ctx_.geometry.dtype);
  const TicketPiece& first = ticket.front();
  std::uint64_t bytes = 0;
  for (const TicketPiece& p : ticket) bytes += p.span.elements * esize;
  const auto t0 = Clock::now();
  const Status pushed = ctx_.model.push_gradient(
      first.contribution->block * ctx_.geometry.block_bytes + first.span.element_in_block * esize,
      data.first(static_cast<std::size_t>(std::min<std::uint64_t>(bytes, data.size()))));
  if (!pushed.ok()) {
    const std::string why = "ssp: push of " + ticket.front().contribution->iqn + " to block " +
                            std::to_string(first.contribution->block) + " not applied: " + pushed.message();
    ctx_.failed_to_apply(why);
    return Status::Error(pushed.code(), why);
  }
  if (ctx_.on_applied) ctx_.on_applied(static_cast<std::uint64_t>(std::chrono::nanoseconds(Clock::now() - t0).count()));
  return Status::Ok();
}

void SspMode::landed(const Ticket& ticket) {
  for (const TicketPiece& p : ticket) {
    Contribution& c = *p.contribution;
    c.landed_n += static_cast<std::uint32_t>(p.span.sectors);
    if (!c.complete()) continue;
    // One whole push of the block: the worker's clock moves on.
    Block& b = blocks_[c.block];
    const auto it = b.open.find(c.itn);
    if (it != b.open.end() && it->second == p.contribution) {
      ++b.clock[c.itn];
      b.open.erase(it);
    }
  }
}

Status SspMode::after_landing(const Ticket&) {
  ctx_.parking.wake_if_parked();  // a push waiting on this worker's clock may go on
  return Status::Ok();
}

void SspMode::drop_worker(std::uint64_t itn) {
  for (Block& b : blocks_) {
    const auto c = b.open.find(itn);
    if (c != b.open.end() && !c->second->complete()) b.open.erase(c);
    b.clock.erase(itn);  // a gone worker holds nobody back
  }
}

void SspMode::reset() {
  for (Block& b : blocks_) {
    b.open.clear();
    b.clock.clear();
  }
}

RoundProgress SspMode::progress() const {
  // A block's round is its slowest live worker's push count.
  RoundProgress p;
  p.rounds_min = blocks_.empty() ? 0 : UINT64_MAX;
  for (const Block& b : blocks_) {
    std::uint64_t lo = UINT64_MAX, hi = 0;
    for (const auto& [itn, c] : b.clock) {
      lo = std::min(lo, c);
      hi = std::max(hi, c);
    }
    if (lo == UINT64_MAX) lo = 0;
    p.rounds_min = std::min(p.rounds_min, lo);
    p.rounds_max = std::max(p.rounds_max, hi);
    p.open_rounds += b.open.empty() ? 0 : 1;
  }
  return p;
}

std::uint64_t SspMode::rounds_pushed(std::uint64_t itn) const {
  if (blocks_.empty()) return 0;
  std::uint64_t pushed = UINT64_MAX;
  for (const Block& b : blocks_) {
    const auto c = b.clock.find(itn);
    pushed = std::min<std::uint64_t>(pushed, c == b.clock.end() ? 0 : c->second);
  }
  return pushed;
}

}  // namespace blockps
