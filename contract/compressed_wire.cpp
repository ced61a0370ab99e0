#include "contract/compressed_wire.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

namespace blockps {
namespace {

static_assert(std::endian::native == std::endian::little, "the layout is little-endian and is stored as is");
static_assert(kCompressedChunkElements % 8 == 0, "a chunk's sign bits are whole bytes");

constexpr std::size_t kChunk = kCompressedChunkElements;
constexpr std::size_t kLanes = 8;  // independent partial sums, so that the compiler keeps them in vectors
constexpr std::uint32_t kSignBit = 0x80000000u;
constexpr std::uint32_t kExponent = 0x7f800000u;
// Adding and subtracting 1.5 * 2^23 rounds an f32 of magnitude below 2^22 to an integer, to nearest even (the
// default rounding mode), in a form every SIMD level vectorises (nearbyint needs SSE4.1's roundps).
constexpr float kRoundToInteger = 0x1.8p23f;

std::uint32_t bits_of(float f) { return std::bit_cast<std::uint32_t>(f); }
bool finite_bits(std::uint32_t b) { return (b & kExponent) != kExponent; }

bool known(CompressedFormat f) { return f == CompressedFormat::sign1 || f == CompressedFormat::int8; }

Status refuse(std::string why) { return Status::Error(StatusCode::invalid_argument, std::move(why)); }

std::string show(float f) {
  char text[32];
  std::snprintf(text, sizeof text, "%.9g", static_cast<double>(f));
  return text;
}

// "compress sign1", as each refusal starts.
std::string call_name(std::string_view op, CompressedFormat f) {
  return std::string(op) + " " + std::string(to_string(f));
}

Status unknown_format(std::string_view op, CompressedFormat f) {
  return refuse(std::string(op) + ": compressed format " + std::to_string(static_cast<int>(f)) +
                " is none of sign1, int8");
}

// The first i < n whose v = x[i] + r[i] (x[i] when r is null) is not finite; n when all are. One vectorised pass of
// flags; the scalar search runs only for a block that is refused. A NaN or Inf in x or r makes v non-finite too.
std::size_t first_non_finite(const float* x, const float* r, std::size_t n) {
  std::uint32_t bad = 0;
  if (r) {
    for (std::size_t i = 0; i < n; ++i) bad |= !finite_bits(bits_of(x[i] + r[i]));
  } else {
    for (std::size_t i = 0; i < n; ++i) bad |= !finite_bits(bits_of(x[i]));
  }
  if (!bad) return n;
  for (std::size_t i = 0; i < n; ++i) {
    if (!std::isfinite(r ? x[i] + r[i] : x[i])) return i;
  }
  return n;
}

Status non_finite(const std::string& call, std::size_t i, float x, const float* r) {
  std::string why = call + ": element " + std::to_string(i) + " ";
  if (!std::isfinite(x)) {
    why += "of x is " + show(x);
  } else if (r && !std::isfinite(*r)) {
    why += "of the residual is " + show(*r);
  } else {
    why += "overflows f32 as x + residual (" + show(x) + " + " + show(*r) + ")";
  }
  return refuse(why + "; only finite values are compressed");
}

// The chunk's v = x + r (x without r) for its len elements, zeros after them: a short chunk then runs the full
// chunk's loops (zeros change no sum and no max, and pack as + bits, which the format wants after element n - 1).
void load_chunk(const float* x, const float* r, std::size_t len, float* v) {
  if (r) {
    for (std::size_t i = 0; i < len; ++i) v[i] = x[i] + r[i];
  } else {
    std::memcpy(v, x, len * sizeof(float));
  }
  std::fill(v + len, v + kChunk, 0.0f);
}

// mean |v| over the chunk's len values. In f64: 256 values up to FLT_MAX do not overflow, and the mean of values
// up to FLT_MAX rounds to at most FLT_MAX.
float sign1_scale(const float* v, std::size_t len) {
  double lane[kLanes] = {};
  for (std::size_t i = 0; i < kChunk; i += kLanes) {
    for (std::size_t j = 0; j < kLanes; ++j) lane[j] += std::fabs(static_cast<double>(v[i + j]));
  }
  double sum = 0;
  for (double s : lane) sum += s;
  return static_cast<float>(sum / static_cast<double>(len));
}

// min(max |v| / 127, kInt8MaxScale). |v| of a finite f32 orders as its bits do, so the max is an integer one.
float int8_scale(const float* v) {
  std::uint32_t max_bits = 0;
  for (std::size_t i = 0; i < kChunk; ++i) max_bits = std::max(max_bits, bits_of(v[i]) & ~kSignBit);
  return std::min(std::bit_cast<float>(max_bits) / 127.0f, kInt8MaxScale);
}

// The chunk's sign bits (ceil(len / 8) bytes to `bits`) and, with r, its residual v - (+-scale).
void sign1_chunk(const float* v, std::size_t len, float scale, std::byte* bits, float* r) {
  std::uint8_t packed[kChunk / 8];
  for (std::size_t k = 0; k < kChunk / 8; ++k) {
    unsigned byte = 0;
    for (unsigned j = 0; j < 8; ++j) byte |= static_cast<unsigned>(v[8 * k + j] < 0.0f) << j;
    packed[k] = static_cast<std::uint8_t>(byte);
  }
  std::memcpy(bits, packed, (len + 7) / 8);
  if (r) {
    for (std::size_t i = 0; i < len; ++i) r[i] = v[i] - (v[i] < 0.0f ? -scale : scale);
  }
}

// The chunk's q bytes (len of them to `bytes`) and, with r, its residual v - q * scale.
void int8_chunk(const float* v, std::size_t len, float scale, std::byte* bytes, float* r) {
  std::int8_t q[kChunk];
  if (scale == 0.0f) {
    std::fill(q, q + kChunk, std::int8_t{0});
  } else {
    for (std::size_t i = 0; i < kChunk; ++i) {
      const float t = std::clamp(v[i] / scale, -127.0f, 127.0f);
      q[i] = static_cast<std::int8_t>(static_cast<int>((t + kRoundToInteger) - kRoundToInteger));
    }
  }
  std::memcpy(bytes, q, len);
  if (r) {
    for (std::size_t i = 0; i < len; ++i) r[i] = v[i] - static_cast<float>(q[i]) * scale;
  }
}

float scale_of(const std::byte* scales, std::size_t c) {
  float s;
  std::memcpy(&s, scales + sizeof(float) * c, sizeof s);
  return s;
}

// Why `in` is no compressed block of n elements in `f`, or ok: the size, every scale, the payload's values and the
// bits and bytes that must be zero. Runs before anything is written, so a refused block changes nothing.
Status check_block(const std::string& call, CompressedFormat f, std::span<const std::byte> in, std::size_t n) {
  const CompressedLayout l = compressed_layout(f, n);
  if (in.size() != l.bytes) {
    return refuse(call + ": the compressed block has " + std::to_string(in.size()) + " bytes, a " +
                  std::string(to_string(f)) + " block of " + std::to_string(n) + " elements takes " +
                  std::to_string(l.bytes));
  }
  const std::byte* scales = in.data();
  const std::byte* payload = in.data() + l.payload_offset;
  for (std::size_t c = 0; c < l.chunks; ++c) {
    const float s = scale_of(scales, c);
    const std::uint32_t b = bits_of(s);
    if (!finite_bits(b) || (b & kSignBit)) {
      return refuse(call + ": chunk " + std::to_string(c) + "'s scale is " + show(s) +
                    (b & kSignBit ? " (sign bit set)" : "") + "; a scale is finite and not negative");
    }
    if (f == CompressedFormat::int8 && s > kInt8MaxScale) {
      return refuse(call + ": chunk " + std::to_string(c) + "'s scale " + show(s) + " is above " + show(kInt8MaxScale) +
                    " (127 times it would overflow f32)");
    }
  }
  if (f == CompressedFormat::int8) {
    unsigned bad = 0;
    for (std::size_t i = 0; i < n; ++i) bad |= payload[i] == std::byte{0x80};
    if (bad) {
      const std::size_t i = static_cast<std::size_t>(std::find(payload, payload + n, std::byte{0x80}) - payload);
      return refuse(call + ": element " + std::to_string(i) + " is -128; int8 values are in [-127, 127]");
    }
  } else if (n % 8 != 0 && (std::to_integer<unsigned>(payload[n / 8]) >> (n % 8)) != 0) {
    return refuse(call + ": the sign bits after element " + std::to_string(n - 1) + " in byte " +
                  std::to_string(l.payload_offset + n / 8) + " are not zero");
  }
  const std::byte* pad = payload + l.payload_bytes;
  const std::byte* end = in.data() + in.size();
  unsigned nonzero = 0;
  for (const std::byte* p = pad; p < end; ++p) nonzero |= std::to_integer<unsigned>(*p);
  if (nonzero) {
    const std::size_t at =
        static_cast<std::size_t>(std::find_if(pad, end, [](std::byte b) { return b != std::byte{0}; }) - in.data());
    return refuse(call + ": padding byte " + std::to_string(at) + " is " +
                  std::to_string(std::to_integer<unsigned>(in[at])) + "; the padding after the payload is zeros");
  }
  return Status::Ok();
}

// One full chunk: out = d, or out += d with Add.
template <bool Add>
void sign1_decode_chunk(const std::uint8_t* packed, float scale, float* out) {
  const std::uint32_t s = bits_of(scale);
  for (std::size_t k = 0; k < kChunk / 8; ++k) {
    const std::uint32_t byte = packed[k];
    for (unsigned j = 0; j < 8; ++j) {
      const float d = std::bit_cast<float>(s | (((byte >> j) & 1u) << 31));
      out[8 * k + j] = Add ? out[8 * k + j] + d : d;
    }
  }
}

template <bool Add>
void int8_decode_chunk(const std::int8_t* q, std::size_t len, float scale, float* out) {
  for (std::size_t i = 0; i < len; ++i) {
    const float d = static_cast<float>(q[i]) * scale;
    out[i] = Add ? out[i] + d : d;
  }
}

template <bool Add>
Status decode(std::string_view op, CompressedFormat f, std::span<const std::byte> in, std::span<float> out) {
  if (!known(f)) return unknown_format(op, f);
  const std::size_t n = out.size();
  if (Status s = check_block(call_name(op, f), f, in, n); !s.ok()) return s;
  const CompressedLayout l = compressed_layout(f, n);
  const std::byte* payload = in.data() + l.payload_offset;
  for (std::size_t c = 0; c < l.chunks; ++c) {
    const std::size_t first = c * kChunk;
    const std::size_t len = std::min(kChunk, n - first);
    const float scale = scale_of(in.data(), c);
    if (f == CompressedFormat::int8) {
      int8_decode_chunk<Add>(reinterpret_cast<const std::int8_t*>(payload + first), len, scale, out.data() + first);
      continue;
    }
    std::uint8_t packed[kChunk / 8] = {};
    std::memcpy(packed, payload + first / 8, (len + 7) / 8);
    if (len == kChunk) {
      sign1_decode_chunk<Add>(packed, scale, out.data() + first);
    } else {  // the short last chunk: decode it whole, keep len values
      float d[kChunk];
      sign1_decode_chunk<false>(packed, scale, d);
      for (std::size_t i = 0; i < len; ++i) out[first + i] = Add ? out[first + i] + d[i] : d[i];
    }
  }
  return Status::Ok();
}

}  // namespace

Status compress(CompressedFormat format, std::span<const float> x, std::span<float> residual,
                std::span<std::byte> out) {
  if (!known(format)) return unknown_format("compress", format);
  const std::string call = call_name("compress", format);
  const std::size_t n = x.size();
  if (!residual.empty() && residual.size() != n) {
    return refuse(call + ": the residual has " + std::to_string(residual.size()) + " elements, the block " +
                  std::to_string(n) + " (as many, or none for no error feedback)");
  }
  const CompressedLayout l = compressed_layout(format, n);
  if (out.size() != l.bytes) {
    return refuse(call + ": out has " + std::to_string(out.size()) + " bytes, a " + std::string(to_string(format)) +
                  " block of " + std::to_string(n) + " elements takes " + std::to_string(l.bytes));
  }
  float* r = residual.empty() ? nullptr : residual.data();
  if (const std::size_t i = first_non_finite(x.data(), r, n); i != n) return non_finite(call, i, x[i], r ? r + i : r);

  std::byte* payload = out.data() + l.payload_offset;
  float v[kChunk];
  for (std::size_t c = 0; c < l.chunks; ++c) {
    const std::size_t first = c * kChunk;
    const std::size_t len = std::min(kChunk, n - first);
    float* chunk_r = r ? r + first : nullptr;
    load_chunk(x.data() + first, chunk_r, len, v);
    float scale;
    if (format == CompressedFormat::sign1) {
      scale = sign1_scale(v, len);
      sign1_chunk(v, len, scale, payload + first / 8, chunk_r);
    } else {
      scale = int8_scale(v);
      int8_chunk(v, len, scale, payload + first, chunk_r);
    }
    std::memcpy(out.data() + sizeof(float) * c, &scale, sizeof scale);
  }
  std::fill(payload + l.payload_bytes, out.data() + out.size(), std::byte{0});
  return Status::Ok();
}

Status decompress(CompressedFormat format, std::span<const std::byte> in, std::span<float> out) {
  return decode<false>("decompress", format, in, out);
}

Status accumulate(CompressedFormat format, std::span<const std::byte> in, std::span<float> sum) {
  return decode<true>("accumulate", format, in, sum);
}

}  // namespace blockps
