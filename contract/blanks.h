// The worker-PS contract: the blanks that its text grammars ignore around a key, a value or a line (bsopts,
// control lines, byte sizes): spaces, tabs, and the CR of a line written with CRLF. Header-only and
// dependency-free (docs/ARCHITECTURE.md).
#pragma once

#include <string_view>

namespace blockps {

constexpr bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\r'; }

/// `text` without the blanks at either end.
constexpr std::string_view trim_blanks(std::string_view text) {
  while (!text.empty() && is_blank(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_blank(text.back())) text.remove_suffix(1);
  return text;
}

}  // namespace blockps
