#include "ps_backend/rounds/parking.h"

#include <utility>
#include <vector>

namespace blockps {

void ParkingLot::park(const void* owner, const void* handle, bool is_push, const WorkerRef& worker,
                      std::uint64_t offset, std::uint64_t len, std::string refusal, Refusal refused_as) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms_);
  std::lock_guard lock(mutex_);
  const bool refused = !refusal.empty();
  parked_.emplace(owner, ParkedCommand{handle, is_push, worker, offset, len, deadline, std::move(refusal), refused_as});
  // A refused command is answered at its owner's next wake: bring that wake now.
  if (const auto it = subscribers_.find(owner); refused && it != subscribers_.end()) it->second();
}

void ParkingLot::refuse(const void* owner, const std::string& why) {
  std::lock_guard lock(mutex_);
  auto [first, last] = parked_.equal_range(owner);
  for (auto it = first; it != last; ++it) {
    it->second.refusal = why;
    it->second.refused_as = Refusal::not_ready;
  }
}

void ParkingLot::refuse_all(const std::string& why, Refusal as) {
  std::lock_guard lock(mutex_);
  for (auto& [owner, p] : parked_) {
    p.refusal = why;
    p.refused_as = as;
  }
}

void ParkingLot::process(const void* owner, const std::function<bool(const void*)>& aborted, const Readmit& readmit,
                         const Resubmit& resubmit, const Fail& fail,
                         const std::function<std::string()>& degraded_reason) {
  std::vector<ParkedCommand> mine;
  {
    std::lock_guard lock(mutex_);
    auto [first, last] = parked_.equal_range(owner);
    for (auto it = first; it != last; ++it) mine.push_back(std::move(it->second));
    parked_.erase(first, last);
  }
  const auto now = std::chrono::steady_clock::now();
  for (const ParkedCommand& p : mine) {
    if (aborted(p.handle)) {
      fail(p, Refusal::aborted, "aborted by the initiator");
      continue;
    }
    if (!p.refusal.empty()) {
      fail(p, p.refused_as, p.refusal);
      continue;
    }
    if (now >= p.deadline) {
      const std::string degraded = degraded_reason();
      fail(p, Refusal::not_ready,
           "parked for worker_timeout_ms=" + std::to_string(timeout_ms_) + " without its round closing" +
               (degraded.empty() ? "" : " (" + degraded + ")"));
      continue;
    }
    switch (readmit(p)) {
      case Admission::run:
        resubmit(p);
        break;
      case Admission::not_ready:
        fail(p, Refusal::not_ready, degraded_reason());
        break;
      case Admission::failed:
        fail(p, Refusal::failed, degraded_reason());
        break;
      case Admission::conflict:  // never the rounds' answers: the admission gate refuses before they see a command
      case Admission::denied:
        fail(p, Refusal::reservation_conflict, degraded_reason());
        break;
      case Admission::park: {
        std::lock_guard lock(mutex_);
        parked_.emplace(owner, p);  // keeps its first deadline
        break;
      }
    }
  }
}

void ParkingLot::subscribe(const void* owner, std::function<void()> wake) {
  std::lock_guard lock(mutex_);
  subscribers_[owner] = std::move(wake);
}

void ParkingLot::unsubscribe(const void* owner) {
  std::lock_guard lock(mutex_);
  subscribers_.erase(owner);
}

void ParkingLot::wake_all() const {
  std::lock_guard lock(mutex_);
  for (const auto& [owner, wake] : subscribers_) wake();
}

void ParkingLot::wake_if_parked() const {
  std::lock_guard lock(mutex_);
  if (parked_.empty()) return;
  for (const auto& [owner, wake] : subscribers_) wake();
}

std::size_t ParkingLot::size() const {
  std::lock_guard lock(mutex_);
  return parked_.size();
}

}  // namespace blockps
