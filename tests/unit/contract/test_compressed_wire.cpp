// contract/compressed_wire.{h,cpp}: the compressed blocks' layout and sizes, the codecs against a scalar reference
// written here from the header's description, their edge values and refusals, and error feedback: the identity it
// keeps at every step and the bounded drift it buys over many steps.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "contract/compressed_wire.h"

namespace blockps {
namespace {

constexpr CompressedFormat kFormats[] = {CompressedFormat::sign1, CompressedFormat::int8};
constexpr std::size_t kSizes[] = {1, 7, 8, 255, 256, 257, 1000, 1001, 3000, 4096};

std::vector<std::byte> block_for(CompressedFormat f, std::size_t n) {
  return std::vector<std::byte>(compressed_block_bytes(f, n));
}

std::uint32_t bits_of(float f) { return std::bit_cast<std::uint32_t>(f); }

float scale_at(const std::vector<std::byte>& block, std::size_t c) {
  float s;
  std::memcpy(&s, block.data() + 4 * c, 4);
  return s;
}

// Gradient-like values whose magnitude changes from chunk to chunk (so that each chunk's scale matters).
std::vector<float> random_values(std::size_t n, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> exponent(-6.0f, 3.0f);
  std::vector<float> v(n);
  float magnitude = 1.0f;
  for (std::size_t i = 0; i < n; ++i) {
    if (i % kCompressedChunkElements == 0) magnitude = std::exp2(exponent(rng));
    v[i] = magnitude * normal(rng);
  }
  return v;
}

// The scalar reference: the header's description, one element at a time, into the documented bytes.
struct Reference {
  std::vector<float> scales;
  std::vector<float> decoded;
  std::vector<std::byte> block;
};

Reference reference_compress(CompressedFormat f, const std::vector<float>& v) {
  const std::size_t n = v.size(), chunks = (n + 255) / 256;
  const std::size_t payload = f == CompressedFormat::sign1 ? (n + 7) / 8 : n;
  Reference ref;
  ref.block.assign((4 * chunks + payload + 511) / 512 * 512, std::byte{0});
  ref.decoded.resize(n);
  for (std::size_t c = 0; c < chunks; ++c) {
    const std::size_t first = 256 * c, last = std::min(n, first + 256);
    float scale;
    if (f == CompressedFormat::sign1) {
      double sum = 0;
      for (std::size_t i = first; i < last; ++i) sum += std::fabs(static_cast<double>(v[i]));
      scale = static_cast<float>(sum / static_cast<double>(last - first));
      for (std::size_t i = first; i < last; ++i) {
        const bool negative = v[i] < 0.0f;
        if (negative) ref.block[4 * chunks + i / 8] |= std::byte{static_cast<unsigned char>(1u << (i % 8))};
        ref.decoded[i] = negative ? -scale : scale;
      }
    } else {
      float max_abs = 0;
      for (std::size_t i = first; i < last; ++i) max_abs = std::max(max_abs, std::fabs(v[i]));
      scale = std::min(max_abs / 127.0f, kInt8MaxScale);
      for (std::size_t i = first; i < last; ++i) {
        const float rounded = scale == 0.0f ? 0.0f : std::clamp(std::nearbyint(v[i] / scale), -127.0f, 127.0f);
        const auto q = static_cast<std::int8_t>(rounded);
        ref.block[4 * chunks + i] = static_cast<std::byte>(q);
        ref.decoded[i] = static_cast<float>(q) * scale;
      }
    }
    ref.scales.push_back(scale);
    std::memcpy(ref.block.data() + 4 * c, &scale, 4);
  }
  return ref;
}

// Two sign1 scales may differ in their last bits: the codec sums |v| in another order.
void expect_scale_near(float got, float want, const std::string& where) {
  EXPECT_LE(std::fabs(got - want), 2 * (std::nextafter(want, INFINITY) - want))
      << where << ": " << got << " vs " << want;
}

TEST(CompressedFormat, NamesAndParse) {
  EXPECT_EQ(to_string(CompressedFormat::sign1), "sign1");
  EXPECT_EQ(to_string(CompressedFormat::int8), "int8");
  EXPECT_EQ(to_string(static_cast<CompressedFormat>(9)), "?");
  for (CompressedFormat f : kFormats) EXPECT_EQ(parse_compressed_format(to_string(f)), f);
  for (const char* other : {"", "Sign1", "sign", "1bit", "onebit", "int8 ", "i8", "uint8", "f32", "?"})
    EXPECT_EQ(parse_compressed_format(other), std::nullopt) << "'" << other << "'";
}

TEST(CompressedLayout, SizesByHandIncludingShortLastChunks) {
  struct Case {
    std::size_t n, chunks, sign1_bytes, int8_bytes;
  };
  for (const Case& c : {Case{1, 1, 512, 512},           // 4 + 1 bytes
                        Case{255, 1, 512, 512},         // n < chunk
                        Case{257, 2, 512, 512},         // a 1-element last chunk: 8 + 33 / 8 + 257
                        Case{1000, 4, 512, 1024},       // 16 + 125 / 16 + 1000
                        Case{3000, 12, 512, 3072},      // 48 + 375 / 48 + 3000
                        Case{4096, 16, 1024, 4608},     // 64 + 512 / 64 + 4096
                        Case{65536, 256, 9216, 66560},  // no padding
                        Case{131072, 512, 18432, 133120}}) {
    const CompressedLayout s = compressed_layout(CompressedFormat::sign1, c.n);
    const CompressedLayout q = compressed_layout(CompressedFormat::int8, c.n);
    EXPECT_EQ(s.chunks, c.chunks) << c.n;
    EXPECT_EQ(s.payload_offset, 4 * c.chunks) << c.n;
    EXPECT_EQ(s.payload_bytes, (c.n + 7) / 8) << c.n;
    EXPECT_EQ(q.payload_bytes, c.n) << c.n;
    EXPECT_EQ(compressed_block_bytes(CompressedFormat::sign1, c.n), c.sign1_bytes) << c.n;
    EXPECT_EQ(compressed_block_bytes(CompressedFormat::int8, c.n), c.int8_bytes) << c.n;
  }
  EXPECT_EQ(compressed_block_bytes(CompressedFormat::sign1, 0), 0u);
  EXPECT_EQ(compressed_layout(static_cast<CompressedFormat>(9), 100), CompressedLayout{});
  // The ratios the header states for 64Ki elements.
  EXPECT_NEAR(65536.0 * 4 / compressed_block_bytes(CompressedFormat::sign1, 65536), 28.44, 0.005);
  EXPECT_NEAR(65536.0 * 4 / compressed_block_bytes(CompressedFormat::int8, 65536), 3.94, 0.005);
}

TEST(CompressedLayout, EverySizeIsWholeSectorsAndHoldsScalesAndPayload) {
  for (CompressedFormat f : kFormats) {
    for (std::size_t n = 1; n <= 3 * 256 + 9; ++n) {
      const CompressedLayout l = compressed_layout(f, n);
      EXPECT_EQ(l.bytes % 512, 0u) << n;
      EXPECT_GE(l.bytes, l.payload_offset + l.payload_bytes) << n;
      EXPECT_LT(l.bytes, l.payload_offset + l.payload_bytes + 512) << n;
    }
  }
}

TEST(CompressedWire, RoundTripMatchesTheScalarReference) {
  std::mt19937 rng(50);
  for (CompressedFormat f : kFormats) {
    for (std::size_t n : kSizes) {
      const std::string where = std::string(to_string(f)) + " n=" + std::to_string(n);
      const std::vector<float> x = random_values(n, rng);
      const Reference ref = reference_compress(f, x);
      std::vector<std::byte> block = block_for(f, n);
      ASSERT_TRUE(compress(f, x, {}, block).ok()) << where;
      ASSERT_EQ(block.size(), ref.block.size()) << where;
      std::vector<float> out(n, 7.0f);
      ASSERT_TRUE(decompress(f, block, out).ok()) << where;
      if (f == CompressedFormat::int8) {
        EXPECT_TRUE(block == ref.block) << where;  // max, division and rounding are exact: every byte agrees
        for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(bits_of(out[i]), bits_of(ref.decoded[i])) << where << " " << i;
      } else {
        const std::size_t payload_offset = 4 * ref.scales.size();
        EXPECT_TRUE(std::equal(block.begin() + payload_offset, block.end(), ref.block.begin() + payload_offset))
            << where << ": the sign bits and the padding";
        for (std::size_t c = 0; c < ref.scales.size(); ++c)
          expect_scale_near(scale_at(block, c), ref.scales[c], where + " chunk " + std::to_string(c));
        for (std::size_t i = 0; i < n; ++i) {
          const float scale = scale_at(block, i / 256);
          ASSERT_EQ(out[i], x[i] < 0.0f ? -scale : scale) << where << " " << i;
        }
      }
    }
  }
}

TEST(CompressedWire, Sign1ScaleIsTheChunksMeanMagnitude) {
  // Two chunks: the first of 256 values, then a short one of 4; each its own scale.
  std::vector<float> x(260);
  for (std::size_t i = 0; i < 256; ++i) x[i] = i % 2 ? -0.5f : 1.5f;  // mean |x| = 1
  const float last[] = {1.0f, -2.0f, 3.0f, -4.0f};                    // mean |x| = 2.5
  std::copy(std::begin(last), std::end(last), x.begin() + 256);
  std::vector<std::byte> block = block_for(CompressedFormat::sign1, 260);
  ASSERT_TRUE(compress(CompressedFormat::sign1, x, {}, block).ok());
  EXPECT_EQ(scale_at(block, 0), 1.0f);
  EXPECT_EQ(scale_at(block, 1), 2.5f);
  EXPECT_EQ(block[8], std::byte{0xaa});       // elements 1, 3, 5, 7 negative, LSB first
  EXPECT_EQ(block[8 + 32], std::byte{0x0a});  // the short chunk: -2 and -4; the bits after element 259 zero
  std::vector<float> out(260);
  ASSERT_TRUE(decompress(CompressedFormat::sign1, block, out).ok());
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -1.0f);
  EXPECT_EQ(out[257], -2.5f);
  EXPECT_EQ(out[258], 2.5f);
}

TEST(CompressedWire, Int8ScaleIsMaxOver127AndRoundsToNearestEven) {
  // max |x| = 127: scale 1, so q = x rounded to nearest even.
  const std::vector<float> x = {127.0f, 2.5f, 3.5f, -0.5f, -1.5f, 126.5f, -126.6f, 0.49f};
  const std::int8_t want[] = {127, 2, 4, 0, -2, 126, -127, 0};
  std::vector<std::byte> block = block_for(CompressedFormat::int8, x.size());
  ASSERT_TRUE(compress(CompressedFormat::int8, x, {}, block).ok());
  EXPECT_EQ(scale_at(block, 0), 1.0f);
  for (std::size_t i = 0; i < x.size(); ++i) EXPECT_EQ(static_cast<std::int8_t>(block[4 + i]), want[i]) << i;
  // {1, -2, 3, -4}: scale 4/127, q = 31.75 -> 32, -63.5 -> -64 (even), 95.25 -> 95, -127.
  const std::vector<float> y = {1.0f, -2.0f, 3.0f, -4.0f};
  block = block_for(CompressedFormat::int8, 4);
  ASSERT_TRUE(compress(CompressedFormat::int8, y, {}, block).ok());
  EXPECT_EQ(scale_at(block, 0), 4.0f / 127.0f);
  const std::int8_t want_y[] = {32, -64, 95, -127};
  for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(static_cast<std::int8_t>(block[4 + i]), want_y[i]) << i;
  std::vector<float> out(4);
  ASSERT_TRUE(decompress(CompressedFormat::int8, block, out).ok());
  EXPECT_EQ(out[3], -127.0f * (4.0f / 127.0f));
}

TEST(CompressedWire, ZerosCompressToZeroScalesAndDecodeToZeros) {
  for (CompressedFormat f : kFormats) {
    const std::vector<float> x(300, 0.0f);
    std::vector<float> residual(300, 0.0f);
    std::vector<std::byte> block = block_for(f, 300);
    std::fill(block.begin(), block.end(), std::byte{0x5a});
    ASSERT_TRUE(compress(f, x, residual, block).ok());
    EXPECT_TRUE(std::all_of(block.begin(), block.end(), [](std::byte b) { return b == std::byte{0}; }))
        << to_string(f) << ": zero scales, + bits or q = 0, zero padding";
    std::vector<float> out(300, 1.0f);
    ASSERT_TRUE(decompress(f, block, out).ok());
    for (float v : out) EXPECT_EQ(v, 0.0f);
    for (float r : residual) EXPECT_EQ(r, 0.0f);
  }
}

TEST(CompressedWire, ASingleNonzeroElement) {
  std::vector<float> x(256, 0.0f);
  x[17] = -3.0f;
  std::vector<float> residual(256, 0.0f);
  std::vector<std::byte> block = block_for(CompressedFormat::int8, 256);
  ASSERT_TRUE(compress(CompressedFormat::int8, x, residual, block).ok());
  std::vector<float> out(256);
  ASSERT_TRUE(decompress(CompressedFormat::int8, block, out).ok());
  EXPECT_EQ(static_cast<std::int8_t>(block[4 + 17]), -127);
  for (std::size_t i = 0; i < 256; ++i) EXPECT_EQ(residual[i], x[i] - out[i]) << i;
  EXPECT_NEAR(out[17], -3.0f, 1e-6f);

  std::fill(residual.begin(), residual.end(), 0.0f);
  block = block_for(CompressedFormat::sign1, 256);
  ASSERT_TRUE(compress(CompressedFormat::sign1, x, residual, block).ok());
  EXPECT_EQ(scale_at(block, 0), 3.0f / 256);  // the mean over the chunk: one sign bit, the rest + at the same scale
  out.assign(256, 0.0f);
  ASSERT_TRUE(decompress(CompressedFormat::sign1, block, out).ok());
  EXPECT_EQ(out[17], -3.0f / 256);
  EXPECT_EQ(out[16], 3.0f / 256);
  EXPECT_EQ(residual[17], -3.0f + 3.0f / 256);
  EXPECT_EQ(residual[16], -3.0f / 256);
}

TEST(CompressedWire, LargestMagnitudesStayFinite) {
  std::vector<float> x(256);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = i % 3 ? FLT_MAX : -FLT_MAX;
  EXPECT_TRUE(std::isfinite(127.0f * kInt8MaxScale));
  EXPECT_FALSE(std::isfinite(127.0f * std::nextafter(kInt8MaxScale, INFINITY)));
  for (CompressedFormat f : kFormats) {
    std::vector<float> residual(x.size(), 0.0f);
    std::vector<std::byte> block = block_for(f, x.size());
    ASSERT_TRUE(compress(f, x, residual, block).ok()) << to_string(f);
    EXPECT_EQ(scale_at(block, 0), f == CompressedFormat::sign1 ? FLT_MAX : kInt8MaxScale) << to_string(f);
    std::vector<float> out(x.size());
    ASSERT_TRUE(decompress(f, block, out).ok()) << to_string(f);
    for (std::size_t i = 0; i < x.size(); ++i) {
      ASSERT_TRUE(std::isfinite(out[i]) && std::isfinite(residual[i])) << to_string(f) << " " << i;
      EXPECT_EQ(std::signbit(out[i]), std::signbit(x[i])) << to_string(f) << " " << i;
      EXPECT_LE(std::fabs(residual[i]), FLT_MAX * 1e-6f) << to_string(f) << " " << i;
    }
  }
}

TEST(CompressedWire, Denormals) {
  const float tiny = std::numeric_limits<float>::denorm_min();
  for (CompressedFormat f : kFormats) {
    std::vector<float> x = {1e-40f, -3e-41f, tiny, 0.0f, -2e-39f};
    std::vector<float> residual(x.size(), 0.0f);
    std::vector<std::byte> block = block_for(f, x.size());
    ASSERT_TRUE(compress(f, x, residual, block).ok()) << to_string(f);
    EXPECT_GT(scale_at(block, 0), 0.0f) << to_string(f);
    EXPECT_LT(scale_at(block, 0), FLT_MIN) << to_string(f);
    std::vector<float> out(x.size());
    ASSERT_TRUE(decompress(f, block, out).ok()) << to_string(f);
    for (std::size_t i = 0; i < x.size(); ++i) EXPECT_EQ(bits_of(residual[i]), bits_of(x[i] - out[i])) << i;
    EXPECT_LT(out[4], 0.0f) << to_string(f);
  }
  // One smallest denormal: max / 127 underflows to a zero scale; the chunk decodes to zeros and stays residual.
  std::vector<float> x = {tiny, 0.0f, 0.0f};
  std::vector<float> residual(3, 0.0f);
  std::vector<std::byte> block = block_for(CompressedFormat::int8, 3);
  ASSERT_TRUE(compress(CompressedFormat::int8, x, residual, block).ok());
  EXPECT_EQ(scale_at(block, 0), 0.0f);
  EXPECT_EQ(residual[0], tiny);
}

TEST(CompressedWire, NanInfAndOverflowAreRefusedWithNothingWritten) {
  struct Case {
    std::size_t at;
    float x, r;
    const char* says;
  };
  for (CompressedFormat f : kFormats) {
    for (const Case& c : {Case{5, NAN, 0.0f, "of x is nan"}, Case{300, -INFINITY, 0.0f, "of x is -inf"},
                          Case{7, 1.0f, INFINITY, "of the residual is inf"},
                          Case{299, 2.0f, NAN, "of the residual is nan"}, Case{3, FLT_MAX, FLT_MAX, "overflows f32"}}) {
      std::mt19937 rng(3);
      std::vector<float> x = random_values(301, rng);
      std::vector<float> residual = random_values(301, rng);
      x[c.at] = c.x;
      residual[c.at] = c.r;
      const std::vector<float> residual_before = residual;
      std::vector<std::byte> block = block_for(f, 301);
      std::fill(block.begin(), block.end(), std::byte{0xab});
      const Status s = compress(f, x, residual, block);
      EXPECT_EQ(s.code(), StatusCode::invalid_argument) << to_string(f) << " " << c.says;
      EXPECT_NE(s.message().find("element " + std::to_string(c.at) + " "), std::string::npos) << s.message();
      EXPECT_NE(s.message().find(c.says), std::string::npos) << s.message();
      EXPECT_TRUE(std::all_of(block.begin(), block.end(), [](std::byte b) { return b == std::byte{0xab}; }));
      EXPECT_EQ(std::memcmp(residual.data(), residual_before.data(), residual.size() * 4), 0);  // NaN != NaN
    }
    // Without a residual, x alone is checked.
    std::vector<float> x(10, 1.0f);
    x[9] = NAN;
    std::vector<std::byte> block = block_for(f, 10);
    EXPECT_NE(compress(f, x, {}, block).message().find("element 9 of x is nan"), std::string::npos);
  }
}

TEST(CompressedWire, WrongSizesAndFormatsAreRefusedNamingBoth) {
  const std::vector<float> x(1000, 1.0f);
  std::vector<float> residual(999, 0.0f);
  std::vector<std::byte> block = block_for(CompressedFormat::int8, 1000);
  Status s = compress(CompressedFormat::int8, x, residual, block);
  EXPECT_EQ(s.code(), StatusCode::invalid_argument);
  EXPECT_NE(s.message().find("999 elements, the block 1000"), std::string::npos) << s.message();
  std::vector<std::byte> small(1023);
  s = compress(CompressedFormat::int8, x, {}, small);
  EXPECT_EQ(s.code(), StatusCode::invalid_argument);
  EXPECT_NE(s.message().find("out has 1023 bytes, a int8 block of 1000 elements takes 1024"), std::string::npos)
      << s.message();
  EXPECT_FALSE(compress(CompressedFormat::sign1, x, {}, block).ok()) << "an int8-sized block for sign1";
  s = compress(static_cast<CompressedFormat>(9), x, {}, block);
  EXPECT_EQ(s.code(), StatusCode::invalid_argument);
  EXPECT_NE(s.message().find("is none of sign1, int8"), std::string::npos) << s.message();
  std::vector<float> out(1000);
  EXPECT_EQ(decompress(static_cast<CompressedFormat>(9), block, out).code(), StatusCode::invalid_argument);
}

TEST(CompressedWire, ErrorFeedbackIdentityElementByElement) {
  std::mt19937 rng(7);
  for (CompressedFormat f : kFormats) {
    for (std::size_t n : {std::size_t{1}, std::size_t{257}, std::size_t{3000}}) {
      std::vector<float> residual(n, 0.0f);
      std::vector<std::byte> block = block_for(f, n);
      std::vector<float> sent(n);
      for (int step = 0; step < 20; ++step) {
        const std::vector<float> x = random_values(n, rng);
        const std::vector<float> before = residual;
        ASSERT_TRUE(compress(f, x, residual, block).ok());
        ASSERT_TRUE(decompress(f, block, sent).ok());
        for (std::size_t i = 0; i < n; ++i) {
          const float v = x[i] + before[i];
          // What is sent plus the new residual is the input plus the old residual, as f32 computes it.
          ASSERT_EQ(bits_of(residual[i]), bits_of(v - sent[i])) << to_string(f) << " n=" << n << " step " << step;
          ASSERT_LE(std::fabs(sent[i] + residual[i] - v), (std::fabs(v) + std::fabs(sent[i])) * 1e-6f);
        }
      }
    }
  }
}

// Over many steps, error feedback makes the sum of what was sent track the sum of the true gradients: the
// difference is minus the last residual (exactly, but for f32 rounding), and the residual stays bounded. Without
// feedback the biased quantization error piles up step after step.
TEST(CompressedWire, ErrorFeedbackKeepsTheSentSumNextToTheTrueSum) {
  constexpr std::size_t n = 1000;
  constexpr int kSteps = 200;
  for (CompressedFormat f : kFormats) {
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> noise(-1.0f, 1.0f);
    std::vector<float> bias(n);
    for (float& b : bias) b = 0.3f * noise(rng);  // a drift per element, as gradients have
    std::vector<float> residual(n, 0.0f);
    std::vector<double> true_sum(n, 0.0), sent_sum(n, 0.0), unfed_sum(n, 0.0);
    std::vector<std::byte> block = block_for(f, n);
    std::vector<float> sent(n), x(n);
    float max_residual = 0;
    for (int step = 0; step < kSteps; ++step) {
      for (std::size_t i = 0; i < n; ++i) x[i] = bias[i] + noise(rng);
      ASSERT_TRUE(compress(f, x, residual, block).ok());
      ASSERT_TRUE(decompress(f, block, sent).ok());
      for (std::size_t i = 0; i < n; ++i) {
        true_sum[i] += x[i];
        sent_sum[i] += sent[i];
        max_residual = std::max(max_residual, std::fabs(residual[i]));
      }
      ASSERT_TRUE(compress(f, x, {}, block).ok());
      ASSERT_TRUE(decompress(f, block, sent).ok());
      for (std::size_t i = 0; i < n; ++i) unfed_sum[i] += sent[i];
    }
    double worst_fed = 0, worst_unfed = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const double drift = sent_sum[i] - true_sum[i];
      EXPECT_NEAR(drift, -residual[i], 1e-3) << to_string(f) << " " << i;
      ASSERT_LE(std::fabs(drift), std::fabs(residual[i]) + 1e-3) << to_string(f) << " " << i;
      worst_fed = std::max(worst_fed, std::fabs(drift));
      worst_unfed = std::max(worst_unfed, std::fabs(unfed_sum[i] - true_sum[i]));
    }
    EXPECT_LE(max_residual, f == CompressedFormat::sign1 ? 8.0f : 0.01f) << to_string(f) << ": bounded";
    EXPECT_GT(worst_unfed, 5 * worst_fed) << to_string(f) << ": without feedback the error piles up";
  }
}

TEST(CompressedWire, AccumulateIsDecompressThenAdd) {
  std::mt19937 rng(13);
  for (CompressedFormat f : kFormats) {
    for (std::size_t n : kSizes) {
      const std::vector<float> x = random_values(n, rng);
      std::vector<std::byte> block = block_for(f, n);
      ASSERT_TRUE(compress(f, x, {}, block).ok());
      std::vector<float> sum = random_values(n, rng);
      std::vector<float> want = sum, decoded(n);
      ASSERT_TRUE(decompress(f, block, decoded).ok());
      for (std::size_t i = 0; i < n; ++i) want[i] += decoded[i];
      ASSERT_TRUE(accumulate(f, block, sum).ok());
      for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(bits_of(sum[i]), bits_of(want[i])) << to_string(f) << " " << i;
    }
  }
}

TEST(CompressedWire, CorruptBlocksAreRefusedWithNothingWritten) {
  constexpr std::size_t n = 1001;  // a short last chunk, and sign bits that end inside a byte
  struct Corruption {
    const char* name;
    std::size_t offset;  // the byte to set, from the block's start; SIZE_MAX: from its end
    std::uint32_t value;
    bool four_bytes;  // a whole scale, else one byte
    std::string says;
  };
  auto check = [](CompressedFormat f, const std::vector<std::byte>& block, const std::string& says,
                  const std::string& what) {
    std::vector<float> out(n, 3.0f);
    for (bool add : {false, true}) {
      const Status s = add ? accumulate(f, block, out) : decompress(f, block, out);
      EXPECT_EQ(s.code(), StatusCode::invalid_argument) << what;
      EXPECT_NE(s.message().find(says), std::string::npos) << what << ": " << s.message();
      EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float v) { return v == 3.0f; })) << what;
    }
  };
  std::mt19937 rng(17);
  const std::vector<float> x = random_values(n, rng);
  for (CompressedFormat f : kFormats) {
    std::vector<std::byte> good = block_for(f, n);
    ASSERT_TRUE(compress(f, x, {}, good).ok());
    const CompressedLayout l = compressed_layout(f, n);
    std::vector<Corruption> cases = {
        {"NaN scale", 4, 0x7fc00000u, true, "chunk 1's scale is nan"},
        {"Inf scale", 0, 0x7f800000u, true, "chunk 0's scale is inf"},
        {"negative scale", 8, bits_of(-1.0f), true, "scale is -1 (sign bit set)"},
        {"-0 scale", 12, 0x80000000u, true, "scale is -0 (sign bit set)"},
        {"padding", l.bytes - 1, 1, false, "padding byte " + std::to_string(l.bytes - 1) + " is 1"},
    };
    if (f == CompressedFormat::int8) {
      cases.push_back({"scale above the largest", 0, bits_of(std::nextafter(kInt8MaxScale, INFINITY)), true,
                       "(127 times it would overflow f32)"});
      cases.push_back({"-128", l.payload_offset + 600, 0x80, false, "element 600 is -128"});
    } else {
      cases.push_back({"a sign bit after the last element", l.payload_offset + n / 8, 0x02 | 0x01, false,
                       "sign bits after element 1000"});
    }
    for (const Corruption& c : cases) {
      std::vector<std::byte> bad = good;
      if (c.four_bytes) {
        std::memcpy(bad.data() + c.offset, &c.value, 4);
      } else {
        bad[c.offset] = static_cast<std::byte>(c.value);
      }
      check(f, bad, c.says, std::string(to_string(f)) + ": " + c.name);
    }
    for (std::size_t size : {l.bytes - 1, l.bytes + 1, l.bytes + 512, std::size_t{0}}) {
      std::vector<std::byte> resized = good;
      resized.resize(size);
      check(f, resized, "has " + std::to_string(size) + " bytes", "size " + std::to_string(size));
    }
    std::vector<float> out(n);
    EXPECT_TRUE(decompress(f, good, out).ok()) << "the uncorrupted block still decodes";
  }
}

}  // namespace
}  // namespace blockps
