// Definitions of the scalar wire conversions declared in wire_dtype.h. They are compiled by the CPU engine and
// (when built) by nvcc, so they use nothing but integer/float arithmetic and memcpy, and they are branch-free:
// GCC only vectorises a conversion loop when every path is computed and the result is selected.
#pragma once

#include <cstdint>
#include <cstring>

namespace blockps {
namespace detail {

BLOCKPS_HD std::uint32_t bits_of(float f) {
  std::uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

BLOCKPS_HD float float_of(std::uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

constexpr std::uint32_t kF32Abs = 0x7fffffffu;
constexpr std::uint32_t kF32Inf = 0x7f800000u;
constexpr std::uint32_t kF32Quiet = 0x00400000u;  // the quiet bit of an f32 NaN

}  // namespace detail

BLOCKPS_HD std::uint16_t f32_to_bf16(float f) {
  const std::uint32_t u = detail::bits_of(f);
  // Adding 0x7fff plus the lowest kept bit rounds to nearest, ties to even; a carry out of the mantissa bumps
  // the exponent, which is also how values just below FLT_MAX become Inf.
  const std::uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  // Rounding could carry a NaN's payload into the sign or turn it into Inf, so NaN keeps its top bits instead.
  const std::uint32_t quiet_nan = (u >> 16) | (detail::kF32Quiet >> 16);
  const bool nan = (u & detail::kF32Abs) > detail::kF32Inf;
  return static_cast<std::uint16_t>(nan ? quiet_nan : rounded);
}

BLOCKPS_HD float bf16_to_f32(std::uint16_t h) {
  const std::uint32_t u = static_cast<std::uint32_t>(h) << 16;
  const bool nan = (u & detail::kF32Abs) > detail::kF32Inf;
  return detail::float_of(nan ? u | detail::kF32Quiet : u);
}

BLOCKPS_HD std::uint16_t f32_to_f16(float f) {
  const std::uint32_t u = detail::bits_of(f);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  const std::uint32_t a = u & detail::kF32Abs;

  // |f| < 2^-14 (f16 subnormal or zero): adding 0.5f puts the f16 subnormal's 10 bits at the bottom of the f32
  // mantissa, and the FPU's own round-to-nearest-even does the rounding. Inputs this small that are f32
  // subnormals round to zero either way, so flush-to-zero modes do not change the result.
  const std::uint32_t kHalf = 126u << 23;  // 0.5f
  const std::uint32_t subnormal = detail::bits_of(detail::float_of(a) + detail::float_of(kHalf)) - kHalf;

  // Normal range: rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits to nearest even; a
  // carry out of the mantissa bumps the exponent, so values from 65520 up become Inf (0x7c00).
  const std::uint32_t rebias = static_cast<std::uint32_t>(15 - 127) << 23;  // wraps: unsigned arithmetic
  const std::uint32_t normal = (a + rebias + 0x0fffu + ((a >> 13) & 1u)) >> 13;

  const std::uint32_t quiet_nan = 0x7e00u | ((a >> 13) & 0x03ffu);  // keeps the payload's top bits
  const std::uint32_t kMinNormal = 113u << 23;                      // 2^-14
  const std::uint32_t kOverflow = 143u << 23;                       // 2^16: Inf even before rounding

  std::uint32_t r = a < kMinNormal ? subnormal : normal;
  r = a >= kOverflow ? 0x7c00u : r;
  r = a > detail::kF32Inf ? quiet_nan : r;
  return static_cast<std::uint16_t>(r | sign);
}

BLOCKPS_HD float f16_to_f32(std::uint16_t h) {
  const std::uint32_t h32 = h;
  const std::uint32_t sign = (h32 & 0x8000u) << 16;
  const std::uint32_t em = (h32 & 0x7fffu) << 13;  // exponent and mantissa in their f32 positions
  const std::uint32_t exponent = em & (0x7c00u << 13);

  const std::uint32_t normal = em + ((127u - 15u) << 23);
  std::uint32_t inf_nan = em + ((255u - 31u) << 23);
  inf_nan = (em & 0x007fffffu) != 0 ? inf_nan | detail::kF32Quiet : inf_nan;
  // Exponent 0: with 2^-14 as a hidden bit the value is 2^-14 + m*2^-24, so subtracting 2^-14 (exactly)
  // leaves the subnormal m*2^-24, which is a normal f32.
  const std::uint32_t kMinNormal = 113u << 23;  // 2^-14
  const std::uint32_t subnormal = detail::bits_of(detail::float_of(em + kMinNormal) - detail::float_of(kMinNormal));

  std::uint32_t r = exponent == 0 ? subnormal : normal;
  r = exponent == (0x7c00u << 13) ? inf_nan : r;
  return detail::float_of(r | sign);
}

template <WireDtype D>
BLOCKPS_HD float load_wire(const void* base, std::size_t i) {
  // The element's own size is the stride (not wire_size(), which nvcc would not call from device code).
  const unsigned char* bytes = static_cast<const unsigned char*>(base);
  if constexpr (D == WireDtype::f32) {
    float v;
    memcpy(&v, bytes + i * sizeof v, sizeof v);
    return v;
  } else {
    std::uint16_t h;
    memcpy(&h, bytes + i * sizeof h, sizeof h);
    return D == WireDtype::bf16 ? bf16_to_f32(h) : f16_to_f32(h);
  }
}

template <WireDtype D>
BLOCKPS_HD void store_wire(void* base, std::size_t i, float v) {
  unsigned char* bytes = static_cast<unsigned char*>(base);
  if constexpr (D == WireDtype::f32) {
    memcpy(bytes + i * sizeof v, &v, sizeof v);
  } else {
    const std::uint16_t h = D == WireDtype::bf16 ? f32_to_bf16(v) : f32_to_f16(v);
    memcpy(bytes + i * sizeof h, &h, sizeof h);
  }
}

}  // namespace blockps
