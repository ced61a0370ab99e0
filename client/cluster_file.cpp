#include "blockps/cluster_file.h"

#include <toml++/toml.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "contract/byte_size.h"
#include "contract/control_lines.h"
#include "contract/limits.h"

namespace blockps {

const LuAddress& ShardSpec::lu(LuRole role) const {
  return role == LuRole::grad ? grad : role == LuRole::weights ? weights : status;
}

std::string worker_initiator_iqn(std::string_view worker) {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') std::snprintf(host, sizeof host, "unknown");
  // IQN names are lower case letters, digits, '-', '.' and ':' (RFC 3720 3.2.6.3.1).
  std::string name;
  for (const char* c = host; *c != '\0'; ++c) {
    const unsigned char u = static_cast<unsigned char>(*c);
    name += std::isalnum(u) || *c == '-' || *c == '.' ? static_cast<char>(std::tolower(u)) : '-';
  }
  return "iqn.2026-11.io.blockps:worker-" + name + "-" + std::string(worker);
}

std::string default_initiator_iqn() { return worker_initiator_iqn(std::to_string(::getpid())); }

namespace {

// Builds the messages: "FILE: [section] key = VALUE: what is allowed".
struct Where {
  const std::string& source;
  std::string section;  // "model", "shard 'shard0'" ...

  Status bad(std::string_view key, const std::string& seen, std::string_view allowed) const {
    return Status::Error(source + ": [" + section + "] " + std::string(key) + " = " + seen + ": " +
                         std::string(allowed));
  }
};

std::string show(const toml::node& node) {
  std::ostringstream out;
  if (node.is_string()) {
    out << '"' << *node.value<std::string>() << '"';
  } else if (node.is_table()) {
    out << "(a table)";
  } else if (node.is_array()) {
    out << "(an array)";
  } else if (auto i = node.value_exact<std::int64_t>()) {
    out << *i;
  } else if (auto f = node.value_exact<double>()) {
    out << *f;
  } else if (auto b = node.value_exact<bool>()) {
    out << (*b ? "true" : "false");
  } else {
    out << "(a date or time)";
  }
  return out.str();
}

Status refuse_unknown_keys(const Where& w, const toml::table& table, std::initializer_list<std::string_view> known) {
  for (const auto& [key, node] : table) {
    bool found = false;
    std::string list;
    for (std::string_view k : known) {
      found = found || key.str() == k;
      list += (list.empty() ? "" : ", ") + std::string(k);
    }
    if (!found) {
      return Status::Error(w.source + ": [" + w.section + "] unknown key '" + std::string(key.str()) +
                           "' (known: " + list + ")");
    }
  }
  return Status::Ok();
}

// A byte count given as "32M" or as an integer; `check` says what else it must satisfy (empty: ok).
template <class Check>
Status read_bytes(const Where& w, const toml::table& t, std::string_view key, bool required, std::uint64_t& out,
                  std::string_view allowed, Check check) {
  const toml::node* node = t.get(key);
  if (node == nullptr) {
    if (required)
      return Status::Error(w.source + ": [" + w.section + "] " + std::string(key) + " is required (" +
                           std::string(allowed) + ")");
    return Status::Ok();
  }
  std::uint64_t bytes = 0;
  bool parsed = false;
  if (auto s = node->value_exact<std::string>()) {
    parsed = parse_byte_size(*s, bytes);
  } else if (auto i = node->value_exact<std::int64_t>()) {
    parsed = *i >= 0;
    bytes = static_cast<std::uint64_t>(*i);
  }
  if (!parsed || !check(bytes)) return w.bad(key, show(*node), allowed);
  out = bytes;
  return Status::Ok();
}

template <class Enum>
Status read_choice(const Where& w, const toml::table& t, std::string_view key,
                   std::initializer_list<std::pair<std::string_view, Enum>> choices, Enum& out) {
  const toml::node* node = t.get(key);
  if (node == nullptr) return Status::Ok();
  std::string allowed = "must be one of";
  for (const auto& [name, value] : choices) allowed += std::string(" \"") + std::string(name) + "\"";
  if (auto s = node->value_exact<std::string>()) {
    for (const auto& [name, value] : choices) {
      if (*s == name) {
        out = value;
        return Status::Ok();
      }
    }
  }
  return w.bad(key, show(*node), allowed);
}

// A job or model name (control::is_name); absent: `out` stays as it is.
Status read_job_name(const Where& w, const toml::table& t, std::string_view key, std::string_view what,
                     std::string& out) {
  const toml::node* node = t.get(key);
  if (node == nullptr) return Status::Ok();
  auto v = node->value_exact<std::string>();
  if (!v || !control::is_name(*v))
    return w.bad(key, show(*node), "must be " + std::string(what) + ": " + std::string(control::kNameRule));
  out = *v;
  return Status::Ok();
}

Status read_address(const Where& w, const toml::table& t, std::string_view key, LuAddress& out) {
  static constexpr std::string_view kAllowed =
      "must be an iscsi://HOST:PORT/IQN/LUN or iser://HOST:PORT/IQN/LUN URL, or an absolute device path";
  const toml::node* node = t.get(key);
  if (node == nullptr) {
    return Status::Error(w.source + ": [" + w.section + "] " + std::string(key) + " is required (" +
                         std::string(kAllowed) + ")");
  }
  auto s = node->value_exact<std::string>();
  if (!s) return w.bad(key, show(*node), kAllowed);
  const std::string& v = *s;
  auto url_ok = [&](std::size_t scheme_len) {
    // HOST[:PORT]/IQN/LUN with a non-empty host and IQN and a whole-number LUN.
    const std::string rest = v.substr(scheme_len);
    const auto first_slash = rest.find('/');
    const auto last_slash = rest.rfind('/');
    if (first_slash == 0 || first_slash == std::string::npos || last_slash == first_slash) return false;
    const std::string lun = rest.substr(last_slash + 1);
    if (lun.empty() || lun.size() > 5) return false;
    for (char c : lun)
      if (!std::isdigit(static_cast<unsigned char>(c))) return false;
    return last_slash > first_slash + 1;
  };
  if (v.rfind("iscsi://", 0) == 0) {
    if (!url_ok(8)) return w.bad(key, show(*node), kAllowed);
    out = {LuAddress::Kind::iscsi_url, v};
  } else if (v.rfind("iser://", 0) == 0) {
    if (!url_ok(7)) return w.bad(key, show(*node), kAllowed);
    out = {LuAddress::Kind::iser_url, v};
  } else if (!v.empty() && v[0] == '/') {
    out = {LuAddress::Kind::device_path, v};
  } else {
    return w.bad(key, show(*node), kAllowed);
  }
  return Status::Ok();
}

const toml::table* section(const toml::table& root, std::string_view name, const std::string& source, Status& error) {
  const toml::node* node = root.get(name);
  if (node == nullptr) return nullptr;
  if (!node->is_table())
    error = Status::Error(source + ": '" + std::string(name) + "' must be a table ([" + std::string(name) + "]), not " +
                          show(*node));
  return node->as_table();
}

// [model]: its name, dtype, block and size.
Status parse_model(const toml::table& table, const std::string& source, ModelSpec& model) {
  Status s = Status::Ok();
  const Where mw{source, "model"};
  if (s = refuse_unknown_keys(mw, table, {"name", "size", "dtype", "block"}); !s.ok()) return s;
  if (s = read_job_name(mw, table, "name", "the model's name, the same in every cluster file of this model",
                        model.name);
      !s.ok())
    return s;
  if (s = read_choice<WireDtype>(mw, table, "dtype",
                                 {{to_string(WireDtype::f32), WireDtype::f32},
                                  {to_string(WireDtype::bf16), WireDtype::bf16},
                                  {to_string(WireDtype::f16), WireDtype::f16}},
                                 model.dtype);
      !s.ok())
    return s;
  if (s = read_bytes(
          mw, table, "block", false, model.block_bytes,
          "must be a byte count from 512 to 512K, a multiple of 512 (e.g. \"256K\")",
          [](std::uint64_t b) { return b >= kLuBlockBytes && b <= kMaxBlockBytes && b % kLuBlockBytes == 0; });
      !s.ok())
    return s;
  return read_bytes(mw, table, "size", true, model.size_bytes,
                    "must be a byte count > 0, a multiple of 512, with an optional K, M, G or T suffix (e.g. \"32M\")",
                    [](std::uint64_t b) { return b > 0 && b % kLuBlockBytes == 0; });
}

// [layout]: its kind.
Status parse_layout(const toml::table& table, const std::string& source, LayoutKind& layout) {
  const Where lw{source, "layout"};
  if (Status s = refuse_unknown_keys(lw, table, {"kind"}); !s.ok()) return s;
  return read_choice<LayoutKind>(lw, table, "kind", {{"stripe", LayoutKind::stripe}, {"range", LayoutKind::range}},
                                 layout);
}

// [client]: the worker's settings; max_request is checked against the model's `block`.
Status parse_client(const toml::table& table, const std::string& source, std::uint64_t block, ClientSpec& client) {
  Status s = Status::Ok();
  const Where cw{source, "client"};
  if (s = refuse_unknown_keys(
          cw, table,
          {"job", "initiator", "queue_depth", "exchange_writes", "send_order", "engine", "max_request", "reconnect_s",
           "timeout_s"});
      !s.ok())
    return s;
  if (s = read_job_name(cw, table, "job", "the job's name, the same for every worker of the job", client.job); !s.ok())
    return s;
  if (const toml::node* n = table.get("initiator")) {
    auto v = n->value_exact<std::string>();
    if (!v || v->rfind("iqn.", 0) != 0 || v->size() < 5 || v->size() > 223)
      return cw.bad("initiator", show(*n), "must be an iSCSI name \"iqn.YYYY-MM.domain:name\" of at most 223 bytes");
    client.initiator = *v;
  }
  if (const toml::node* n = table.get("queue_depth")) {
    auto v = n->value_exact<std::int64_t>();
    if (!v || *v < 1 || *v > kMaxQueueDepth)
      return cw.bad("queue_depth", show(*n), "must be a whole number from 1 to " + std::to_string(kMaxQueueDepth));
    client.queue_depth = static_cast<int>(*v);
  }
  if (const toml::node* n = table.get("exchange_writes")) {
    auto v = n->value_exact<std::int64_t>();
    if (!v || *v < 1 || *v > client.queue_depth)
      return cw.bad("exchange_writes", show(*n),
                    "must be a whole number from 1 to queue_depth (" + std::to_string(client.queue_depth) + ")");
    client.exchange_writes = static_cast<int>(*v);
  }
  if (table.get("send_order") != nullptr) {
    SendOrder order = SendOrder::ascending;
    if (s = read_choice<SendOrder>(cw, table, "send_order",
                                   {{"ascending", SendOrder::ascending},
                                    {"descending", SendOrder::descending},
                                    {"queue", SendOrder::queue}},
                                   order);
        !s.ok())
      return s;
    client.send_order = order;
  }
  if (s = read_choice<PosixEngine>(
          cw, table, "engine",
          {{"psync", PosixEngine::psync}, {"libaio", PosixEngine::libaio}, {"io_uring", PosixEngine::io_uring}},
          client.engine);
      !s.ok())
    return s;
  if (const toml::node* n = table.get("reconnect_s")) {
    // An integer or a float; a whole day at most (a limit that catches a unit mistake such as milliseconds).
    const std::optional<double> v = n->is_integer()
                                        ? std::optional<double>(static_cast<double>(*n->value<std::int64_t>()))
                                        : n->value_exact<double>();
    if (!v || !(*v >= 0 && *v <= kMaxReconnectSeconds))
      return cw.bad("reconnect_s", show(*n),
                    "must be a number of seconds from 0 (never reconnect) to " +
                        std::to_string(static_cast<int>(kMaxReconnectSeconds)));
    client.reconnect_s = *v;
  }
  if (const toml::node* n = table.get("timeout_s")) {
    auto v = n->value_exact<std::int64_t>();
    if (!v || *v < 1 || *v > kMaxTimeoutSeconds)
      return cw.bad("timeout_s", show(*n),
                    "must be a whole number of seconds from 1 to " + std::to_string(kMaxTimeoutSeconds));
    client.timeout_s = static_cast<int>(*v);
  }
  return read_bytes(cw, table, "max_request", false, client.max_request_bytes,
                    "must be a byte count from the model block (" + std::to_string(block) + ") to 16M",
                    [&](std::uint64_t b) { return b >= block && b <= kMaxRequestBytes; });
}

// [[shard]]: at least one, each with a unique name and its three LU addresses.
Status parse_shards(const toml::table& root, const std::string& source, std::vector<ShardSpec>& shards) {
  Status s = Status::Ok();
  const toml::node* node = root.get("shard");
  const toml::array* list = node != nullptr ? node->as_array() : nullptr;
  if (node != nullptr && (list == nullptr || !list->is_array_of_tables()))
    return Status::Error(source + ": 'shard' must be an array of tables ([[shard]] sections), not " + show(*node));
  if (list == nullptr || list->empty())
    return Status::Error(source +
                         ": no [[shard]] sections: a cluster needs at least one shard (name, grad, weights, status)");
  std::set<std::string> names;
  for (std::size_t i = 0; i < list->size(); ++i) {
    const toml::table& t = *list->at(i).as_table();
    ShardSpec shard;
    shard.name = "shard" + std::to_string(i);
    Where sw{source, "shard #" + std::to_string(i + 1)};
    if (const toml::node* n = t.get("name")) {
      auto v = n->value_exact<std::string>();
      if (!v || v->empty()) return sw.bad("name", show(*n), "must be a non-empty string");
      shard.name = *v;
    }
    sw.section = "shard '" + shard.name + "'";
    if (s = refuse_unknown_keys(sw, t, {"name", "grad", "weights", "status"}); !s.ok()) return s;
    if (!names.insert(shard.name).second)
      return Status::Error(source + ": [[shard]] name = \"" + shard.name + "\" is given twice: names must be unique");
    if (s = read_address(sw, t, "grad", shard.grad); !s.ok()) return s;
    if (s = read_address(sw, t, "weights", shard.weights); !s.ok()) return s;
    if (s = read_address(sw, t, "status", shard.status); !s.ok()) return s;
    shards.push_back(std::move(shard));
  }
  return Status::Ok();
}

// Every shard needs at least one block of the model.
Status check_blocks_per_shard(const ClusterConfig& c) {
  // A size that is a multiple of 512 is whole elements of every dtype, so only the shard count is left.
  const std::uint64_t blocks = (c.model.size_bytes + c.model.block_bytes - 1) / c.model.block_bytes;
  if (blocks < c.shards.size()) {
    return Status::Error(c.source + ": [model] size = " + std::to_string(c.model.size_bytes) + " is " +
                         std::to_string(blocks) + " block(s) of " + std::to_string(c.model.block_bytes) +
                         " bytes: too few for " + std::to_string(c.shards.size()) +
                         " shards (each shard needs at least one block)");
  }
  return Status::Ok();
}

// The file: its top-level keys, then each section in the order a section may depend on another's values.
Result<ClusterConfig> parse(const toml::table& root, const std::string& source) {
  ClusterConfig c;
  c.source = source;
  Status s = refuse_unknown_keys(Where{source, "top level"}, root, {"model", "layout", "client", "shard"});
  if (!s.ok()) return s;
  const toml::table* model = section(root, "model", source, s);
  if (!s.ok()) return s;
  if (model == nullptr) return Status::Error(source + ": [model] is required (size, dtype, block)");
  if (s = parse_model(*model, source, c.model); !s.ok()) return s;
  const toml::table* layout = section(root, "layout", source, s);
  if (!s.ok()) return s;
  if (layout != nullptr) {
    if (s = parse_layout(*layout, source, c.layout); !s.ok()) return s;
  }
  const toml::table* client = section(root, "client", source, s);
  if (!s.ok()) return s;
  if (client != nullptr) {
    if (s = parse_client(*client, source, c.model.block_bytes, c.client); !s.ok()) return s;
  }
  if (c.client.initiator.empty()) c.client.initiator = default_initiator_iqn();
  if (s = parse_shards(root, source, c.shards); !s.ok()) return s;
  if (s = check_blocks_per_shard(c); !s.ok()) return s;
  return c;
}

}  // namespace

Result<ClusterConfig> parse_cluster_text(std::string_view text, const std::string& source) {
  try {
    toml::table root = toml::parse(text, source);
    return parse(root, source);
  } catch (const toml::parse_error& e) {
    const auto& where = e.source().begin;
    return Status::Error(source + ":" + std::to_string(where.line) + ":" + std::to_string(where.column) +
                         ": not valid TOML: " + std::string(e.description()));
  } catch (const std::exception& e) {
    return Status::Error(source + ": " + e.what());
  }
}

Result<ClusterConfig> load_cluster_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::Error(path + ": cannot read the cluster file: " + errno_message(errno));
  std::ostringstream text;
  text << in.rdbuf();
  return parse_cluster_text(text.str(), path);
}

}  // namespace blockps
