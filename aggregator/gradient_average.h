// The average of several workers' f32 gradients of one block: what a synchronous round applies. The sum is
// taken in the order the caller gives, so the result is the same bits whatever order the pushes arrived in.
#pragma once

#include <span>

namespace blockps {

/// out[i] = (grads[0][i] + grads[1][i] + ... + grads[k-1][i]) * (1.0f / k) for i < out.size(), in f32, added
/// left to right in the order of `grads` (f32 addition is not associative: the order is part of the result),
/// then scaled once. Every grads[j] points at out.size() elements or more; `out` may be grads[0]'s storage (the
/// sum then starts in place) but overlaps no other. No gradients (k = 0) leave `out` as it is. The same bits on
/// every instruction set.
void average_gradients(std::span<const float* const> grads, std::span<float> out);

}  // namespace blockps
