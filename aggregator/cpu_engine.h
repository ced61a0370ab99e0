// The CPU aggregation engine: vectorised fused loops (one pass over w, g and state) and a small pool of
// threads that runs the blocks of one request in parallel.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "aggregator/optimizer.h"
#include "aggregator/wire_convert.h"

namespace blockps {

/// w[i], s0[i], s1[i] updated from wire-format gradient g[i] for i < n: the fused loop for one (kind, dtype).
/// s0/s1 may be null when the optimizer has fewer slots.
void cpu_update(OptimizerKind kind, WireDtype dtype, const StepConstants& k, float* w, const void* g, float* s0,
                float* s1, std::size_t n);

class CpuEngine {
 public:
  /// threads == 0: one per hardware thread. threads == 1: everything runs on the caller's thread.
  explicit CpuEngine(unsigned threads);
  ~CpuEngine();
  CpuEngine(const CpuEngine&) = delete;
  CpuEngine& operator=(const CpuEngine&) = delete;

  unsigned threads() const;
  /// Run task(i) for i in [0, n) on the pool and the calling thread; returns when all are done. Tasks must not
  /// throw. Safe to call from several threads at once.
  void parallel_for(std::size_t n, const std::function<void(std::size_t)>& task);

 private:
  struct Pool;
  Pool* pool_;
};

}  // namespace blockps
