// The worker-PS contract: the three LUs of a shard. Header-only and dependency-free, so that the tgt module and
// the client library (which links nothing of the server) include the same definition (docs/ARCHITECTURE.md,
// "The contract between worker and PS").
#pragma once

#include <array>
#include <optional>
#include <string_view>

namespace blockps {

/// What an LU of a shard serves: a WRITE of `grad` is a push and its READ a pull, `weights` is read and
/// assigned, `status` carries the status page (READ) and control lines (WRITE).
enum class LuRole { grad, weights, status };

/// One role's facts: its name (bsopts role=, cluster files), the LUN a shard's config gives it
/// (configs/*.conf, a cluster file's default), and the INQUIRY product id hosts tell the LUs apart by.
struct LuRoleFacts {
  LuRole role;
  std::string_view name;
  int lun;
  std::string_view product_id;
};

inline constexpr std::array<LuRoleFacts, 3> kLuRoles = {{
    {LuRole::grad, "grad", 1, "BLOCKPS-GRAD"},
    {LuRole::weights, "weights", 2, "BLOCKPS-WEIGHTS"},
    {LuRole::status, "status", 3, "BLOCKPS-STATUS"},
}};

constexpr const LuRoleFacts& facts(LuRole role) { return kLuRoles[static_cast<std::size_t>(role)]; }
constexpr std::string_view to_string(LuRole role) { return facts(role).name; }

/// The role named `name` ("grad", "weights", "status"); nullopt for any other text.
constexpr std::optional<LuRole> parse_lu_role(std::string_view name) {
  for (const LuRoleFacts& f : kLuRoles)
    if (f.name == name) return f.role;
  return std::nullopt;
}

static_assert(facts(LuRole::grad).role == LuRole::grad && facts(LuRole::weights).role == LuRole::weights &&
                  facts(LuRole::status).role == LuRole::status,
              "kLuRoles is indexed by LuRole");

}  // namespace blockps
