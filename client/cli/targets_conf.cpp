#include "client/cli/targets_conf.h"

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <vector>

namespace blockps::cli {
namespace {

// tgt-admin (Config::General) reads "#" as the start of a comment anywhere on a line, and so do we.
constexpr std::string_view kBlanks = " \t";

bool is_blank(char c) { return c == ' ' || c == '\t'; }

// The lines of a file's text without their "\n" (a last line without one counts too), as awk reads records.
std::vector<std::string_view> lines_of(std::string_view text) {
  std::vector<std::string_view> lines;
  for (std::size_t begin = 0; begin < text.size();) {
    std::size_t end = text.find('\n', begin);
    if (end == std::string_view::npos) end = text.size();
    lines.push_back(text.substr(begin, end - begin));
    begin = end + 1;
  }
  return lines;
}

// The blank-separated words of `s`.
std::vector<std::string> words_of(std::string_view s) {
  std::vector<std::string> words;
  for (std::size_t at = s.find_first_not_of(kBlanks); at != std::string_view::npos;
       at = s.find_first_not_of(kBlanks, at)) {
    const std::size_t end = std::min(s.find_first_of(kBlanks, at), s.size());
    words.emplace_back(s.substr(at, end - at));
    at = end;
  }
  return words;
}

// The line as a key reads it: no comment, no leading blanks, no trailing blanks or CR.
std::string meaning_of(std::string_view raw) {
  std::string_view s = raw.substr(0, raw.find('#'));
  const std::size_t first = s.find_first_not_of(kBlanks);
  if (first == std::string_view::npos) return "";
  s.remove_prefix(first);
  const std::size_t last = s.find_last_not_of(" \t\r");
  return std::string(s.substr(0, last == std::string_view::npos ? 0 : last + 1));
}

// The first two words of `s`, "" for those it lacks (awk's $1 and $2). The expansion reads them off the raw line,
// comment included, as its awk program did; the other readers off the line's meaning.
std::vector<std::string> first_words(std::string_view s) {
  std::vector<std::string> words = words_of(s);
  words.resize(2);
  return words;
}

// "<TAG" followed by a blank, at the start of `s`.
bool opens(std::string_view s, std::string_view tag) {
  return s.starts_with(tag) && s.size() > tag.size() && is_blank(s[tag.size()]);
}

// What a block's opening line names: "<TAG NAME>" -> NAME (blanks before ">" dropped).
std::string block_name(std::string_view s) {
  std::size_t at = s.find_first_of(kBlanks);
  at = s.find_first_not_of(kBlanks, at);
  std::string_view name = at == std::string_view::npos ? std::string_view{} : s.substr(at);
  if (name.ends_with('>')) {
    name.remove_suffix(1);
    while (!name.empty() && is_blank(name.back())) name.remove_suffix(1);
  }
  return std::string(name);
}

// The rest of `s` after its first word and the blanks that follow it.
std::string after_first_word(std::string_view s) {
  const std::size_t end = s.find_first_of(kBlanks);
  if (end == std::string_view::npos) return "";
  const std::size_t next = s.find_first_not_of(kBlanks, end);
  return next == std::string_view::npos ? "" : std::string(s.substr(next));
}

std::string trimmed(std::string_view s) {
  const std::size_t first = s.find_first_not_of(kBlanks);
  if (first == std::string_view::npos) return "";
  return std::string(s.substr(first, s.find_last_not_of(kBlanks) - first + 1));
}

std::string joined(std::initializer_list<std::string_view> parts) {
  std::string out;
  for (std::string_view part : parts) out += part;
  return out;
}

// An option list as a line spells it, 'k=v;k=v' or "k=v;k=v", without its one pair of quotes.
std::string unquoted(const std::string& options) {
  if (options.size() >= 2 && (options[0] == '\'' || options[0] == '"') && options.back() == options[0])
    return options.substr(1, options.size() - 2);
  return options;
}

// The "k=v" items of an unquoted option list, each without the blanks around it; empty items skipped.
std::vector<std::string> option_items(std::string_view options) {
  std::vector<std::string> items;
  for (std::size_t begin = 0; begin <= options.size();) {
    std::size_t end = options.find(';', begin);
    if (end == std::string_view::npos) end = options.size();
    std::string item = trimmed(options.substr(begin, end - begin));
    begin = end + 1;
    if (!item.empty()) items.push_back(std::move(item));
  }
  return items;
}

std::string option_name(const std::string& item) { return trimmed(item.substr(0, item.find('='))); }

// role= of a bsopts line's options ("" when it has none).
std::string role_option(const std::string& options) {
  for (const std::string& item : option_items(unquoted(options)))
    if (option_name(item) == "role") return trimmed(item.substr(item.find('=') + 1));
  return "";
}

// Where the lines of a file stand among its blocks (<target> and the LU blocks inside it).
class BlockNesting {
 public:
  // True for a line (its meaning) outside every block that neither opens nor closes one.
  bool is_top_level(std::string_view s) {
    if (s.starts_with("</")) {
      --depth_;
      return false;
    }
    if (s.starts_with('<')) {
      ++depth_;
      return false;
    }
    return depth_ == 0;
  }

 private:
  int depth_ = 0;
};

// A value read off a line (a top-level key's: the words after the key, joined by one blank), and the line's number.
struct NumberedValue {
  int line;
  std::string value;
};

// The top-level `key` lines of `text` (top_level_values), each with its number.
std::vector<NumberedValue> top_level_lines(std::string_view text, std::string_view key) {
  std::vector<NumberedValue> found;
  BlockNesting nesting;
  int number = 0;
  for (std::string_view raw : lines_of(text)) {
    ++number;
    const std::string s = meaning_of(raw);
    if (!nesting.is_top_level(s)) continue;
    const std::vector<std::string> words = words_of(s);
    if (words.empty() || words[0] != key) continue;
    std::string value;
    for (std::size_t i = 1; i < words.size(); ++i) value += (i > 1 ? " " : "") + words[i];
    found.push_back({number, value});
  }
  return found;
}

// The top-level key of a shard's portal (HOST:PORT; scripts/ps-up.sh listens on it, attach.sh logs in to it).
constexpr std::string_view kPortalKey = "blockps-portal";

// The one file a path names, as far as its spelling goes: "/./" and "//" collapsed to "/" until none is left.
// One pass that never writes a second "/" after a "/" and drops a "." between two; not std::string::replace in a
// loop, which GCC 12's -O3 flags with a false -Wrestrict (GCC bug 105329).
std::string normal_path(const std::string& p) {
  std::string out;
  out.reserve(p.size());
  for (std::size_t i = 0; i < p.size(); ++i) {
    const bool after_slash = !out.empty() && out.back() == '/';
    if (after_slash && p[i] == '/') continue;
    if (after_slash && p[i] == '.' && i + 1 < p.size() && p[i + 1] == '/') continue;
    out += p[i];
  }
  return out;
}

// A LUN as tgt-admin compares it: a number when the text is one ("01" is 1).
std::optional<double> lun_number(const std::string& text) {
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  return *end == '\0' ? std::optional<double>(v) : std::nullopt;
}

// An explicit LU of a target (a <backing-store>/<direct-store> block or line), checked against the target's shard
// line when the target ends: the line may come before or after it.
struct ExplicitLu {
  int line;
  std::string path;
  std::string lun;  // "" when the file leaves it to tgt-admin
};

struct ShardLine {
  int line;
  std::string path;  // normal_path'd
};

// One file read line by line (as the awk program of scripts/lib/blockps-tgt.sh before it did).
class Expansion {
 public:
  explicit Expansion(const std::string& file_name) : file_(file_name) {}

  Status add(int number, std::string_view raw) {
    const std::string s = meaning_of(raw);
    const std::vector<std::string> words = first_words(raw);
    if (opens(s, "<target")) return open_target(raw, s);
    if (s.starts_with("</target>")) return close_target(raw);
    if (in_target_ && (opens(s, "<backing-store") || opens(s, "<direct-store"))) {
      in_lu_ = true;
      lus_.push_back({number, block_name(s), ""});
      return keep(raw);
    }
    if (in_target_ && in_lu_ && words[0] == "lun" && !lus_.empty()) lus_.back().lun = words[1];
    if (s.starts_with("</backing-store>") || s.starts_with("</direct-store>")) {
      in_lu_ = false;
      return keep(raw);
    }
    if (in_target_ && !in_lu_ && (words[0] == "backing-store" || words[0] == "direct-store")) {
      lus_.push_back({number, words[1], ""});
      return keep(raw);
    }
    if (in_target_ && words[0].starts_with("blockps-") && words[0] != kShardLineKey)
      return error(number, "unknown key '" + words[0] + "' in <target " + iqn_ +
                               "> (the one blockps key of a target is '" + std::string(kShardLineKey) +
                               " PATH OPTIONS')");
    if (words[0] == kShardLineKey) return shard_line(number, raw, s);
    return keep(raw);
  }

  std::string take_text() { return std::move(out_); }

 private:
  // One line of output: the indentation, then the parts.
  void add_line(const std::string& indent, std::initializer_list<std::string_view> parts) {
    out_ += indent;
    for (std::string_view part : parts) out_ += part;
    out_ += '\n';
  }
  Status keep(std::string_view raw) {
    out_.append(raw).append("\n");
    return Status::Ok();
  }
  Status error(int line, const std::string& what) const {
    return Status::Error(StatusCode::config, file_ + ":" + std::to_string(line) + ": " + what);
  }

  Status open_target(std::string_view raw, const std::string& s) {
    in_target_ = true;
    iqn_ = block_name(s);
    shard_.reset();
    lus_.clear();
    return keep(raw);
  }

  // At the end of the target: an explicit LU must not be the shard line's checkpoint or take its LUNs.
  Status close_target(std::string_view raw) {
    for (const ExplicitLu& lu : lus_) {
      if (!shard_) break;
      const std::string on_line = " on line " + std::to_string(shard_->line);
      if (normal_path(lu.path) == shard_->path)
        return error(lu.line, "backing-store " + lu.path + " is the checkpoint of the " + std::string(kShardLineKey) +
                                  on_line + ", which makes its three LUs: remove this block, or spell all three LUs " +
                                  "as <backing-store> blocks instead of " + std::string(kShardLineKey));
      const std::optional<double> lun = lun_number(lu.lun);
      for (const LuRoleFacts& role : kLuRoles)
        if (lun && *lun == role.lun)
          return error(lu.line, "lun " + lu.lun + " of backing-store " + lu.path + " clashes with the " +
                                    std::string(kShardLineKey) + on_line +
                                    " (its LUs take LUNs 1 grad, 2 weights, 3 status): give this LU lun 4 or above");
    }
    in_target_ = false;
    return keep(raw);
  }

  Status shard_line(int number, std::string_view raw, const std::string& s) {
    const std::string key(kShardLineKey);
    if (!in_target_)
      return error(number, key + " belongs inside a <target IQN> block (it makes that target's LUNs 1-3)");
    if (in_lu_) return error(number, key + " belongs directly inside <target>, not inside a <backing-store> block");
    if (shard_)
      return error(number,
                   "a second " + key + " in <target " + iqn_ + "> (the first is on line " +
                       std::to_string(shard_->line) +
                       "): one shard per target, as its LUs take LUNs 1-3; give the other shard its own <target>");
    // A "#" inside the quotes began a comment (as it does for tgt-admin): say so, not "unquoted".
    std::size_t quotes = 0;
    for (char c : s) quotes += c == '\'' || c == '"';
    if (quotes % 2 == 1 && raw.find('#') != std::string_view::npos)
      return error(number, "\"#\" starts a comment in a config file (tgt-admin reads it so too): the options of " +
                               key + " cannot contain it");
    const std::string indent(raw.substr(0, raw.find_first_not_of(kBlanks)));
    return expand(number, after_first_word(s), indent);
  }

  // "PATH 'OPTIONS'" -> the three LUs.
  Status expand(int number, const std::string& rest, const std::string& indent) {
    const std::string key(kShardLineKey);
    const std::string first_word = rest.substr(0, rest.find_first_of(kBlanks));
    if (rest.empty() || rest[0] == '\'' || rest[0] == '"' || first_word.find('=') != std::string::npos)
      return error(number, key + ": the checkpoint path is missing (expected " + key +
                               " /ABSOLUTE/PATH/model.ckpt 'size=16M;dtype=f32;...')");
    std::string path = first_word;
    std::string options = after_first_word(rest);
    if (!path.starts_with('/')) return error(number, "checkpoint path '" + path + "' must be absolute");
    if (path.ends_with('/'))
      return error(number, "checkpoint path '" + path + "' names a directory; name the checkpoint file");
    if (path.find_first_of(",'\"") != std::string::npos)
      return error(number, "checkpoint path '" + path + "' must not contain ',' (tgtd splits on it) or quotes");
    options = unquoted(options);
    if (options.find_first_of("'\"") != std::string::npos)
      return error(number, "the options of " + key +
                               " must be one single-quoted list 'k=v;k=v' without quotes inside (got " + options + ")");
    std::string shared, admins;
    for (const std::string& item : option_items(options)) {
      const std::string name = option_name(item);
      if (name == "role")
        return error(number, "role= is not an option of " + key +
                                 ": the line makes LUN 1 role=grad, LUN 2 role=weights and LUN 3 role=status; give "
                                 "the shard options (docs/OPTIONS.md) and admins= for the status LU");
      (name == "admins" ? admins : shared) += ";" + item;
    }
    path = normal_path(path);
    shard_ = ShardLine{number, path};
    const std::size_t slash = path.rfind('/');
    const std::string dir = path.substr(0, slash), base = path.substr(slash + 1);
    add_line(indent, {"# ", key, " ", path, " (line ", std::to_string(number),
                      "): LUN 1 grad, 2 weights, 3 status over one checkpoint"});
    for (const LuRoleFacts& role : kLuRoles) {
      // Three spellings of one file: tgt-admin keys backing stores by path string.
      const std::string spelling = role.role == LuRole::grad      ? path
                                   : role.role == LuRole::weights ? joined({dir, "/./", base})
                                                                  : joined({dir, "//", base});
      // admins= is the status LU's alone (ps_backend/config/lu_options.cpp refuses it on the others).
      const std::string& lu_options = role.role == LuRole::status ? joined({admins, shared}) : shared;
      add_line(indent, {"<backing-store ", spelling, ">"});
      add_line(indent, {"    lun ", std::to_string(role.lun)});
      add_line(indent, {"    bs-type blockps"});
      add_line(indent, {"    bsopts 'role=", role.name, lu_options, "'"});
      add_line(indent, {"</backing-store>"});
    }
    return Status::Ok();
  }

  std::string file_;
  std::string out_;
  bool in_target_ = false;
  bool in_lu_ = false;
  std::string iqn_;
  std::optional<ShardLine> shard_;  // of the current target
  std::vector<ExplicitLu> lus_;     // of the current target
};

}  // namespace

Result<std::string> expand_shard_lines(std::string_view text, const std::string& file_name) {
  Expansion expansion(file_name);
  int number = 0;
  for (std::string_view raw : lines_of(text))
    if (Status st = expansion.add(++number, raw); !st.ok()) return st;
  return expansion.take_text();
}

std::vector<std::string> top_level_values(std::string_view text, std::string_view key) {
  std::vector<std::string> values;
  for (NumberedValue& line : top_level_lines(text, key)) values.push_back(std::move(line.value));
  return values;
}

std::vector<TargetLu> target_lus(std::string_view text) {
  std::vector<TargetLu> lus, of_target;
  std::string iqn, target_bs_type;
  bool in_target = false, in_lu = false;
  for (std::string_view raw : lines_of(text)) {
    const std::string s = meaning_of(raw);
    const std::vector<std::string> words = first_words(s);
    const std::string& value = words[1];
    if (opens(s, "<target")) {
      in_target = true;
      iqn = block_name(s);
      of_target.clear();
      target_bs_type.clear();
      in_lu = false;
    } else if (!in_target) {
      continue;
    } else if (s.starts_with("</target>")) {
      // A target-level bs-type is the type of its LUs without their own, wherever it stands in the block.
      for (TargetLu& lu : of_target) {
        if (lu.bs_type.empty()) lu.bs_type = target_bs_type;
        lus.push_back(std::move(lu));
      }
      in_target = false;
    } else if (opens(s, "<backing-store") || opens(s, "<direct-store")) {
      of_target.push_back({iqn, "", "", block_name(s), ""});
      in_lu = true;
    } else if (s.starts_with("</backing-store>") || s.starts_with("</direct-store>")) {
      in_lu = false;
    } else if (in_lu && words[0] == "lun") {
      of_target.back().lun = value;
    } else if (in_lu && words[0] == "bs-type") {
      of_target.back().bs_type = value;
    } else if (in_lu && words[0] == "bsopts") {
      of_target.back().role = role_option(after_first_word(s));
    } else if (!in_lu && words[0] == "bs-type") {
      target_bs_type = value;
    } else if (!in_lu && (words[0] == "backing-store" || words[0] == "direct-store")) {
      of_target.push_back({iqn, "", "", value, ""});
    }
  }
  return lus;
}

std::string without_control_port(std::string_view text) {
  std::string out;
  BlockNesting nesting;
  for (std::string_view raw : lines_of(text)) {
    const std::string s = meaning_of(raw);
    if (nesting.is_top_level(s) && first_words(s)[0] == "control-port")
      out += "# (control-port given to tgt-admin as -C by ps-up.sh)\n";
    else
      out.append(raw).append("\n");
  }
  return out;
}

std::string with_iser_targets(std::string_view text) {
  std::string out, copy, iqn;
  bool in_target = false;
  for (std::string_view raw : lines_of(text)) {
    const std::string s = meaning_of(raw);
    out.append(raw).append("\n");
    if (opens(s, "<target")) {
      in_target = true;
      iqn = block_name(s);
      copy = joined({"<target ", iqn, kIserTargetSuffix, ">\n    driver iser\n"});
      continue;
    }
    if (!in_target) continue;
    if (s.starts_with("</target>")) {
      in_target = false;
      out += joined({"\n# iSER copy of ", iqn, " (ps-up.sh, blockps-iser)\n", copy, raw, "\n"});
      continue;
    }
    const std::string key = first_words(s)[0];
    if (key != "InitialR2T" && key != "ImmediateData" && key != "driver") copy.append(raw).append("\n");
  }
  return out;
}

Result<ShardEndpoint> shard_endpoint(std::string_view text, const std::string& file_name) {
  const Result<std::string> expanded = expand_shard_lines(text, file_name);
  if (!expanded.ok()) return expanded.status();
  // The line of the second of several, or none: where "exactly one" went wrong.
  const auto refused = [&](int line, const std::string& what) {
    const std::string at = line > 0 ? std::to_string(line) : "";
    return Status::Error(StatusCode::config, joined({file_name, at.empty() ? "" : ":", at, ": ", what}));
  };
  const std::vector<NumberedValue> portals = top_level_lines(text, kPortalKey);
  if (portals.size() != 1)
    return refused(
        portals.size() > 1 ? portals[1].line : 0,
        "needs exactly one " + std::string(kPortalKey) + " line (found " + std::to_string(portals.size()) + ")");
  std::vector<NumberedValue> targets;
  int number = 0;
  for (std::string_view raw : lines_of(text)) {
    const std::string s = meaning_of(raw);
    ++number;
    if (opens(s, "<target")) targets.push_back({number, block_name(s)});
  }
  if (targets.size() != 1)
    return refused(targets.size() > 1 ? targets[1].line : 0,
                   "needs exactly one <target IQN> (found " + std::to_string(targets.size()) + ")");

  ShardEndpoint endpoint{first_words(portals[0].value)[0], targets[0].value, {}};
  for (const TargetLu& lu : target_lus(*expanded))
    if (const std::optional<LuRole> role = parse_lu_role(lu.role); role && !lu.lun.empty())
      endpoint.luns[static_cast<std::size_t>(*role)] = lu.lun;
  std::string roles;  // "role=grad, role=weights and role=status"
  for (const LuRoleFacts& role : kLuRoles)
    roles += joined({roles.empty() ? "" : role.role == kLuRoles.back().role ? " and " : ", ", "role=", role.name});
  for (const std::string& lun : endpoint.luns)
    if (lun.empty())
      return refused(targets[0].line, "needs a " + std::string(kShardLineKey) + " line in its <target>, or one LU " +
                                          "each with " + roles + " (a lun line and a bsopts line)");
  return endpoint;
}

}  // namespace blockps::cli
