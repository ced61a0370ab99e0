#include "ps_backend/latency_window.h"

#include <algorithm>
#include <vector>

#include "ps_backend/contract/status_page.h"

namespace blockps {

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
  namespace latency = status_page::latency;
  return {{latency::kCount, s.size()},
          {latency::kP50Ns, at(0.5)},
          {latency::kP90Ns, at(0.9)},
          {latency::kP99Ns, at(0.99)},
          {latency::kMaxNs, s.empty() ? 0 : s.back()},
          {latency::kTotalCount, added_.load(std::memory_order_relaxed)},
          {latency::kTotalNs, total_ns_.load(std::memory_order_relaxed)}};
}

}  // namespace blockps
