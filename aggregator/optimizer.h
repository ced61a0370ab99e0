// The optimizers: one element-wise definition each (ElementUpdate<K>::apply), shared by every engine.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "aggregator/host_device.h"

namespace blockps {

enum class OptimizerKind : std::uint8_t { sgd = 0, momentum = 1, adam = 2, adamw = 3, sum = 4, average = 5 };

/// Every kind, for whoever walks them (parsers, tests, benchmarks).
inline constexpr OptimizerKind kAllOptimizerKinds[] = {OptimizerKind::sgd,  OptimizerKind::momentum,
                                                       OptimizerKind::adam, OptimizerKind::adamw,
                                                       OptimizerKind::sum,  OptimizerKind::average};

std::string_view to_string(OptimizerKind k);
std::optional<OptimizerKind> parse_optimizer(std::string_view name);
/// f32 state values kept per element: momentum 1 (velocity), adam/adamw 2 (m, v), sgd/sum/average 0.
constexpr int state_slots(OptimizerKind k) {
  return k == OptimizerKind::momentum ? 1 : (k == OptimizerKind::adam || k == OptimizerKind::adamw) ? 2 : 0;
}

/// Hyper-parameters (PyTorch's names and meaning).
struct OptimizerParams {
  OptimizerKind kind = OptimizerKind::sgd;
  float lr = 0.01f;
  float weight_decay = 0.0f;  // sgd/momentum/adam: L2 added to g; adamw: decoupled (w -= lr*wd*w)
  float momentum = 0.9f;      // momentum: mu
  bool nesterov = false;      // momentum
  float beta1 = 0.9f;         // adam/adamw
  float beta2 = 0.999f;
  float eps = 1e-8f;
};

/// Per-call constants: hyper-parameters plus the bias corrections of step t (t >= 1, counted per block).
struct StepConstants {
  float lr, weight_decay, momentum, beta1, beta2, eps;
  float bias_correction1;  // 1 - beta1^t
  float bias_correction2;  // 1 - beta2^t
  bool nesterov;
};
StepConstants step_constants(const OptimizerParams& p, std::uint64_t step);

/// ElementUpdate<K>::apply(k, w, g, s0, s1): one element of one optimizer step. s0/s1 are the element's state
/// slots (unused ones are ignored). Semantics (all f32):
///   sgd:      g += wd*w;  w -= lr*g
///   momentum: g += wd*w;  s0 = mu*s0 + g;  d = nesterov ? g + mu*s0 : s0;  w -= lr*d
///   adam:     g += wd*w;  s0 = b1*s0 + (1-b1)*g;  s1 = b2*s1 + (1-b2)*g*g;
///             w -= lr * (s0/bc1) / (sqrt(s1/bc2) + eps)
///   adamw:    w -= lr*wd*w;  then adam without the L2 term
///   sum:      w += g
///   average:  w = g (an averaging shard: mode=sync hands it a round's average gradient, which READs return)
template <OptimizerKind K>
struct ElementUpdate;

}  // namespace blockps

#include "aggregator/optimizer_inl.h"
