// Wire dtypes: the element formats gradients and weights have on the LU. Master weights are always f32.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

#include "aggregator/host_device.h"
#include "contract/wire_dtype.h"

namespace blockps {

// WireDtype, wire_size, to_string and parse_wire_dtype: the contract (contract/wire_dtype.h).

// Scalar conversions; f32 -> 16-bit rounds to nearest, ties to even; NaN stays NaN (quiet), +-Inf stays Inf,
// values beyond the 16-bit range become Inf, f16 subnormals are produced and read exactly.
BLOCKPS_HD std::uint16_t f32_to_bf16(float f);
BLOCKPS_HD float bf16_to_f32(std::uint16_t h);
BLOCKPS_HD std::uint16_t f32_to_f16(float f);
BLOCKPS_HD float f16_to_f32(std::uint16_t h);

/// Element i of a wire-format array (little-endian, as the LU holds it).
template <WireDtype D>
BLOCKPS_HD float load_wire(const void* base, std::size_t i);
template <WireDtype D>
BLOCKPS_HD void store_wire(void* base, std::size_t i, float v);

/// Bulk conversions of n elements (vectorised).
void decode_wire(WireDtype d, const void* src, float* dst, std::size_t n);
void encode_wire(WireDtype d, const float* src, void* dst, std::size_t n);

}  // namespace blockps

#include "aggregator/wire_convert_inl.h"
