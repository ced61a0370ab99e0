#include "ps_backend/rounds.h"

#include <algorithm>
#include <mutex>
#include <tuple>

#include "aggregator/wire_dtype.h"
#include "ps_backend/log.h"

namespace blockps {
namespace {

using Clock = std::chrono::steady_clock;

// Pushes cover a block in units of 512 bytes: every LU block size tgt allows is a multiple of it, and so are
// `size` and `block` (lu_options checks them against the LU block size).
constexpr std::uint32_t kSectorBytes = 512;
// How often the keeper looks at straggler deadlines, and how often it wakes the glue (session polling,
// parked-command deadlines and aborts).
constexpr auto kKeeperTick = std::chrono::milliseconds(50);
constexpr auto kWakeEvery = std::chrono::milliseconds(200);
constexpr std::size_t kDropLogLines = 8;

std::uint64_t ms_between(Clock::time_point a, Clock::time_point b) {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(b - a).count());
}

}  // namespace

void LatencyWindow::add(std::uint64_t ns) {
  samples_[added_.fetch_add(1, std::memory_order_relaxed) % kSamples].store(ns, std::memory_order_relaxed);
  total_ns_.fetch_add(ns, std::memory_order_relaxed);
}

nlohmann::json LatencyWindow::percentiles() const {
  // A sample being written while the page is made may be the old or the new one: fine for percentiles.
  const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(added_.load(), kSamples));
  std::vector<std::uint64_t> s(n);
  for (std::size_t i = 0; i < n; ++i) s[i] = samples_[i].load(std::memory_order_relaxed);
  std::sort(s.begin(), s.end());
  const auto at = [&](double q) { return s.empty() ? 0 : s[static_cast<std::size_t>(q * (s.size() - 1))]; };
  return {{"count", s.size()},
          {"p50_ns", at(0.5)},
          {"p90_ns", at(0.9)},
          {"p99_ns", at(0.99)},
          {"max_ns", s.empty() ? 0 : s.back()},
          {"total_count", added_.load(std::memory_order_relaxed)},
          {"total_ns", total_ns_.load(std::memory_order_relaxed)}};
}

// One worker's gradient for one block in one round, filled by one or more pushes (each claims its sectors).
struct SyncRounds::Contribution {
  std::uint64_t block, round, itn;
  std::string iqn;
  std::uint64_t elements = 0;  // sync: grad's size once the first push of it lands
  std::once_flag grad_allocated;
  std::vector<float> grad;    // allocated by the first landing push (an I/O thread, not tgtd's main thread)
  std::vector<bool> claimed;  // per sector
  std::uint32_t sectors, claimed_n = 0, landed_n = 0;
  bool discarded = false;  // its round closed without it: what still lands is dropped, not decoded
  bool complete() const { return landed_n == sectors; }
  bool in_flight() const { return landed_n < claimed_n; }
  bool claims_any(std::uint64_t first_sector, std::uint64_t n) const {
    for (std::uint64_t s = first_sector; s < first_sector + n; ++s)
      if (claimed[s]) return true;
    return false;
  }
};

struct SyncRounds::BlockRounds {
  std::uint64_t applied = 0;  // rounds applied (since the shard opened or the last reset)
  bool closing = false;       // a round's contributions were taken and are being applied
  Clock::time_point first_push{};
  std::map<std::uint64_t, std::shared_ptr<Contribution>> open;   // the open round's contributions, by worker
  std::unordered_map<std::uint64_t, std::uint64_t> last_pushed;  // worker -> the last round it pushed into
  std::unordered_map<std::uint64_t, std::uint64_t> clock;        // ssp: worker -> its completed pushes
  // A straggler's half-pushed gradient of a round that closed without it: the rest of that push (sectors it
  // has not claimed yet) is dropped as it arrives, so it never starts the next round with the old round's
  // data. A push of sectors it did claim is the worker's next round and ends the tombstone.
  std::unordered_map<std::uint64_t, std::shared_ptr<Contribution>> dropped;
  bool listed_open = false;  // in SyncRounds::open_blocks_
  std::uint64_t open_round() const { return applied + (closing ? 1 : 0); }
};

SyncRounds::SyncRounds(ModelShard& model, const RoundPolicy& policy, std::function<void(std::uint64_t ns)> on_applied)
    : model_(model),
      on_applied_(std::move(on_applied)),
      geometry_(model.geometry()),
      policy_(policy),
      blocks_(model.geometry().blocks()) {
  for (std::uint64_t b = 0; b < blocks_.size(); ++b) blocks_[b].applied = model_.block_step(b);
  keeper_ = std::jthread([this](std::stop_token stop) { keep(stop); });
}

SyncRounds::~SyncRounds() {
  keeper_.request_stop();
  keeper_cv_.notify_all();
}

Admission SyncRounds::admit_push(const void* handle, const WorkerRef& worker, std::uint64_t offset, std::uint64_t len) {
  const std::uint64_t end = offset + len;
  // Anything the data path would refuse anyway runs unclaimed and fails there with its own sense.
  if (len == 0 || offset % kSectorBytes || len % kSectorBytes || end > geometry_.bytes || end < offset)
    return Admission::run;
  const auto now = Clock::now();
  std::lock_guard lock(mutex_);
  auto [it, joined] = members_.try_emplace(worker.itn);
  Member& m = it->second;
  if (joined) {  // tid, session and IQN of a session never change
    m.ref = worker;
    m.joined = now;
    log_line("sync: worker " + worker.iqn + " (session " + std::to_string(worker.itn) + ") joined");
  }
  m.last_push = now;
  if (members_.size() >= policy_.workers) formed_ = true;

  const std::uint64_t first_block = offset / geometry_.block_bytes, last_block = (end - 1) / geometry_.block_bytes;
  const auto sector_span = [&](std::uint64_t b) {  // the push's bytes in block b
    const std::uint64_t begin = std::max<std::uint64_t>(offset, b * geometry_.block_bytes);
    const std::uint64_t stop = std::min<std::uint64_t>(end, (b + 1) * geometry_.block_bytes);
    return std::pair{begin, stop};
  };
  const auto sector_range = [&](std::uint64_t b) {  // the same as (first sector in the block, sectors)
    const auto [begin, stop] = sector_span(b);
    return std::pair{(begin - b * geometry_.block_bytes) / kSectorBytes, (stop - begin) / kSectorBytes};
  };
  const bool ssp = policy_.mode == RoundPolicy::Mode::ssp;
  if (ssp) {
    for (std::uint64_t b = first_block; b <= last_block; ++b) {
      BlockRounds& br = blocks_[b];
      // Pushing sectors again means the worker's previous push of this block is over (even a partial one).
      if (const auto found = br.open.find(worker.itn); found != br.open.end()) {
        const auto [first_sector, sectors] = sector_range(b);
        const bool overlaps = found->second->claims_any(first_sector, sectors);
        if (overlaps && found->second->in_flight()) return Admission::park;
        if (overlaps) {
          ++br.clock[worker.itn];
          br.open.erase(found);
        }
      }
      // A worker new to the block starts level with the slowest, not behind everyone.
      std::uint64_t slowest = UINT64_MAX;
      for (const auto& [itn, c] : br.clock)
        if (itn != worker.itn && members_.count(itn)) slowest = std::min(slowest, c);
      if (slowest == UINT64_MAX) slowest = br.clock.count(worker.itn) ? br.clock[worker.itn] : 0;
      const std::uint64_t mine = br.clock.try_emplace(worker.itn, slowest).first->second;
      if (mine > slowest + policy_.staleness) return degraded_locked() ? Admission::not_ready : Admission::park;
    }
  }
  // A second push of sectors the worker already pushed in an open round waits for that round to close.
  for (std::uint64_t b = first_block; b <= last_block && !ssp; ++b) {
    const auto found = blocks_[b].open.find(worker.itn);
    if (found == blocks_[b].open.end()) continue;
    const auto [first_sector, sectors] = sector_range(b);
    if (found->second->claims_any(first_sector, sectors)) return Admission::park;
  }
  std::vector<TicketPiece> ticket;
  const std::size_t esize = wire_size(geometry_.dtype);
  for (std::uint64_t b = first_block; b <= last_block; ++b) {
    BlockRounds& br = blocks_[b];
    const std::uint64_t base = b * geometry_.block_bytes;
    const auto [begin, stop] = sector_span(b);
    const auto [first_sector, sectors] = sector_range(b);
    // Copies, not the bindings themselves: clang before 16 cannot capture structured bindings in a lambda.
    const auto claim = [&, first = first_sector, count = sectors](Contribution& c) {
      for (std::uint64_t s = first; s < first + count; ++s) c.claimed[s] = true;
      c.claimed_n += static_cast<std::uint32_t>(count);
    };
    if (const auto t = br.dropped.find(worker.itn); t != br.dropped.end()) {
      if (!t->second->claims_any(first_sector, sectors)) {  // the rest of the dropped push
        claim(*t->second);
        ticket.push_back({t->second, begin - offset, (begin - base) / esize, (stop - begin) / esize,
                          static_cast<std::uint32_t>(sectors)});
        if (t->second->claimed_n == t->second->sectors) br.dropped.erase(t);
        continue;
      }
      br.dropped.erase(t);
    }
    auto& c = br.open[worker.itn];
    if (!c) {
      if (br.open.size() == 1) {
        br.first_push = now;
        if (!ssp && !br.listed_open) {
          br.listed_open = true;
          open_blocks_.push_back(b);
        }
      }
      const std::uint64_t block_len = std::min<std::uint64_t>(geometry_.bytes - base, geometry_.block_bytes);
      // ssp applies each push at once: the contribution only tracks which sectors the push covered.
      c = std::make_shared<Contribution>();
      c->block = b;
      c->round = br.open_round();
      c->itn = worker.itn;
      c->iqn = worker.iqn;
      c->elements = ssp ? 0 : block_len / esize;
      c->claimed.assign(block_len / kSectorBytes, false);
      c->sectors = static_cast<std::uint32_t>(block_len / kSectorBytes);
    }
    claim(*c);
    br.last_pushed[worker.itn] = c->round;
    ticket.push_back(
        {c, begin - offset, (begin - base) / esize, (stop - begin) / esize, static_cast<std::uint32_t>(sectors)});
  }
  tickets_[handle] = std::move(ticket);
  return Admission::run;
}

bool SyncRounds::land_push(const void* handle, std::span<const std::byte> data) {
  std::vector<TicketPiece> ticket;
  {
    std::lock_guard lock(mutex_);
    auto it = tickets_.find(handle);
    if (it == tickets_.end()) return false;
    ticket = std::move(it->second);
    tickets_.erase(it);
  }
  // The claimed sectors belong to this push alone, so the decode needs no lock; a contribution dropped
  // meanwhile (straggler close, worker dropped, reset) stays alive through the ticket and is discarded after.
  const std::size_t esize = wire_size(geometry_.dtype);
  const bool ssp = policy_mode() == RoundPolicy::Mode::ssp;
  if (ssp) {
    if (ticket.empty()) return true;
    // One optimizer step over the whole contiguous request: the engine runs its blocks in parallel.
    const TicketPiece& first = ticket.front();
    std::uint64_t bytes = 0;
    for (const TicketPiece& p : ticket) bytes += p.elements * esize;
    const auto t0 = Clock::now();
    const Status pushed =
        model_.push_gradient(first.contribution->block * geometry_.block_bytes + first.element_in_block * esize,
                             data.first(static_cast<std::size_t>(std::min<std::uint64_t>(bytes, data.size()))));
    if (!pushed.ok()) log_line("ssp: push not applied: " + pushed.message());
    if (on_applied_) on_applied_(static_cast<std::uint64_t>(std::chrono::nanoseconds(Clock::now() - t0).count()));
  } else {
    for (const TicketPiece& p : ticket) {
      const std::uint64_t have = data.size() > p.data_offset ? (data.size() - p.data_offset) / esize : 0;
      const std::uint64_t n = std::min(have, p.elements);
      Contribution& c = *p.contribution;
      if (c.discarded) continue;
      std::call_once(c.grad_allocated, [&c] { c.grad.resize(c.elements); });
      decode_wire(geometry_.dtype, data.data() + p.data_offset, c.grad.data() + p.element_in_block, n);
    }
  }
  std::vector<std::uint64_t> touched;
  {
    std::lock_guard lock(mutex_);
    for (const TicketPiece& p : ticket) {
      Contribution& c = *p.contribution;
      c.landed_n += p.sectors;
      touched.push_back(c.block);
      BlockRounds& br = blocks_[c.block];
      if (ssp && c.complete()) {  // one whole push of the block: the worker's clock moves on
        const auto it = br.open.find(c.itn);
        if (it != br.open.end() && it->second == p.contribution) {
          ++br.clock[c.itn];
          br.open.erase(it);
        }
      }
    }
    if (!ticket.empty()) {
      if (auto m = members_.find(ticket.front().contribution->itn); m != members_.end()) {
        m->second.last_push = Clock::now();
        ++m->second.pushes;
      }
    }
  }
  if (ssp) {
    wake_parked();  // a push waiting on this worker's clock may go on
  } else {
    close_ready_blocks(std::move(touched));
  }
  return true;
}

RoundPolicy::Mode SyncRounds::policy_mode() const {
  std::lock_guard lock(mutex_);
  return policy_.mode;
}

Admission SyncRounds::admit_pull(std::uint64_t itn, std::uint64_t offset, std::uint64_t len) {
  if (len == 0 || offset >= geometry_.bytes) return Admission::run;
  const std::uint64_t end = std::min(offset + len, geometry_.bytes);
  std::lock_guard lock(mutex_);
  if (!members_.count(itn) || policy_.mode == RoundPolicy::Mode::ssp) return Admission::run;
  for (std::uint64_t b = offset / geometry_.block_bytes; b <= (end - 1) / geometry_.block_bytes; ++b) {
    const auto it = blocks_[b].last_pushed.find(itn);
    if (it != blocks_[b].last_pushed.end() && it->second >= blocks_[b].applied)
      return degraded_locked() ? Admission::not_ready : Admission::park;
  }
  return Admission::run;
}

void SyncRounds::park(const void* owner, const void* handle, bool is_push, const WorkerRef& worker,
                      std::uint64_t offset, std::uint64_t len, std::string refusal) {
  std::lock_guard lock(mutex_);
  parked_.emplace(owner,
                  Parked{handle, is_push, worker, offset, len,
                         Clock::now() + std::chrono::milliseconds(policy_.worker_timeout_ms), std::move(refusal)});
}

void SyncRounds::process_parked(const void* owner, const std::function<bool(int, std::uint64_t)>& alive,
                                const std::function<bool(const void*)>& aborted,
                                const std::function<void(const Parked&)>& resubmit,
                                const std::function<void(const Parked&, bool, const std::string&)>& fail) {
  // Sessions that are gone: tgt has no logout callback for stores, so ask (docs/ARCHITECTURE.md, "Facts about tgt").
  std::vector<WorkerRef> members;
  {
    std::lock_guard lock(mutex_);
    for (const auto& [itn, m] : members_) members.push_back(m.ref);
  }
  std::vector<std::uint64_t> gone;
  for (const WorkerRef& w : members)
    if (!alive(w.tid, w.itn)) gone.push_back(w.itn);
  std::vector<Parked> mine;
  std::uint32_t timeout_ms = 0;
  {
    std::lock_guard lock(mutex_);
    for (std::uint64_t itn : gone) remove_member_locked(itn, "its session is gone");
    if (!gone.empty()) {
      recheck_ = true;
      keeper_cv_.notify_all();
    }
    auto [first, last] = parked_.equal_range(owner);
    for (auto it = first; it != last; ++it) mine.push_back(it->second);
    parked_.erase(first, last);
    timeout_ms = policy_.worker_timeout_ms;
  }
  const auto now = Clock::now();
  for (const Parked& p : mine) {
    if (aborted(p.handle)) {
      fail(p, true, "aborted by the initiator");
      continue;
    }
    if (!p.refusal.empty()) {
      fail(p, false, p.refusal);
      continue;
    }
    if (now >= p.deadline) {
      const std::string degraded = degraded_reason();
      fail(p, false,
           "parked for worker_timeout_ms=" + std::to_string(timeout_ms) + " without its round closing" +
               (degraded.empty() ? "" : " (" + degraded + ")"));
      continue;
    }
    const Admission a =
        p.is_push ? admit_push(p.handle, p.worker, p.offset, p.len) : admit_pull(p.worker.itn, p.offset, p.len);
    if (a == Admission::run) {
      resubmit(p);
    } else if (a == Admission::not_ready) {
      fail(p, false, degraded_reason());
    } else {
      std::lock_guard lock(mutex_);
      parked_.emplace(owner, p);  // keeps its first deadline
    }
  }
}

void SyncRounds::refuse_parked(const void* owner, const std::string& why) {
  std::lock_guard lock(mutex_);
  auto [first, last] = parked_.equal_range(owner);
  for (auto it = first; it != last; ++it) it->second.refusal = why;
}

void SyncRounds::subscribe(const void* owner, std::function<void()> wake) {
  std::lock_guard lock(mutex_);
  subscribers_[owner] = std::move(wake);
}

void SyncRounds::unsubscribe(const void* owner) {
  std::lock_guard lock(mutex_);
  subscribers_.erase(owner);
}

void SyncRounds::reset() {
  {
    std::lock_guard lock(mutex_);
    for (BlockRounds& b : blocks_) {
      b.open.clear();
      b.dropped.clear();
      b.last_pushed.clear();
      b.clock.clear();
      b.applied = 0;
    }
    formed_ = members_.size() >= policy_.workers;
    log_line("sync: rounds reset (open rounds dropped, counters at 0)");
  }
  wake_all();
}

std::string SyncRounds::degraded_reason() const {
  std::lock_guard lock(mutex_);
  return degraded_reason_locked();
}

bool SyncRounds::degraded_locked() const { return formed_ && members_.size() < policy_.min_workers; }

std::string SyncRounds::degraded_reason_locked() const {
  if (!degraded_locked()) return "";
  std::string why =
      "live workers " + std::to_string(members_.size()) + " < min_workers=" + std::to_string(policy_.min_workers);
  if (!drop_log_.empty()) why += "; last drop: " + drop_log_.back();
  return why;
}

bool SyncRounds::closable_locked(const BlockRounds& b, Clock::time_point now, bool& by_straggler) const {
  if (b.closing || b.open.empty()) return false;
  std::size_t complete = 0;
  for (const auto& [itn, c] : b.open) {
    if (c->in_flight()) return false;  // a push is still landing: wait for it (microseconds)
    if (c->complete()) ++complete;
  }
  if (complete == 0) return false;
  bool all_members = true;
  for (const auto& [itn, m] : members_) {
    const auto it = b.open.find(itn);
    all_members = all_members && it != b.open.end() && it->second->complete();
  }
  const std::size_t needed = formed_ ? policy_.min_workers : policy_.workers;
  if (all_members && members_.size() >= needed) {
    by_straggler = false;
    return true;
  }
  by_straggler = true;
  return now >= b.first_push + std::chrono::milliseconds(policy_.straggler_ms) && complete >= policy_.min_workers;
}

void SyncRounds::close_ready_blocks(std::vector<std::uint64_t> candidates) {
  std::sort(candidates.begin(), candidates.end());
  candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());
  bool closed_any = false;
  for (std::uint64_t b : candidates) {
    for (;;) {  // the next round of a block may be complete by the time this one is applied
      std::vector<std::shared_ptr<Contribution>> complete;
      Clock::time_point first_push;
      {
        std::lock_guard lock(mutex_);
        BlockRounds& br = blocks_[b];
        bool by_straggler = false;
        if (!closable_locked(br, Clock::now(), by_straggler)) break;
        for (auto& [itn, c] : br.open)
          if (c->complete()) complete.push_back(c);
        if (by_straggler) {
          formed_ = true;  // the round formed without the missing workers
          for (const auto& [itn, m] : members_) {
            const auto it = br.open.find(itn);
            if (it == br.open.end() || !it->second->complete()) ++stragglers_dropped_;
          }
          for (auto& [itn, c] : br.open) {
            if (c->complete()) continue;
            c->discarded = true;
            br.dropped[itn] = c;
          }
        }
        br.open.clear();
        br.closing = true;
        first_push = br.first_push;
      }
      // A fixed order (IQN, then session) makes the f32 sum the same whatever order the pushes arrived in.
      std::sort(complete.begin(), complete.end(),
                [](const auto& x, const auto& y) { return std::tie(x->iqn, x->itn) < std::tie(y->iqn, y->itn); });
      const auto t0 = Clock::now();
      std::vector<float> avg = std::move(complete.front()->grad);
      for (std::size_t i = 1; i < complete.size(); ++i) {
        const std::vector<float>& g = complete[i]->grad;
        for (std::size_t e = 0; e < avg.size(); ++e) avg[e] += g[e];
      }
      const float scale = 1.0f / static_cast<float>(complete.size());
      for (float& v : avg) v *= scale;
      if (Status applied = model_.apply_gradient_f32(b * geometry_.block_bytes, avg); !applied.ok())
        log_line("sync: round of block " + std::to_string(b) + " not applied: " + applied.message());
      const auto t1 = Clock::now();
      const auto apply_ns = static_cast<std::uint64_t>(std::chrono::nanoseconds(t1 - t0).count());
      if (on_applied_) on_applied_(apply_ns);
      round_latency_.add(static_cast<std::uint64_t>(std::chrono::nanoseconds(t1 - first_push).count()));
      std::lock_guard lock(mutex_);
      BlockRounds& br = blocks_[b];
      br.closing = false;
      ++br.applied;
      ++rounds_closed_;
      closed_any = true;
    }
  }
  if (closed_any) wake_parked();
}

void SyncRounds::remove_member_locked(std::uint64_t itn, const std::string& why) {
  const auto it = members_.find(itn);
  if (it == members_.end()) return;
  const std::string line = it->second.ref.iqn + " (session " + std::to_string(itn) + "): " + why;
  log_line("sync: worker dropped: " + line);
  drop_log_.push_back(line);
  if (drop_log_.size() > kDropLogLines) drop_log_.erase(drop_log_.begin());
  members_.erase(it);
  ++workers_dropped_;
  // Its complete gradients of open rounds still count; half-pushed ones are discarded.
  for (BlockRounds& b : blocks_) {
    const auto c = b.open.find(itn);
    if (c != b.open.end() && !c->second->complete()) b.open.erase(c);
    b.last_pushed.erase(itn);
    b.clock.erase(itn);  // a gone worker holds nobody back
    // Session numbers are recycled: a later session with this one must not inherit its tombstones.
    b.dropped.erase(itn);
  }
}

void SyncRounds::wake_parked() {
  std::lock_guard lock(mutex_);
  if (parked_.empty()) return;  // nothing waits: spare tgtd's main thread the wake-up
  for (const auto& [owner, wake] : subscribers_) wake();
}

void SyncRounds::wake_all() {
  std::lock_guard lock(mutex_);
  for (const auto& [owner, wake] : subscribers_) wake();
}

void SyncRounds::keep(std::stop_token stop) {
  auto last_wake = Clock::now();
  while (!stop.stop_requested()) {
    std::vector<std::uint64_t> open_blocks;
    bool wake = false;
    {
      std::unique_lock lock(mutex_);
      keeper_cv_.wait_for(lock, stop, kKeeperTick, [this] { return recheck_; });
      if (stop.stop_requested()) return;
      recheck_ = false;
      const auto now = Clock::now();
      std::vector<std::uint64_t> silent;
      for (const auto& [itn, m] : members_)
        if (now - m.last_push > std::chrono::milliseconds(policy_.worker_timeout_ms)) silent.push_back(itn);
      for (std::uint64_t itn : silent)
        remove_member_locked(itn, "no push for worker_timeout_ms=" + std::to_string(policy_.worker_timeout_ms));
      // Blocks listed but closed meanwhile leave the list here, not on every close path.
      std::erase_if(open_blocks_, [this](std::uint64_t b) {
        BlockRounds& br = blocks_[b];
        br.listed_open = !br.open.empty();
        return !br.listed_open;
      });
      open_blocks = open_blocks_;
      if (now - last_wake >= kWakeEvery && (!parked_.empty() || !members_.empty())) {
        wake = true;
        last_wake = now;
      }
    }
    close_ready_blocks(std::move(open_blocks));
    if (wake) wake_all();
  }
}

nlohmann::json SyncRounds::status() const {
  std::lock_guard lock(mutex_);
  const auto now = Clock::now();
  std::uint64_t rmin = blocks_.empty() ? 0 : UINT64_MAX, rmax = 0, open = 0;
  const bool ssp = policy_.mode == RoundPolicy::Mode::ssp;
  for (const BlockRounds& b : blocks_) {
    // ssp: a block's round is its slowest live worker's push count; sync: the rounds applied.
    std::uint64_t lo = ssp ? UINT64_MAX : b.applied, hi = ssp ? 0 : b.applied;
    for (const auto& [itn, c] : b.clock) {
      lo = std::min(lo, c);
      hi = std::max(hi, c);
    }
    if (lo == UINT64_MAX) lo = 0;
    rmin = std::min(rmin, lo);
    rmax = std::max(rmax, hi);
    open += b.open.empty() ? 0 : 1;
  }
  nlohmann::json workers = nlohmann::json::array();
  for (const auto& [itn, m] : members_) {
    // A worker's round on this shard: the fewest rounds it has pushed into over the blocks.
    std::uint64_t pushed = UINT64_MAX;
    for (const BlockRounds& b : blocks_) {
      if (ssp) {
        const auto c = b.clock.find(itn);
        pushed = std::min<std::uint64_t>(pushed, c == b.clock.end() ? 0 : c->second);
        continue;
      }
      const auto it = b.last_pushed.find(itn);
      pushed = std::min<std::uint64_t>(pushed, it == b.last_pushed.end() ? b.applied : it->second + 1);
    }
    if (blocks_.empty()) pushed = 0;
    workers.push_back({{"iqn", m.ref.iqn},
                       {"session", itn},
                       {"pushes", m.pushes},
                       {"last_push_ms_ago", ms_between(m.last_push, now)},
                       {"joined_ms_ago", ms_between(m.joined, now)},
                       {"rounds_behind", rmax > pushed ? rmax - pushed : 0}});
  }
  return {{"mode", to_string(policy_)},
          {"workers", policy_.workers},
          {"min_workers", policy_.min_workers},
          {"straggler_ms", policy_.straggler_ms},
          {"worker_timeout_ms", policy_.worker_timeout_ms},
          {"rounds_min", rmin},
          {"rounds_max", rmax},
          {"rounds_closed", rounds_closed_},
          {"open_rounds", open},
          {"live_workers", workers},
          {"stragglers_dropped", stragglers_dropped_},
          {"workers_dropped", workers_dropped_},
          {"recent_drops", drop_log_},
          {"parked_commands", parked_.size()},
          {"degraded", degraded_locked()},
          {"degraded_reason", degraded_reason_locked()},
          {"round_latency", round_latency_.percentiles()}};
}

}  // namespace blockps
