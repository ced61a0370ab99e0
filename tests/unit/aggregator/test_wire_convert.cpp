#include <gtest/gtest.h>

#include <bit>
#include <cfloat>
#include <cmath>
#include <random>
#include <vector>

#include "aggregator/wire_convert.h"
#include "reference.h"

namespace blockps {
namespace {

using test::Format;
using test::kBf16;
using test::kF16;

constexpr std::uint32_t kQuietF32 = 0x00400000;

float f32_of(std::uint32_t u) { return std::bit_cast<float>(u); }

/// Both 16-bit formats through one interface, so each test runs on both.
struct Half {
  const char* name;
  Format format;
  std::uint16_t (*encode)(float);
  float (*decode)(std::uint16_t);
  std::uint16_t quiet_bit;
};
const Half kBf16Half{"bf16", kBf16, f32_to_bf16, bf16_to_f32, 0x0040};
const Half kF16Half{"f16", kF16, f32_to_f16, f16_to_f32, 0x0200};

bool is_nan_bits(const Half& h, std::uint16_t bits) { return std::isnan(test::value_of_bits(h.format, bits)); }

/// decode(encode(x)) must be x rounded to the format: equal as values, zeros with the same sign.
void expect_rounds_like_reference(const Half& h, float x) {
  const double want = test::round_to(h.format, x);
  const std::uint16_t bits = h.encode(x);
  const double got = test::value_of_bits(h.format, bits);
  ASSERT_TRUE(got == want && std::signbit(got) == std::signbit(want))
      << h.name << ": " << std::hexfloat << x << " (0x" << std::hex << std::bit_cast<std::uint32_t>(x)
      << ") encoded as 0x" << bits << " = " << got << ", want " << want;
}

TEST(WireDtype, NamesRoundTrip) {
  for (WireDtype d : {WireDtype::f32, WireDtype::bf16, WireDtype::f16}) {
    EXPECT_EQ(parse_wire_dtype(to_string(d)), d);
  }
  EXPECT_EQ(to_string(WireDtype::bf16), "bf16");
  EXPECT_EQ(parse_wire_dtype("F32"), std::nullopt);
  EXPECT_EQ(parse_wire_dtype(""), std::nullopt);
  EXPECT_EQ(parse_wire_dtype("fp16"), std::nullopt);
  EXPECT_EQ(wire_size(WireDtype::f32), 4u);
  EXPECT_EQ(wire_size(WireDtype::bf16), 2u);
  EXPECT_EQ(wire_size(WireDtype::f16), 2u);
}

TEST(WireDtype, Bf16KnownValues) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(-2.5f), 0xc020);
  EXPECT_EQ(f32_to_bf16(0.0f), 0x0000);
  EXPECT_EQ(f32_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_bf16(0x1.fep127f), 0x7f7f);  // largest finite bf16
  EXPECT_EQ(f32_to_bf16(FLT_MAX), 0x7f80);      // above the last midpoint: Inf
  EXPECT_EQ(f32_to_bf16(-FLT_MAX), 0xff80);
  EXPECT_EQ(f32_to_bf16(FLT_MIN), 0x0080);                    // smallest normal
  EXPECT_EQ(f32_to_bf16(f32_of(0x00010000)), 0x0001);         // smallest subnormal
  EXPECT_EQ(f32_to_bf16(f32_of(0x00008000)), 0x0000);         // half of it: tie to even (0)
  EXPECT_EQ(f32_to_bf16(f32_of(0x00018000)), 0x0002);         // 1.5 of it: tie to even (2)
  EXPECT_EQ(f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);             // tie between 0x3f80 and 0x3f81: even
  EXPECT_EQ(f32_to_bf16(1.0f + 0x3p-8f), 0x3f82);             // tie between 0x3f81 and 0x3f82: even
  EXPECT_EQ(f32_to_bf16(1.0f + 0x1p-8f + 0x1p-23f), 0x3f81);  // just above the tie
  EXPECT_EQ(f32_to_bf16(INFINITY), 0x7f80);
  EXPECT_EQ(f32_to_bf16(-INFINITY), 0xff80);
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  EXPECT_EQ(bf16_to_f32(0xc020), -2.5f);
  EXPECT_EQ(bf16_to_f32(0x0001), f32_of(0x00010000));
  EXPECT_EQ(bf16_to_f32(0x7f80), INFINITY);
}

TEST(WireDtype, F16KnownValues) {
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16(-2.5f), 0xc100);
  EXPECT_EQ(f32_to_f16(0.0f), 0x0000);
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);    // largest finite f16
  EXPECT_EQ(f32_to_f16(65519.996f), 0x7bff);  // just below the midpoint to 65536
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);    // the midpoint: ties to even, which is Inf
  EXPECT_EQ(f32_to_f16(1e6f), 0x7c00);
  EXPECT_EQ(f32_to_f16(-1e6f), 0xfc00);
  EXPECT_EQ(f32_to_f16(FLT_MAX), 0x7c00);
  EXPECT_EQ(f32_to_f16(0x1p-14f), 0x0400);    // smallest normal
  EXPECT_EQ(f32_to_f16(0x1p-24f), 0x0001);    // smallest subnormal
  EXPECT_EQ(f32_to_f16(0x3ffp-24f), 0x03ff);  // largest subnormal
  EXPECT_EQ(f32_to_f16(-0x1p-24f), 0x8001);
  EXPECT_EQ(f32_to_f16(0x1p-25f), 0x0000);  // tie between 0 and the smallest subnormal: even
  EXPECT_EQ(f32_to_f16(-0x1p-25f), 0x8000);
  EXPECT_EQ(f32_to_f16(0x3p-25f), 0x0002);         // tie between 1 and 2 subnormal ulps: even
  EXPECT_EQ(f32_to_f16(0x1.000002p-25f), 0x0001);  // just above the tie
  EXPECT_EQ(f32_to_f16(0x7ffp-25f), 0x0400);       // tie between the largest subnormal and the smallest normal
  EXPECT_EQ(f32_to_f16(FLT_MIN), 0x0000);
  EXPECT_EQ(f32_to_f16(f32_of(0x00000001)), 0x0000);  // an f32 subnormal
  EXPECT_EQ(f32_to_f16(1.0f + 0x1p-11f), 0x3c00);     // tie between 0x3c00 and 0x3c01: even
  EXPECT_EQ(f32_to_f16(1.0f + 0x3p-11f), 0x3c02);     // tie between 0x3c01 and 0x3c02: even
  EXPECT_EQ(f32_to_f16(INFINITY), 0x7c00);
  EXPECT_EQ(f32_to_f16(-INFINITY), 0xfc00);
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xc100), -2.5f);
  EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);
  EXPECT_EQ(f16_to_f32(0x0001), 0x1p-24f);
  EXPECT_EQ(f16_to_f32(0x03ff), 0x3ffp-24f);
  EXPECT_EQ(f16_to_f32(0x8001), -0x1p-24f);
  EXPECT_EQ(f16_to_f32(0x7c00), INFINITY);
  EXPECT_EQ(f16_to_f32(0xfc00), -INFINITY);
}

TEST(WireDtype, NanStaysQuietNanBothWays) {
  for (const Half* h : {&kBf16Half, &kF16Half}) {
    SCOPED_TRACE(h->name);
    for (std::uint32_t nan : {0x7fc00000u, 0x7f800001u, 0x7fbfffffu, 0xffc00000u, 0xff800001u, 0x7fffffffu}) {
      const std::uint16_t bits = h->encode(f32_of(nan));
      EXPECT_TRUE(is_nan_bits(*h, bits)) << std::hex << nan << " -> " << bits;
      EXPECT_TRUE(bits & h->quiet_bit) << std::hex << nan << " -> " << bits;
      EXPECT_EQ(bits >> 15, nan >> 31) << "sign kept";
    }
  }
  // Signalling 16-bit NaNs come out as quiet f32 NaNs.
  for (std::uint16_t bits : {std::uint16_t{0x7f81}, std::uint16_t{0xff81}}) {
    const float f = bf16_to_f32(bits);
    EXPECT_TRUE(std::isnan(f));
    EXPECT_TRUE(std::bit_cast<std::uint32_t>(f) & kQuietF32);
  }
  for (std::uint16_t bits : {std::uint16_t{0x7c01}, std::uint16_t{0xfc01}, std::uint16_t{0x7d00}}) {
    const float f = f16_to_f32(bits);
    EXPECT_TRUE(std::isnan(f));
    EXPECT_TRUE(std::bit_cast<std::uint32_t>(f) & kQuietF32);
  }
}

// Every 16-bit pattern decodes to exactly the value it stands for and encodes back to itself; NaNs only gain
// the quiet bit.
TEST(WireDtype, EveryPatternRoundTrips) {
  for (const Half* h : {&kBf16Half, &kF16Half}) {
    SCOPED_TRACE(h->name);
    for (std::uint32_t i = 0; i <= 0xffff; ++i) {
      const auto bits = static_cast<std::uint16_t>(i);
      const float f = h->decode(bits);
      if (is_nan_bits(*h, bits)) {
        ASSERT_TRUE(std::isnan(f)) << std::hex << i;
        ASSERT_EQ(h->encode(f), bits | h->quiet_bit) << std::hex << i;
        continue;
      }
      const double want = test::value_of_bits(h->format, bits);
      ASSERT_TRUE(double(f) == want && std::signbit(f) == std::signbit(want)) << std::hex << i;
      ASSERT_EQ(h->encode(f), bits) << std::hex << i;
    }
  }
}

// The hard cases of rounding are the midpoints between neighbouring 16-bit values and the f32 values next to
// them: every one of them, for both formats, plus random f32 patterns over the whole range.
TEST(WireDtype, RoundsToNearestEvenLikeReference) {
  for (const Half* h : {&kBf16Half, &kF16Half}) {
    SCOPED_TRACE(h->name);
    for (std::uint32_t i = 0; i <= 0xffff; ++i) {
      const double lo = test::value_of_bits(h->format, static_cast<std::uint16_t>(i));
      if (std::isnan(lo) || std::isinf(lo)) continue;
      // The next pattern up in magnitude; from the largest finite value that is Inf, whose midpoint is the
      // overflow threshold.
      const std::uint16_t next_bits = static_cast<std::uint16_t>(i + 1);
      double hi = test::value_of_bits(h->format, next_bits);
      if (std::isinf(hi)) hi = std::copysign(std::ldexp(1.0, int(std::ilogb(lo)) + 1), lo);
      const float mid = static_cast<float>((lo + hi) / 2);  // exact: at most 17 significant bits
      for (float x : {static_cast<float>(lo), mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 2 * mid)}) {
        expect_rounds_like_reference(*h, x);
        if (testing::Test::HasFatalFailure()) return;
      }
    }
    std::mt19937 random(42);
    for (int i = 0; i < (1 << 20); ++i) {
      const float x = f32_of(static_cast<std::uint32_t>(random()));
      if (std::isnan(x)) continue;
      expect_rounds_like_reference(*h, x);
      if (testing::Test::HasFatalFailure()) return;
    }
  }
}

TEST(WireDtype, LoadAndStoreAreLittleEndianAndUnaligned) {
  unsigned char buffer[9] = {};
  store_wire<WireDtype::f32>(buffer + 1, 1, 1.0f);  // 0x3f800000 at bytes 5..8
  EXPECT_EQ(buffer[5], 0x00);
  EXPECT_EQ(buffer[8], 0x3f);
  EXPECT_EQ(load_wire<WireDtype::f32>(buffer + 1, 1), 1.0f);
  store_wire<WireDtype::bf16>(buffer + 1, 0, -2.5f);  // 0xc020
  EXPECT_EQ(buffer[1], 0x20);
  EXPECT_EQ(buffer[2], 0xc0);
  EXPECT_EQ(load_wire<WireDtype::bf16>(buffer + 1, 0), -2.5f);
  store_wire<WireDtype::f16>(buffer + 1, 1, 1.0f);  // 0x3c00 at bytes 3..4
  EXPECT_EQ(buffer[3], 0x00);
  EXPECT_EQ(buffer[4], 0x3c);
  EXPECT_EQ(load_wire<WireDtype::f16>(buffer + 1, 1), 1.0f);
}

// The bulk loops are vectorised clones: they must agree with the scalar conversions, tails included.
TEST(WireDtype, BulkConversionsMatchScalar) {
  constexpr std::size_t n = 1037;
  std::mt19937 random(7);
  std::vector<float> values(n);
  for (float& v : values) v = f32_of(static_cast<std::uint32_t>(random()));
  values[0] = NAN;
  values[1] = -INFINITY;
  values[2] = 65520.0f;
  values[3] = 0x1p-25f;
  for (WireDtype d : {WireDtype::f32, WireDtype::bf16, WireDtype::f16}) {
    SCOPED_TRACE(to_string(d));
    const std::size_t size = wire_size(d);
    std::vector<unsigned char> bulk(n * size + 1), scalar(n * size + 1);
    encode_wire(d, values.data(), bulk.data() + 1, n);  // odd address: unaligned elements
    for (std::size_t i = 0; i < n; ++i) {
      switch (d) {
        case WireDtype::f32:
          store_wire<WireDtype::f32>(scalar.data() + 1, i, values[i]);
          break;
        case WireDtype::bf16:
          store_wire<WireDtype::bf16>(scalar.data() + 1, i, values[i]);
          break;
        case WireDtype::f16:
          store_wire<WireDtype::f16>(scalar.data() + 1, i, values[i]);
          break;
      }
    }
    ASSERT_EQ(bulk, scalar);
    std::vector<float> decoded(n);
    decode_wire(d, bulk.data() + 1, decoded.data(), n);
    for (std::size_t i = 0; i < n; ++i) {
      float want = 0;
      switch (d) {
        case WireDtype::f32:
          want = load_wire<WireDtype::f32>(bulk.data() + 1, i);
          break;
        case WireDtype::bf16:
          want = load_wire<WireDtype::bf16>(bulk.data() + 1, i);
          break;
        case WireDtype::f16:
          want = load_wire<WireDtype::f16>(bulk.data() + 1, i);
          break;
      }
      ASSERT_EQ(std::bit_cast<std::uint32_t>(decoded[i]), std::bit_cast<std::uint32_t>(want)) << i;
    }
  }
}

}  // namespace
}  // namespace blockps
