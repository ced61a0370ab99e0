// The worker-PS contract: the element formats gradients and weights have on an LU (bsopts dtype=, a cluster
// file's [model] dtype). Header-only and dependency-free (docs/ARCHITECTURE.md); the conversions are the
// aggregator's (aggregator/wire_convert.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace blockps {

/// The shards keep f32 master weights whatever the wire carries.
enum class WireDtype : std::uint8_t { f32 = 0, bf16 = 1, f16 = 2 };

/// Bytes one element takes on the wire.
constexpr std::size_t wire_size(WireDtype d) { return d == WireDtype::f32 ? 4 : 2; }

constexpr std::string_view to_string(WireDtype d) {
  switch (d) {
    case WireDtype::f32:
      return "f32";
    case WireDtype::bf16:
      return "bf16";
    case WireDtype::f16:
      return "f16";
  }
  return "?";
}

/// "f32", "bf16", "f16"; nullopt for anything else.
constexpr std::optional<WireDtype> parse_wire_dtype(std::string_view name) {
  for (WireDtype d : {WireDtype::f32, WireDtype::bf16, WireDtype::f16}) {
    if (name == to_string(d)) return d;
  }
  return std::nullopt;
}

}  // namespace blockps
