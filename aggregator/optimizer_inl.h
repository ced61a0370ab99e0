// ElementUpdate<K>: the one definition of each optimizer's math (see optimizer.h), compiled by every engine.
// Each apply() is straight-line f32 arithmetic: no branches, so the CPU loops vectorise, and the expression
// order is the documented one, so every engine rounds identically.
#pragma once

#include <cmath>

namespace blockps {

template <>
struct ElementUpdate<OptimizerKind::sgd> {
  BLOCKPS_HD static void apply(const StepConstants& k, float& w, float g, float& /*s0*/, float& /*s1*/) {
    g += k.weight_decay * w;
    w -= k.lr * g;
  }
};

template <>
struct ElementUpdate<OptimizerKind::momentum> {
  BLOCKPS_HD static void apply(const StepConstants& k, float& w, float g, float& velocity, float& /*s1*/) {
    g += k.weight_decay * w;
    velocity = k.momentum * velocity + g;
    // Both directions are computed and one is picked, rather than branching, to keep the loop vectorisable.
    const float nesterov_direction = g + k.momentum * velocity;
    w -= k.lr * (k.nesterov ? nesterov_direction : velocity);
  }
};

namespace detail {

/// The Adam moment update and step shared by adam and adamw (gradient already carries any L2 term).
BLOCKPS_HD void adam_step(const StepConstants& k, float& w, float g, float& m, float& v) {
  m = k.beta1 * m + (1.0f - k.beta1) * g;
  v = k.beta2 * v + (1.0f - k.beta2) * g * g;
  w -= k.lr * (m / k.bias_correction1) / (sqrtf(v / k.bias_correction2) + k.eps);
}

}  // namespace detail

template <>
struct ElementUpdate<OptimizerKind::adam> {
  BLOCKPS_HD static void apply(const StepConstants& k, float& w, float g, float& m, float& v) {
    g += k.weight_decay * w;
    detail::adam_step(k, w, g, m, v);
  }
};

template <>
struct ElementUpdate<OptimizerKind::adamw> {
  BLOCKPS_HD static void apply(const StepConstants& k, float& w, float g, float& m, float& v) {
    w -= k.lr * k.weight_decay * w;  // decoupled weight decay, before the Adam step
    detail::adam_step(k, w, g, m, v);
  }
};

template <>
struct ElementUpdate<OptimizerKind::sum> {
  BLOCKPS_HD static void apply(const StepConstants& /*k*/, float& w, float g, float& /*s0*/, float& /*s1*/) { w += g; }
};

template <>
struct ElementUpdate<OptimizerKind::average> {
  BLOCKPS_HD static void apply(const StepConstants& /*k*/, float& w, float g, float& /*s0*/, float& /*s1*/) { w = g; }
};

}  // namespace blockps
