// The worker-PS contract: the one grammar of byte sizes, for bsopts (`size=64M`), cluster files
// (`size = "64M"`) and the command lines. Header-only and dependency-free (docs/ARCHITECTURE.md).
#pragma once

#include <charconv>
#include <cstdint>
#include <string>
#include <string_view>
#include <system_error>

#include "contract/blanks.h"

namespace blockps {

/// "64M" -> 67108864: a whole number of bytes with an optional binary suffix K, M, G or T (either case: 2^10 ..
/// 2^40), blanks around it ignored. False on anything else ("", "K", "4KB", "-4K", "1.5M") or on overflow.
inline bool parse_byte_size(std::string_view text, std::uint64_t& out) {
  text = trim_blanks(text);
  int shift = 0;
  if (!text.empty()) {
    switch (text.back()) {
      case 'k':
      case 'K':
        shift = 10;
        break;
      case 'm':
      case 'M':
        shift = 20;
        break;
      case 'g':
      case 'G':
        shift = 30;
        break;
      case 't':
      case 'T':
        shift = 40;
        break;
      default:
        break;
    }
    if (shift != 0) text.remove_suffix(1);
  }
  if (text.empty() || text.front() < '0' || text.front() > '9') return false;
  std::uint64_t n = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc{} || end != text.data() + text.size()) return false;
  if (shift != 0 && n > (~std::uint64_t{0} >> shift)) return false;
  out = n << shift;
  return true;
}

/// 67108864 -> "64M": the largest binary suffix that divides the size exactly (so it parses back the same).
inline std::string format_byte_size(std::uint64_t bytes) {
  static constexpr const char* kSuffix[] = {"", "K", "M", "G", "T"};
  int i = 0;
  while (i < 4 && bytes != 0 && bytes % 1024 == 0) bytes /= 1024, ++i;
  return std::to_string(bytes) + kSuffix[i];
}

}  // namespace blockps
