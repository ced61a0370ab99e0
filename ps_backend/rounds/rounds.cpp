#include "ps_backend/rounds/rounds.h"

#include "contract/log.h"
#include "ps_backend/rounds/bsp_mode.h"
#include "ps_backend/rounds/ssp_mode.h"

namespace blockps {
namespace {

using Clock = std::chrono::steady_clock;

// How often the keeper looks at straggler deadlines, and how often it wakes the glue (session polling,
// parked-command deadlines and aborts).
constexpr auto kKeeperTick = std::chrono::milliseconds(50);
constexpr auto kWakeEvery = std::chrono::milliseconds(200);

std::uint64_t ms_between(Clock::time_point a, Clock::time_point b) {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(b - a).count());
}

std::unique_ptr<RoundMode> make_mode(RoundContext& ctx) {
  if (ctx.policy.mode == RoundPolicy::Mode::ssp) return std::make_unique<SspMode>(ctx);
  return std::make_unique<BspMode>(ctx);
}

}  // namespace

void RoundContext::failed_to_apply(const std::string& why) {
  log_line(why);
  {
    std::lock_guard held(lock);
    if (apply_failure.empty()) apply_failure = why;
    ++apply_failures;
  }
  parking.wake_all();  // the parked READs and pushes waiting for the round fail now (Refusal::failed)
}

Rounds::Rounds(ModelShard& model, const RoundPolicy& policy, std::function<void(std::uint64_t ns)> on_applied)
    : ctx_(model, policy, std::move(on_applied)), mode_(make_mode(ctx_)) {
  keeper_ = std::jthread([this](const std::stop_token& stop) { keep(stop); });
}

Rounds::~Rounds() {
  keeper_.request_stop();
  keeper_cv_.notify_all();
}

Admission Rounds::admit_push(const void* handle, const WorkerRef& worker, std::uint64_t offset, std::uint64_t len,
                             const std::function<bool(int, std::uint64_t)>& alive) {
  const std::vector<BlockSpan> spans = split_into_blocks(ctx_.geometry, offset, len);
  // Anything the data path would refuse anyway runs unclaimed and fails there with its own sense.
  if (spans.empty()) return Admission::run;
  const auto now = Clock::now();
  std::lock_guard lock(ctx_.lock);
  if (!ctx_.apply_failure.empty()) return Admission::failed;
  // mode=sync only: a round there is defined by its workers; ssp:K paces whoever pushes (its workers= only sizes the
  // first formation), and its users run it without workers=.
  const bool full = ctx_.policy.mode == RoundPolicy::Mode::sync && ctx_.members.full_without(worker);
  if (full && alive) {
    std::vector<std::uint64_t> gone;
    for (const auto& [itn, m] : ctx_.members.members())
      if (!alive(m.ref.tid, itn)) gone.push_back(itn);
    for (std::uint64_t itn : gone) drop_member_locked(itn, "its session is gone");
  }
  // One more worker than workers= would change what a round averages over, and whether it closes: refused.
  if (full && ctx_.members.full_without(worker)) return Admission::not_ready;
  ctx_.members.admitted_push(worker, now);
  Ticket ticket;
  const Admission a = mode_->admit_push(worker, spans, now, ticket);
  if (a == Admission::run) tickets_[handle] = std::move(ticket);
  return a;
}

Status Rounds::land_push(const void* handle, std::span<const std::byte> data) {
  Ticket ticket;
  {
    std::lock_guard lock(ctx_.lock);
    auto it = tickets_.find(handle);
    if (it == tickets_.end()) {
      const std::string why = "rounds: a grad WRITE reached the I/O threads without being admitted";
      log_line(why);
      return Status::Error(why);
    }
    ticket = std::move(it->second);
    tickets_.erase(it);
  }
  if (ticket.empty()) return Status::Ok();
  if (!ticket.front().contribution) {  // admitted to be refused now that its data is off the wire (BspMode)
    log_line("rounds: " + ticket.front().refusal);
    return Status::Error(StatusCode::invalid_argument, ticket.front().refusal);
  }
  // The claimed sectors belong to this push alone, so the data needs no lock.
  Status landed = mode_->land(ticket, data);
  {
    std::lock_guard lock(ctx_.lock);
    mode_->landed(ticket);
    ctx_.members.landed_push(ticket.front().contribution->itn, Clock::now());
  }
  if (!landed.ok() && landed.code() == StatusCode::invalid_argument) log_line("rounds: " + landed.message());
  Status applied = mode_->after_landing(ticket);
  return landed.ok() ? applied : landed;
}

Admission Rounds::admit_pull(std::uint64_t itn, std::uint64_t offset, std::uint64_t len) {
  const ShardGeometry& g = ctx_.geometry;
  if (len == 0 || offset >= g.bytes) return Admission::run;
  const std::uint64_t end = std::min(offset + len, g.bytes);
  std::lock_guard lock(ctx_.lock);
  if (!ctx_.apply_failure.empty()) return Admission::failed;
  if (!ctx_.members.contains(itn)) return Admission::run;
  return mode_->admit_pull(itn, offset / g.block_bytes, (end - 1) / g.block_bytes);
}

void Rounds::park(const void* owner, const void* handle, bool is_push, const WorkerRef& worker, std::uint64_t offset,
                  std::uint64_t len, std::string refusal, Refusal refused_as) {
  ctx_.parking.park(owner, handle, is_push, worker, offset, len, std::move(refusal), refused_as);
}

void Rounds::process_parked(const void* owner, const std::function<bool(int, std::uint64_t)>& alive,
                            const std::function<bool(const void*)>& aborted, const ParkingLot::Resubmit& resubmit,
                            const ParkingLot::Fail& fail) {
  // Sessions that are gone: tgt has no logout callback for stores, so ask (docs/ARCHITECTURE.md, "Facts about tgt").
  std::vector<WorkerRef> members;
  {
    std::lock_guard lock(ctx_.lock);
    for (const auto& [itn, m] : ctx_.members.members()) members.push_back(m.ref);
  }
  std::vector<std::uint64_t> gone;
  for (const WorkerRef& w : members)
    if (!alive(w.tid, w.itn)) gone.push_back(w.itn);
  if (!gone.empty()) {
    std::lock_guard lock(ctx_.lock);
    for (std::uint64_t itn : gone) drop_member_locked(itn, "its session is gone");
    recheck_ = true;
    keeper_cv_.notify_all();
  }
  const auto readmit = [this](const ParkedCommand& p) {
    return p.is_push ? admit_push(p.handle, p.worker, p.offset, p.len) : admit_pull(p.worker.itn, p.offset, p.len);
  };
  ctx_.parking.process(owner, aborted, readmit, resubmit, fail, [this] { return degraded_reason(); });
}

void Rounds::refuse_parked(const void* owner, const std::string& why) { ctx_.parking.refuse(owner, why); }

void Rounds::subscribe(const void* owner, std::function<void()> wake) {
  ctx_.parking.subscribe(owner, std::move(wake));
}

void Rounds::unsubscribe(const void* owner) { ctx_.parking.unsubscribe(owner); }

void Rounds::reset() {
  {
    std::lock_guard lock(ctx_.lock);
    mode_->reset();
    if (ctx_.compressed_averages) ctx_.compressed_averages->reset();
    ctx_.members.reform();
    if (!ctx_.apply_failure.empty())
      log_line("rounds: reset clears the failed update (" + ctx_.apply_failure + "): commands are served again");
    ctx_.apply_failure.clear();
    log_line("rounds: reset (open rounds dropped, counters at 0)");
  }
  ctx_.parking.wake_all();
}

void Rounds::restart(const std::string& why) {
  {
    std::lock_guard lock(ctx_.lock);
    std::vector<std::uint64_t> members;
    for (const auto& [itn, m] : ctx_.members.members()) members.push_back(itn);
    for (std::uint64_t itn : members) drop_member_locked(itn, why);
    mode_->reset();
    if (ctx_.compressed_averages) ctx_.compressed_averages->reset();
    ctx_.members.reform();
    ctx_.apply_failure.clear();
    log_line("rounds: restarted (" + why + "): members and open rounds dropped, counters at 0");
  }
  ctx_.parking.refuse_all(why, Refusal::reservation_conflict);
  ctx_.parking.wake_all();
}

bool Rounds::idle() const {
  std::lock_guard lock(ctx_.lock);
  return ctx_.members.size() == 0 && ctx_.parking.empty() && mode_->progress().open_rounds == 0;
}

std::size_t Rounds::live_workers() const {
  std::lock_guard lock(ctx_.lock);
  return ctx_.members.size();
}

std::string Rounds::degraded_reason() const {
  std::lock_guard lock(ctx_.lock);
  return degraded_reason_locked();
}

std::string Rounds::degraded_reason_locked() const {
  if (!ctx_.apply_failure.empty())
    return ctx_.apply_failure + " (every grad-LU command fails until the control line reset-rounds)";
  return ctx_.members.degraded_reason();
}

std::string Rounds::refusal_reason(const WorkerRef& worker) const {
  std::lock_guard lock(ctx_.lock);
  if (ctx_.policy.mode == RoundPolicy::Mode::sync && ctx_.members.full_without(worker))
    return ctx_.members.full_reason(worker);
  return degraded_reason_locked();
}

void Rounds::drop_member_locked(std::uint64_t itn, const std::string& why) {
  if (ctx_.members.drop(itn, why)) mode_->drop_worker(itn);
}

void Rounds::keep(const std::stop_token& stop) {
  auto last_wake = Clock::now();
  while (!stop.stop_requested()) {
    bool wake = false;
    {
      std::unique_lock lock(ctx_.lock);
      keeper_cv_.wait_for(lock, stop, kKeeperTick, [this] { return recheck_; });
      if (stop.stop_requested()) return;
      recheck_ = false;
      const auto now = Clock::now();
      for (std::uint64_t itn : ctx_.members.silent(now))
        drop_member_locked(itn, "no push for worker_timeout_ms=" + std::to_string(ctx_.policy.worker_timeout_ms));
      if (now - last_wake >= kWakeEvery && (!ctx_.parking.empty() || ctx_.members.size() > 0)) {
        wake = true;
        last_wake = now;
      }
    }
    mode_->tick();
    if (wake) ctx_.parking.wake_all();
  }
}

RoundsStatus Rounds::status() const {
  std::lock_guard lock(ctx_.lock);
  const auto now = Clock::now();
  RoundsStatus out;
  out.policy = ctx_.policy;
  out.progress = mode_->progress();
  for (const auto& [itn, m] : ctx_.members.members()) {
    const std::uint64_t pushed = mode_->rounds_pushed(itn);
    out.live_workers.push_back({m.ref.iqn, itn, m.pushes, ms_between(m.last_push, now), ms_between(m.joined, now),
                                out.progress.rounds_max > pushed ? out.progress.rounds_max - pushed : 0});
  }
  out.rounds_closed = ctx_.rounds_closed;
  out.stragglers_dropped = ctx_.stragglers_dropped;
  out.workers_dropped = ctx_.members.dropped();
  out.recent_drops = ctx_.members.recent_drops();
  out.parked_commands = ctx_.parking.size();
  out.degraded = ctx_.members.degraded() || !ctx_.apply_failure.empty();
  out.degraded_reason = degraded_reason_locked();
  out.apply_failures = ctx_.apply_failures;
  out.round_latency = ctx_.round_latency.summary();
  return out;
}

}  // namespace blockps
