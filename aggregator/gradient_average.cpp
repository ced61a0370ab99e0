#include "aggregator/gradient_average.h"

#include <algorithm>
#include <cstddef>

#include "aggregator/cpu_clones.h"

namespace blockps {
namespace {

BLOCKPS_INLINE_LOOP void add_loop(float* __restrict sum, const float* __restrict g, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) sum[i] += g[i];
}

BLOCKPS_INLINE_LOOP void scale_loop(float* __restrict v, float scale, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) v[i] *= scale;
}

}  // namespace

BLOCKPS_CPU_CLONES void average_gradients(std::span<const float* const> grads, std::span<float> out) {
  if (grads.empty()) return;
  float* sum = out.data();
  const std::size_t n = out.size();
  if (grads[0] != sum) std::copy(grads[0], grads[0] + n, sum);
  // One gradient at a time over the whole block: each element still gets its terms in the given order.
  for (std::size_t j = 1; j < grads.size(); ++j) add_loop(sum, grads[j], n);
  scale_loop(sum, 1.0f / static_cast<float>(grads.size()), n);
}

}  // namespace blockps
