// The worker-PS contract: a shard's place, which part of which model it holds, as the control line `place=` and
// the status page's /place/text write it: "MODEL INDEX/COUNT LAYOUT" (e.g. "m-3f9a2c01d4e5b677 0/2 stripe").
// The shard records it in its checkpoint and refuses a client that opens it in another place; the client formats
// and compares it. Header-only and dependency-free (docs/ARCHITECTURE.md).
#pragma once

#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "contract/blanks.h"
#include "contract/control_lines.h"
#include "contract/result.h"

namespace blockps {

/// How a model's blocks are laid out over its shards (the cluster file's `layout`).
enum class PlaceLayout { stripe, range };

inline constexpr std::string_view to_string(PlaceLayout l) { return l == PlaceLayout::stripe ? "stripe" : "range"; }

/// The most shards one model's place may name.
inline constexpr std::uint32_t kMaxPlaceCount = 65536;

/// Shard `index` of `count` of model `model` in layout `layout`.
struct Place {
  std::string model;  // control::is_name
  std::uint32_t index = 0;
  std::uint32_t count = 1;  // index < count <= kMaxPlaceCount
  PlaceLayout layout = PlaceLayout::stripe;
  bool operator==(const Place&) const = default;
};

/// "MODEL INDEX/COUNT LAYOUT".
inline std::string format_place(const Place& p) {
  return p.model + " " + std::to_string(p.index) + "/" + std::to_string(p.count) + " " +
         std::string(to_string(p.layout));
}

/// Parse "MODEL INDEX/COUNT LAYOUT" (spaces or tabs between the three words and around them). A refusal
/// (invalid_argument) names the value and what is allowed.
inline Result<Place> parse_place(std::string_view text) {
  const std::string seen(text);
  const auto refuse = [&seen](std::string_view why) {
    return Status::Error(StatusCode::invalid_argument,
                         "place '" + seen + "': " + std::string(why) +
                             " (allowed: MODEL INDEX/COUNT LAYOUT, e.g. m-3f9a2c01d4e5b677 0/2 stripe; MODEL " +
                             std::string(control::kNameRule) + ", INDEX < COUNT <= 65536, LAYOUT stripe or range)");
  };
  const auto next_word = [&text]() {
    text = trim_blanks(text);
    std::size_t end = 0;
    while (end < text.size() && text[end] != ' ' && text[end] != '\t') ++end;
    const std::string_view word = text.substr(0, end);
    text.remove_prefix(end);
    return word;
  };
  const std::string_view model = next_word(), position = next_word(), layout = next_word();
  if (!trim_blanks(text).empty()) return refuse("more than three words");
  if (!control::is_name(model)) return refuse("the model name is not allowed");
  const auto slash = position.find('/');
  if (slash == std::string_view::npos) return refuse("no INDEX/COUNT");
  const auto whole = [](std::string_view digits, std::uint64_t& out) {
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), out);
    return !digits.empty() && ec == std::errc() && end == digits.data() + digits.size();
  };
  std::uint64_t index = 0, count = 0;
  if (!whole(position.substr(0, slash), index) || !whole(position.substr(slash + 1), count))
    return refuse("INDEX/COUNT are not whole numbers");
  if (count == 0 || count > kMaxPlaceCount || index >= count) return refuse("INDEX/COUNT out of range");
  Place p;
  if (layout == to_string(PlaceLayout::stripe))
    p.layout = PlaceLayout::stripe;
  else if (layout == to_string(PlaceLayout::range))
    p.layout = PlaceLayout::range;
  else
    return refuse("the layout is not stripe or range");
  p.model = std::string(model);
  p.index = static_cast<std::uint32_t>(index);
  p.count = static_cast<std::uint32_t>(count);
  return p;
}

}  // namespace blockps
