#include "ps_backend/config/lu_options.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <functional>

#include "contract/blanks.h"

namespace blockps {
namespace {

bool parse_float(std::string_view text, float& out) {
  // std::from_chars for float is in libstdc++ 12; it rejects leading '+', which we accept for friendliness.
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size() && std::isfinite(out);
}

bool parse_uint(std::string_view text, std::uint64_t& out) {
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return !text.empty() && ec == std::errc() && end == text.data() + text.size();
}

// The shortest text that parses back to the same float ("0.9", not "0.899999976").
std::string format_float(float v) {
  char buf[32];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc() ? std::string(buf, end) : "?";
}

// A refused value: the key, the value seen and what is allowed.
Status bad(std::string_view key, std::string_view value, std::string_view allowed) {
  return Status::Error(StatusCode::config, std::string(key) + "=" + std::string(value) + ": " + std::string(allowed));
}

Status refuse(std::string why) { return Status::Error(StatusCode::config, std::move(why)); }

// What checkpoint_copy= takes. The parser checks the form; the shard, which knows its checkpoint's path, that the
// copy is another file (bad_checkpoint_copy).
constexpr std::string_view kCheckpointCopyAllowed =
    "must be none or an absolute path other than the shard's checkpoint";

// An averaging shard returns a round's average: only sync has rounds of every worker's gradient. Under async or
// ssp:K each push would be applied alone, and a READ would return whichever worker's gradient came last.
Status check_averaging(const ShardConfig& c) {
  if (c.optimizer.kind != OptimizerKind::average || c.rounds.mode == RoundPolicy::Mode::sync) return Status::Ok();
  return refuse("opt=average needs mode=sync (mode=" + to_string(c.rounds) +
                "): an averaging shard returns each round's average of every worker's gradient, and only sync has "
                "rounds; under async or ssp a READ would return whichever push came last");
}

// Compressed rounds are rounds: under async or ssp:K a push is applied alone, with no round boundary for the warm-up
// to end at that every worker and the shard agree on.
Status check_compression(const ShardConfig& c) {
  if (!c.rounds.compress) return Status::Ok();
  // A block whose compressed form is as long as its wire-dtype form: a push's length could not say which it is.
  const ShardGeometry& g = c.geometry;
  for (const std::uint64_t block : {std::uint64_t{0}, g.blocks() == 0 ? 0 : g.blocks() - 1}) {
    const std::uint64_t wire = g.elements_in_block(block) * wire_size(g.dtype);
    if (wire != 0 && compressed_block_bytes(*c.rounds.compress, g.elements_in_block(block)) >= wire)
      return refuse(std::string("compress=") + std::string(to_string(*c.rounds.compress)) + " saves nothing on " +
                    (block == 0 ? "blocks" : "the last block") + " of " + format_byte_size(wire) + " of " +
                    std::string(to_string(g.dtype)) +
                    " (the compressed block, padded to 512 bytes, is as long): use a larger block=, or a size= "
                    "whose last block is larger");
  }
  if (c.rounds.mode == RoundPolicy::Mode::sync) return Status::Ok();
  return refuse(std::string("compress=") + std::string(to_string(*c.rounds.compress)) +
                " needs mode=sync (mode=" + to_string(c.rounds) +
                "): compressed pushes are decoded into a round's sum, and the warm-up ends at a round every worker "
                "and the shard count alike");
}

// A float key: parsed, range-checked, formatted. `in_range` says what is allowed.
struct FloatKey {
  float OptimizerParams::*field;
  bool (*in_range)(float);
  std::string_view allowed;
};

using Apply = std::function<Status(std::string_view key, std::string_view value, LuOptions&)>;
using Show = std::function<std::string(const ShardConfig&)>;

struct KeyDef {
  OptionKey doc;
  bool shard_key;   // describes the shard (merged across LUs and checked against checkpoints)
  bool structural;  // changes the memory layout: must match a checkpoint
  Apply apply;
  Show show;
};

KeyDef float_key(std::string_view name, std::string_view def, std::string_view meaning, FloatKey k) {
  return KeyDef{{name, def, meaning},
                true,
                false,
                [k](std::string_view key, std::string_view value, LuOptions& o) -> Status {
                  float v = 0;
                  if (!parse_float(value, v) || !k.in_range(v)) return bad(key, value, k.allowed);
                  o.config.optimizer.*k.field = v;
                  return Status::Ok();
                },
                [k](const ShardConfig& c) { return format_float(c.optimizer.*k.field); }};
}

// An unsigned round-policy key in [lo, hi].
KeyDef round_key(std::string_view name, std::string_view def, std::string_view meaning,
                 std::uint32_t RoundPolicy::*field, std::uint32_t lo, std::uint32_t hi) {
  return KeyDef{{name, def, meaning},
                true,
                false,
                [=](std::string_view key, std::string_view value, LuOptions& o) -> Status {
                  std::uint64_t n = 0;
                  if (!parse_uint(value, n) || n < lo || n > hi)
                    return bad(key, value,
                               "must be a whole number from " + std::to_string(lo) + " to " + std::to_string(hi));
                  o.config.rounds.*field = static_cast<std::uint32_t>(n);
                  return Status::Ok();
                },
                [=](const ShardConfig& c) { return std::to_string(c.rounds.*field); }};
}

// An iSCSI name as RFC 3720 3.2.6 writes it: the type prefix, then letters, digits, '.', '-', ':'.
bool is_iscsi_name(std::string_view n) {
  if (n.size() < 5 || n.size() > 223) return false;
  if (n.substr(0, 4) != "iqn." && n.substr(0, 4) != "eui." && n.substr(0, 4) != "naa.") return false;
  return std::all_of(n.begin(), n.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == ':';
  });
}

bool parse_bool(std::string_view v, bool& out) {
  if (v == "1" || v == "true" || v == "yes" || v == "on") return out = true, true;
  if (v == "0" || v == "false" || v == "no" || v == "off") return out = false, true;
  return false;
}

const std::vector<KeyDef>& key_table() {
  static const std::vector<KeyDef> table = {
      {{"role", "(required)",
        "grad: WRITE pushes a gradient, READ pulls weights; weights: plain disk over the "
        "weights; status: READ gives a JSON status page, WRITE carries control lines"},
       false,
       false,
       [](std::string_view key, std::string_view v, LuOptions& o) -> Status {
         const std::optional<LuRole> role = parse_lu_role(v);
         if (!role) return bad(key, v, "must be grad, weights or status");
         o.role = *role;
         return Status::Ok();
       },
       nullptr},
      {{"admins", "(none: every initiator)",
        "role=status only: the initiators whose control lines (WRITEs) are accepted, as iSCSI names separated by "
        "'|' (iqn.2026-11.io.blockps:admin|iqn...:ops); any other writer gets CHECK CONDITION ILLEGAL REQUEST, "
        "ACCESS DENIED - NO ACCESS RIGHTS (0x20/0x02). Reads of the status page stay open"},
       false,
       false,
       [](std::string_view key, std::string_view v, LuOptions& o) -> Status {
         o.admins.clear();
         while (!v.empty()) {
           const auto bar = v.find('|');
           const std::string_view name = trim_blanks(v.substr(0, bar));
           v = bar == std::string_view::npos ? std::string_view{} : v.substr(bar + 1);
           if (!is_iscsi_name(name))
             return bad(key, name.empty() ? std::string_view("(empty)") : name,
                        "must be iSCSI names (iqn.YYYY-MM.domain:name, eui.HEX or naa.HEX; letters, digits, '.', "
                        "'-', ':'; at most 223 bytes) separated by '|'");
           o.admins.emplace_back(name);
         }
         if (o.admins.empty()) return bad(key, "(empty)", "must name at least one initiator");
         return Status::Ok();
       },
       nullptr},
      {{"io_threads", "4", "threads of tgt's I/O pool serving this LU (1..64)"},
       false,
       false,
       [](std::string_view key, std::string_view v, LuOptions& o) -> Status {
         std::uint64_t n = 0;
         if (!parse_uint(v, n) || n < 1 || n > 64) return bad(key, v, "must be a whole number from 1 to 64");
         o.io_threads = static_cast<std::uint32_t>(n);
         return Status::Ok();
       },
       nullptr},
      {{"main_thread_bytes", "64K",
        "a READ or WRITE of at most this many bytes (on a CPU shard; with rounds, of blocks no larger) runs on tgtd's "
        "main thread instead of the I/O pool, whose hand-off costs more than its work; 0..512K, 0: every command "
        "goes to the pool"},
       false,
       false,
       [](std::string_view key, std::string_view v, LuOptions& o) -> Status {
         std::uint64_t n = 0;
         if (!parse_byte_size(v, n) || n > kMaxBlockBytes) return bad(key, v, "must be a byte count from 0 to 512K");
         o.main_thread_bytes = static_cast<std::uint32_t>(n);
         return Status::Ok();
       },
       nullptr},
      {{"size", "(required for a new shard)",
        "shard size in wire bytes (K/M/G/T suffixes, binary); the grad "
        "and weights LUs have this capacity"},
       true,
       true,
       [](std::string_view key, std::string_view v, LuOptions& o) -> Status {
         std::uint64_t n = 0;
         if (!parse_byte_size(v, n) || n == 0) return bad(key, v, "must be a byte count > 0, e.g. 64M");
         o.config.geometry.bytes = n;
         return Status::Ok();
       },
       [](const ShardConfig& c) { return format_byte_size(c.geometry.bytes); }},
      {{"dtype", "f32", "wire format of gradients and weights: f32, bf16, f16 (master weights are f32)"},
       true,
       true,
       [](std::string_view key, std::string_view v, LuOptions& o) -> Status {
         const auto d = parse_wire_dtype(v);
         if (!d) return bad(key, v, "must be f32, bf16 or f16");
         o.config.geometry.dtype = *d;
         return Status::Ok();
       },
       [](const ShardConfig& c) { return std::string(to_string(c.geometry.dtype)); }},
      {{"block", "256K",
        "aggregation block in wire bytes: the unit of locking; a multiple of the LU block size, "
        "at most 512K (one iSER buffer)"},
       true,
       true,
       [](std::string_view key, std::string_view v, LuOptions& o) -> Status {
         std::uint64_t n = 0;
         if (!parse_byte_size(v, n) || n == 0 || n > kMaxBlockBytes)
           return bad(key, v, "must be a byte count from 1 LU block to 512K");
         o.config.geometry.block_bytes = static_cast<std::uint32_t>(n);
         return Status::Ok();
       },
       [](const ShardConfig& c) { return format_byte_size(c.geometry.block_bytes); }},
      {{"opt", "sgd",
        "optimizer applied on each push: sgd, momentum, adam, adamw, sum (w += g), average (mode=sync "
        "only: an averaging shard, whose READs return the last round's average gradient)"},
       true,
       true,
       [](std::string_view key, std::string_view v, LuOptions& o) -> Status {
         const auto k = parse_optimizer(v);
         if (!k) return bad(key, v, "must be sgd, momentum, adam, adamw, sum or average");
         o.config.optimizer.kind = *k;
         return Status::Ok();
       },
       [](const ShardConfig& c) { return std::string(to_string(c.optimizer.kind)); }},
      float_key("lr", "0.01", "learning rate",
                {&OptimizerParams::lr, [](float v) { return v >= 0; }, "must be a finite number >= 0"}),
      float_key("momentum", "0.9", "momentum factor mu (opt=momentum)",
                {&OptimizerParams::momentum, [](float v) { return v >= 0 && v < 1; }, "must be in [0, 1)"}),
      {{"nesterov", "0", "Nesterov momentum (opt=momentum): 0/1, true/false"},
       true,
       false,
       [](std::string_view key, std::string_view v, LuOptions& o) -> Status {
         if (!parse_bool(v, o.config.optimizer.nesterov)) return bad(key, v, "must be 0, 1, true or false");
         return Status::Ok();
       },
       [](const ShardConfig& c) { return std::string(c.optimizer.nesterov ? "1" : "0"); }},
      float_key("beta1", "0.9", "first-moment decay (adam, adamw)",
                {&OptimizerParams::beta1, [](float v) { return v >= 0 && v < 1; }, "must be in [0, 1)"}),
      float_key("beta2", "0.999", "second-moment decay (adam, adamw)",
                {&OptimizerParams::beta2, [](float v) { return v >= 0 && v < 1; }, "must be in [0, 1)"}),
      float_key("eps", "1e-08", "denominator term (adam, adamw)",
                {&OptimizerParams::eps, [](float v) { return v > 0; }, "must be a finite number > 0"}),
      float_key("weight_decay", "0", "L2 penalty (sgd, momentum, adam) or decoupled decay (adamw)",
                {&OptimizerParams::weight_decay, [](float v) { return v >= 0; }, "must be a finite number >= 0"}),
      {{"init", "zeros",
        "initial weights of a new shard: zeros, uniform:A (U(-A,A)), normal:S (N(0,S^2)), "
        "file:PATH (raw wire-dtype bytes, exactly size bytes)"},
       true,
       false,
       [](std::string_view key, std::string_view v, LuOptions& o) -> Status {
         InitSpec s;
         const auto colon = v.find(':');
         const std::string_view kind = v.substr(0, colon);
         const std::string_view arg = colon == std::string_view::npos ? "" : v.substr(colon + 1);
         float scale = 0;
         if (kind == "zeros" && colon == std::string_view::npos) {
           s.kind = InitSpec::Kind::zeros;
         } else if ((kind == "uniform" || kind == "normal") && parse_float(arg, scale) && scale > 0) {
           s.kind = kind == "uniform" ? InitSpec::Kind::uniform : InitSpec::Kind::normal;
           s.scale = scale;
         } else if (kind == "file" && !arg.empty()) {
           s.kind = InitSpec::Kind::file;
           s.path = std::string(arg);
         } else {
           return bad(key, v, "must be zeros, uniform:A or normal:S with A, S > 0, or file:PATH");
         }
         o.config.init = s;
         return Status::Ok();
       },
       [](const ShardConfig& c) { return to_string(c.init); }},
      {{"seed", "1", "seed of the uniform/normal initialisation (the same seed gives the same weights)"},
       true,
       false,
       [](std::string_view key, std::string_view v, LuOptions& o) -> Status {
         if (!parse_uint(v, o.config.seed)) return bad(key, v, "must be an unsigned integer");
         return Status::Ok();
       },
       [](const ShardConfig& c) { return std::to_string(c.seed); }},
      {{"mode", "async",
        "aggregation mode: async (every push is applied at once) or sync (BSP: per block and "
        "round the workers' gradients are averaged and applied once; a worker's READ of a block it "
        "pushed waits for that round) or ssp:K (every push applied at once; a worker's push waits "
        "while it is more than K pushes of a block ahead of the slowest live worker)"},
       true,
       false,
       [](std::string_view key, std::string_view v, LuOptions& o) -> Status {
         std::uint64_t k = 0;
         o.config.rounds.staleness = 0;
         if (v == "async") {
           o.config.rounds.mode = RoundPolicy::Mode::async;
         } else if (v == "sync") {
           o.config.rounds.mode = RoundPolicy::Mode::sync;
         } else if (v.starts_with("ssp:") && parse_uint(v.substr(4), k) && k <= 1000000) {
           o.config.rounds.mode = RoundPolicy::Mode::ssp;
           o.config.rounds.staleness = static_cast<std::uint32_t>(k);
         } else {
           return bad(key, v, "must be async, sync or ssp:K (K a whole number of pushes, 0..1000000)");
         }
         return Status::Ok();
       },
       [](const ShardConfig& c) { return to_string(c.rounds); }},
      round_key("workers", "1",
                "sync: the workers the first rounds wait for (the job's starting size); afterwards a round "
                "closes as soon as every worker that was live when it opened pushed it",
                &RoundPolicy::workers, 1, 4096),
      round_key("max_workers", "0",
                "sync: the most live workers; a newcomer beyond them is refused (NOT READY). 0: as many as "
                "workers=. Above workers=, worker hosts may join a running job (elastic membership)",
                &RoundPolicy::max_workers, 0, 4096),
      round_key("min_workers", "1",
                "sync: fewest live workers a round may close with; below it the grad LU "
                "answers NOT READY (ASC 0x04/0x03) instead of waiting",
                &RoundPolicy::min_workers, 1, 4096),
      round_key("straggler_ms", "2000",
                "sync: a round closes this many ms after its first push without the "
                "workers still missing (at least min_workers must have pushed)",
                &RoundPolicy::straggler_ms, 1, 3600000),
      round_key("worker_timeout_ms", "10000",
                "sync: a worker with no push for this long is dropped from the round "
                "membership; also the longest a command waits parked",
                &RoundPolicy::worker_timeout_ms, 100, 3600000),
      round_key("push_lead", "2",
                "sync: blocks a worker may have pushed into rounds still open beyond the worker with the "
                "fewest; its push of one more block waits (unanswered) until rounds close, so that every "
                "worker's flow into the shard moves at one pace (0: no limit)",
                &RoundPolicy::push_lead, 0, 1000000),
      {{"compress", "none",
        "mode=sync: the grad LU's compressed wire after the warm-up: none, sign1 (1 bit and one f32 scale per 256 "
        "elements, 28x fewer bytes than f32) or int8 (a byte and a scale per 256, 3.9x). A compressed round's push "
        "of a block is one WRITE of the compressed block at the start of the block's byte range; on an averaging "
        "shard its READ returns the round's average compressed the same way (the shard keeps the error feedback). "
        "See Compressed blocks"},
       true,
       false,
       [](std::string_view key, std::string_view v, LuOptions& o) -> Status {
         if (v == "none") {
           o.config.rounds.compress.reset();
           return Status::Ok();
         }
         const std::optional<CompressedFormat> f = parse_compressed_format(v);
         if (!f) return bad(key, v, "must be none, sign1 or int8");
         o.config.rounds.compress = f;
         return Status::Ok();
       },
       [](const ShardConfig& c) {
         return std::string(c.rounds.compress ? to_string(*c.rounds.compress) : std::string_view("none"));
       }},
      {{"compress_after", "0",
        "compress= only: rounds of each block pushed in full precision (the wire dtype) before the compressed ones "
        "(the warm-up; rounds counted since the shard opened or reset-rounds)"},
       true,
       false,
       [](std::string_view key, std::string_view v, LuOptions& o) -> Status {
         if (!parse_uint(v, o.config.rounds.compress_after) || o.config.rounds.compress_after > 1000000000)
           return bad(key, v, "must be a whole number of rounds from 0 to 1000000000");
         return Status::Ok();
       },
       [](const ShardConfig& c) { return std::to_string(c.rounds.compress_after); }},
      {{"device", "cpu",
        "where the weights live and the optimizer runs: cpu; gpu:N (CUDA GPU N: weights and "
        "state in GPU memory, READs from a pinned host mirror; refused when there is no such GPU "
        "or no driver); auto (gpu:0 when a GPU is usable, else cpu; the choice is logged)"},
       true,
       false,
       [](std::string_view key, std::string_view v, LuOptions& o) -> Status {
         if (v != "auto" && !parse_device(v)) return bad(key, v, "must be cpu, auto or gpu:N (N = 0, 1, ...)");
         o.config.device = std::string(v);
         return Status::Ok();
       },
       [](const ShardConfig& c) { return c.device; }},
      {{"checkpoint_s", "0", "seconds between periodic checkpoints (0: only on SYNCHRONIZE CACHE and close)"},
       true,
       false,
       [](std::string_view key, std::string_view v, LuOptions& o) -> Status {
         std::uint64_t n = 0;
         if (!parse_uint(v, n) || n > 86400 * 365) return bad(key, v, "must be whole seconds from 0 to 31536000");
         o.config.checkpoint_s = static_cast<std::uint32_t>(n);
         return Status::Ok();
       },
       [](const ShardConfig& c) { return std::to_string(c.checkpoint_s); }},
      {{"checkpoint_copy", "none",
        "an absolute path on other storage (an NFS mount) that every checkpoint is copied to, crash-safely, once "
        "written; a copy that fails is counted and logged and fails neither the checkpoint nor the command"},
       true,
       false,
       [](std::string_view key, std::string_view v, LuOptions& o) -> Status {
         if (v == "none")
           o.config.checkpoint_copy.clear();
         else if (v.starts_with('/'))
           o.config.checkpoint_copy = std::string(v);
         else
           return bad(key, v, kCheckpointCopyAllowed);
         return Status::Ok();
       },
       [](const ShardConfig& c) { return c.checkpoint_copy.empty() ? std::string("none") : c.checkpoint_copy; }},
      {{"claim_idle_s", "30",
        "seconds after its last command that a job with no session left keeps the shard before another job's job= "
        "control line may claim it without takeover (0: the claim never lapses; see Jobs and places)"},
       true,
       false,
       [](std::string_view key, std::string_view v, LuOptions& o) -> Status {
         std::uint64_t n = 0;
         if (!parse_uint(v, n) || n > 86400 * 365) return bad(key, v, "must be whole seconds from 0 to 31536000");
         o.config.claim_idle_s = static_cast<std::uint32_t>(n);
         return Status::Ok();
       },
       [](const ShardConfig& c) { return std::to_string(c.claim_idle_s); }},
  };
  return table;
}

const KeyDef* find_key(std::string_view name) {
  for (const auto& k : key_table())
    if (k.doc.name == name) return &k;
  return nullptr;
}

std::string known_keys() {
  std::string s;
  for (const auto& k : key_table()) s += (s.empty() ? "" : ", ") + std::string(k.doc.name);
  return s;
}

}  // namespace

std::string to_string(const InitSpec& s) {
  switch (s.kind) {
    case InitSpec::Kind::zeros:
      return "zeros";
    case InitSpec::Kind::uniform:
      return "uniform:" + format_float(static_cast<float>(s.scale));
    case InitSpec::Kind::normal:
      return "normal:" + format_float(static_cast<float>(s.scale));
    case InitSpec::Kind::file:
      return "file:" + s.path;
  }
  return "?";
}

Result<LuOptions> parse_lu_options(std::string_view bsopts, std::uint32_t lu_block_bytes) {
  LuOptions o;
  std::set<std::string_view> seen;
  while (!bsopts.empty()) {
    const auto semi = bsopts.find(';');
    const std::string_view item = trim_blanks(bsopts.substr(0, semi));
    bsopts = semi == std::string_view::npos ? std::string_view{} : bsopts.substr(semi + 1);
    if (item.empty()) continue;
    const auto eq = item.find('=');
    if (eq == std::string_view::npos)
      // Appended, not `"x" + std::string`: GCC 12 at -O3 reports a false -Wrestrict there (GCC PR 105329).
      return refuse(std::string("'").append(item).append("' is not key=value (separate options with ';')"));
    const std::string_view key = trim_blanks(item.substr(0, eq));
    const std::string_view value = trim_blanks(item.substr(eq + 1));
    const KeyDef* def = find_key(key);
    if (!def)
      // Its own code: the C boundary tells tgtadm this case apart ("unknown parameter").
      return Status::Error(StatusCode::unknown_option,
                           "unknown key '" + std::string(key) + "' (known: " + known_keys() + ")");
    if (!seen.insert(def->doc.name).second) return refuse("key '" + std::string(key) + "' given twice");
    if (Status applied = def->apply(key, value, o); !applied.ok()) return applied;
    if (def->shard_key) o.given.insert(std::string(key));
  }
  if (!seen.count("role")) return refuse("role= is required (grad, weights or status)");
  if (!o.admins.empty() && o.role != LuRole::status)
    return refuse(
        "admins= applies to the status LU (role=status), where control lines are written; this LU is "
        "role=" +
        std::string(to_string(o.role)));

  // Sizes the LU exposes must be whole LU blocks (tgt addresses by LBA) and whole elements.
  const ShardGeometry& g = o.config.geometry;
  const std::uint32_t esize = static_cast<std::uint32_t>(wire_size(g.dtype));
  if (o.given.count("size") && (g.bytes % lu_block_bytes || g.bytes % esize))
    return bad("size", format_byte_size(g.bytes),
               "must be a multiple of the LU block size (" + std::to_string(lu_block_bytes) + " bytes)");
  if (g.block_bytes % lu_block_bytes)
    return bad("block", format_byte_size(g.block_bytes),
               "must be a multiple of the LU block size (" + std::to_string(lu_block_bytes) + " bytes)");
  if (o.config.optimizer.nesterov && o.config.optimizer.momentum == 0) return refuse("nesterov=1 needs momentum > 0");
  if (o.config.rounds.min_workers > o.config.rounds.workers)
    return refuse("min_workers=" + std::to_string(o.config.rounds.min_workers) + " is more than workers=" +
                  std::to_string(o.config.rounds.workers) + " (min_workers must be <= workers)");
  if (o.config.rounds.max_workers != 0 && o.config.rounds.max_workers < o.config.rounds.workers)
    return refuse("max_workers=" + std::to_string(o.config.rounds.max_workers) + " is less than workers=" +
                  std::to_string(o.config.rounds.workers) + " (max_workers must be 0 or >= workers)");
  if (Status s = check_averaging(o.config); !s.ok()) return s;
  if (Status s = check_compression(o.config); !s.ok()) return s;
  return o;
}

Result<ShardConfig> merge_onto(const LuOptions& opts, const ShardConfig& existing, bool structural_only) {
  ShardConfig out = existing;
  for (const auto& key : opts.given) {
    const KeyDef* def = find_key(key);
    const std::string mine = def->show(opts.config);
    const std::string theirs = def->show(existing);
    if (mine == theirs) continue;
    if (structural_only && !def->structural) {
      LuOptions replaced;
      replaced.config = out;
      if (Status applied = def->apply(key, mine, replaced); !applied.ok()) return applied;
      out = replaced.config;
      continue;
    }
    return Status::Error(StatusCode::mismatch, key + "=" + mine + " differs from " + key + "=" + theirs);
  }
  if (Status s = check_averaging(out); !s.ok()) return s;
  if (Status s = check_compression(out); !s.ok()) return s;
  return out;
}

Status bad_checkpoint_copy(std::string_view value) { return bad("checkpoint_copy", value, kCheckpointCopyAllowed); }

const std::vector<OptionKey>& option_keys() {
  static const std::vector<OptionKey> keys = [] {
    std::vector<OptionKey> v;
    for (const auto& k : key_table()) v.push_back(k.doc);
    return v;
  }();
  return keys;
}

}  // namespace blockps

namespace blockps {
std::vector<std::pair<std::string, std::string>> shard_settings(const ShardConfig& c) {
  std::vector<std::pair<std::string, std::string>> settings;
  for (const auto& k : key_table()) {
    if (k.shard_key) settings.emplace_back(k.doc.name, k.show(c));
  }
  return settings;
}

std::string format_shard_options(const ShardConfig& c) {
  std::string s;
  // Appended, not `"x" + std::string`: GCC 12 at -O3 reports a false -Wrestrict there (GCC PR 105329).
  for (const auto& [key, value] : shard_settings(c)) {
    if (!s.empty()) s += ';';
    s.append(key).append("=").append(value);
  }
  return s;
}
}  // namespace blockps
