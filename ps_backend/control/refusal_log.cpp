#include "ps_backend/control/refusal_log.h"

#include <algorithm>
#include <chrono>
#include <utility>

namespace blockps {

RefusalLog::RefusalLog(std::size_t capacity) : capacity_(std::max<std::size_t>(capacity, 1)) {}

void RefusalLog::add(const WorkerRef& who, LuRole lu, std::string reason) {
  const auto unix_ms = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
  std::lock_guard lock(mutex_);
  const auto same = std::find_if(entries_.begin(), entries_.end(), [&](const RefusalEntry& e) {
    return e.session == who.itn && e.lu == lu && e.iqn == who.iqn && e.reason == reason;
  });
  RefusalEntry entry{who.iqn, who.itn, lu, std::move(reason), unix_ms, 1};
  if (same != entries_.end()) {
    entry.count = same->count + 1;
    entries_.erase(same);
  } else if (entries_.size() == capacity_) {
    entries_.erase(entries_.begin());
  }
  entries_.push_back(std::move(entry));
}

std::vector<RefusalEntry> RefusalLog::recent() const {
  std::lock_guard lock(mutex_);
  return entries_;
}

}  // namespace blockps
