#include "ps_backend/base/latency_window.h"

#include <algorithm>
#include <vector>

namespace blockps {

void LatencyWindow::add(std::uint64_t ns) {
  samples_[added_.fetch_add(1, std::memory_order_relaxed) % kSamples].store(ns, std::memory_order_relaxed);
  total_ns_.fetch_add(ns, std::memory_order_relaxed);
}

LatencySummary LatencyWindow::summary() const {
  // A sample being written while the page is made may be the old or the new one: fine for percentiles.
  const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(added_.load(), kSamples));
  std::vector<std::uint64_t> s(n);
  for (std::size_t i = 0; i < n; ++i) s[i] = samples_[i].load(std::memory_order_relaxed);
  std::sort(s.begin(), s.end());
  const auto at = [&](double q) { return s.empty() ? 0 : s[static_cast<std::size_t>(q * (s.size() - 1))]; };
  LatencySummary out;
  out.count = s.size();
  out.p50_ns = at(0.5);
  out.p90_ns = at(0.9);
  out.p99_ns = at(0.99);
  out.max_ns = s.empty() ? 0 : s.back();
  out.total_count = added_.load(std::memory_order_relaxed);
  out.total_ns = total_ns_.load(std::memory_order_relaxed);
  return out;
}

}  // namespace blockps
