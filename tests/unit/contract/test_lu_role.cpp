// contract/lu_role.h: the three LUs of a shard, each with its name, its LUN and its INQUIRY product id, and the
// names parsed back to roles.
#include <gtest/gtest.h>

#include <optional>
#include <set>
#include <string>

#include "contract/lu_role.h"

namespace blockps {
namespace {

TEST(LuRole, TheFactsOfEachRole) {
  EXPECT_EQ(to_string(LuRole::grad), "grad");
  EXPECT_EQ(facts(LuRole::grad).lun, 1);
  EXPECT_EQ(facts(LuRole::grad).product_id, "BLOCKPS-GRAD");
  EXPECT_EQ(to_string(LuRole::weights), "weights");
  EXPECT_EQ(facts(LuRole::weights).lun, 2);
  EXPECT_EQ(facts(LuRole::weights).product_id, "BLOCKPS-WEIGHTS");
  EXPECT_EQ(to_string(LuRole::status), "status");
  EXPECT_EQ(facts(LuRole::status).lun, 3);
  EXPECT_EQ(facts(LuRole::status).product_id, "BLOCKPS-STATUS");
}

TEST(LuRole, NamesLunsAndProductIdsTellTheRolesApart) {
  std::set<std::string> names, products;
  std::set<int> luns;
  for (const LuRoleFacts& f : kLuRoles) {
    EXPECT_EQ(facts(f.role).name, f.name);  // indexed by role
    names.emplace(f.name);
    products.emplace(f.product_id);
    luns.insert(f.lun);
    EXPECT_LE(f.product_id.size(), 16u) << f.product_id << ": INQUIRY's product id is 16 bytes";
  }
  EXPECT_EQ(names.size(), 3u);
  EXPECT_EQ(products.size(), 3u);
  EXPECT_EQ(luns.size(), 3u);
}

TEST(ParseLuRole, EachNameBackToItsRole) {
  for (const LuRoleFacts& f : kLuRoles) EXPECT_EQ(parse_lu_role(f.name), f.role);
}

TEST(ParseLuRole, NothingElse) {
  for (const char* other :
       {"", "Grad", "GRAD", "grad ", " grad", "gradient", "weight", "stat", "1", "lun1", "BLOCKPS-GRAD"})
    EXPECT_EQ(parse_lu_role(other), std::nullopt) << "'" << other << "'";
}

static_assert(parse_lu_role("status") == LuRole::status && !parse_lu_role("x"), "usable at compile time");

}  // namespace
}  // namespace blockps
