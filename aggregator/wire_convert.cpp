#include "aggregator/wire_convert.h"

#include <bit>

#include "aggregator/cpu_clones.h"

namespace blockps {

// load_wire/store_wire read the LU's bytes as native values.
static_assert(std::endian::native == std::endian::little, "wire formats are little-endian");

namespace {

template <WireDtype D>
BLOCKPS_INLINE_LOOP void decode_loop(const void* src, float* __restrict dst, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = load_wire<D>(src, i);
}

template <WireDtype D>
BLOCKPS_INLINE_LOOP void encode_loop(const float* __restrict src, void* dst, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) store_wire<D>(dst, i, src[i]);
}

}  // namespace

BLOCKPS_CPU_CLONES void decode_wire(WireDtype d, const void* src, float* dst, std::size_t n) {
  switch (d) {
    case WireDtype::f32:
      return decode_loop<WireDtype::f32>(src, dst, n);
    case WireDtype::bf16:
      return decode_loop<WireDtype::bf16>(src, dst, n);
    case WireDtype::f16:
      return decode_loop<WireDtype::f16>(src, dst, n);
  }
}

BLOCKPS_CPU_CLONES void encode_wire(WireDtype d, const float* src, void* dst, std::size_t n) {
  switch (d) {
    case WireDtype::f32:
      return encode_loop<WireDtype::f32>(src, dst, n);
    case WireDtype::bf16:
      return encode_loop<WireDtype::bf16>(src, dst, n);
    case WireDtype::f16:
      return encode_loop<WireDtype::f16>(src, dst, n);
  }
}

}  // namespace blockps
