// Independent scalar references for the aggregator tests: wire formats from their definition (sign, exponent,
// mantissa) in double arithmetic, and the optimizer formulas written out, so that a test compares the engine
// against something that shares none of its code.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "aggregator/optimizer.h"
#include "aggregator/wire_convert.h"

namespace blockps::test {

/// A binary floating-point format's finite range, as far as rounding to it is concerned.
struct Format {
  int mantissa_bits;  // explicit bits after the binary point
  int exponent_bits;
  int min_exponent;  // of the smallest normal
  double max_finite;
};
inline constexpr Format kBf16{7, 8, -126, 0x1.fep127};
inline constexpr Format kF16{10, 5, -14, 65504.0};
inline constexpr Format kF32{23, 8, -126, 0x1.fffffep127};

inline Format format_of(WireDtype d) { return d == WireDtype::bf16 ? kBf16 : d == WireDtype::f16 ? kF16 : kF32; }

/// The value a 16-bit pattern of `f` stands for (NaN for NaNs).
inline double value_of_bits(const Format& f, std::uint16_t h) {
  const int bias = (1 << (f.exponent_bits - 1)) - 1;
  const unsigned max_exponent_field = (1u << f.exponent_bits) - 1;
  const unsigned mantissa = h & ((1u << f.mantissa_bits) - 1);
  const unsigned exponent = (h >> f.mantissa_bits) & max_exponent_field;
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  if (exponent == max_exponent_field) return mantissa == 0 ? sign * INFINITY : NAN;
  if (exponent == 0) return sign * std::ldexp(double(mantissa), 1 - bias - f.mantissa_bits);
  return sign * std::ldexp(double(mantissa + (1u << f.mantissa_bits)), int(exponent) - bias - f.mantissa_bits);
}

/// The 16-bit pattern of `f` for x, which must be a finite value of `f`.
inline std::uint16_t bits_of_value(const Format& f, double x) {
  const int bias = (1 << (f.exponent_bits - 1)) - 1;
  const std::uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double magnitude = std::fabs(x);
  if (magnitude == 0) return sign;
  const int exponent = std::ilogb(magnitude);
  if (exponent < f.min_exponent) {  // subnormal: mantissa counts quanta of the smallest exponent
    return static_cast<std::uint16_t>(sign | unsigned(std::ldexp(magnitude, f.mantissa_bits - f.min_exponent)));
  }
  const unsigned mantissa = unsigned(std::ldexp(magnitude, f.mantissa_bits - exponent)) - (1u << f.mantissa_bits);
  return static_cast<std::uint16_t>(sign | (unsigned(exponent + bias) << f.mantissa_bits) | mantissa);
}

/// x rounded to the nearest value of `f`, ties to even; beyond the range: Inf. Signed zeros keep their sign.
inline double round_to(const Format& f, double x) {
  if (std::isnan(x) || std::isinf(x) || x == 0) return x;
  const double magnitude = std::fabs(x);
  const int exponent = std::max(std::ilogb(magnitude), f.min_exponent);
  const double quantum = std::ldexp(1.0, exponent - f.mantissa_bits);
  double r = std::nearbyint(magnitude / quantum) * quantum;  // default rounding mode: to nearest, ties to even
  if (r > f.max_finite) r = INFINITY;
  return std::copysign(r, x);
}

/// One optimizer step on one element, the formulas of optimizer.h written out.
inline void reference_step(const OptimizerParams& p, std::uint64_t t, float& w, float g, float& s0, float& s1) {
  const float bc1 = static_cast<float>(1.0 - std::pow(double(p.beta1), double(t)));
  const float bc2 = static_cast<float>(1.0 - std::pow(double(p.beta2), double(t)));
  switch (p.kind) {
    case OptimizerKind::sgd:
      g = g + p.weight_decay * w;
      w = w - p.lr * g;
      break;
    case OptimizerKind::momentum: {
      g = g + p.weight_decay * w;
      s0 = p.momentum * s0 + g;
      const float d = p.nesterov ? g + p.momentum * s0 : s0;
      w = w - p.lr * d;
      break;
    }
    case OptimizerKind::adam:
    case OptimizerKind::adamw:
      if (p.kind == OptimizerKind::adam) {
        g = g + p.weight_decay * w;
      } else {
        w = w - p.lr * p.weight_decay * w;
      }
      s0 = p.beta1 * s0 + (1.0f - p.beta1) * g;
      s1 = p.beta2 * s1 + (1.0f - p.beta2) * g * g;
      w = w - p.lr * (s0 / bc1) / (std::sqrt(s1 / bc2) + p.eps);
      break;
    case OptimizerKind::sum:
      w = w + g;
      break;
    case OptimizerKind::average:
      w = g;
      break;
  }
}

}  // namespace blockps::test
