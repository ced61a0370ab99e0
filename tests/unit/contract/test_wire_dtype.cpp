// contract/wire_dtype.h: the wire's element formats, their sizes and names, and the names parsed back.
#include <gtest/gtest.h>

#include <cstdint>
#include <optional>

#include "contract/wire_dtype.h"

namespace blockps {
namespace {

TEST(WireDtype, SizesNamesAndTheValuesTheWireAndCheckpointsCarry) {
  EXPECT_EQ(wire_size(WireDtype::f32), 4u);
  EXPECT_EQ(wire_size(WireDtype::bf16), 2u);
  EXPECT_EQ(wire_size(WireDtype::f16), 2u);
  EXPECT_EQ(to_string(WireDtype::f32), "f32");
  EXPECT_EQ(to_string(WireDtype::bf16), "bf16");
  EXPECT_EQ(to_string(WireDtype::f16), "f16");
  EXPECT_EQ(static_cast<std::uint8_t>(WireDtype::f32), 0);
  EXPECT_EQ(static_cast<std::uint8_t>(WireDtype::bf16), 1);
  EXPECT_EQ(static_cast<std::uint8_t>(WireDtype::f16), 2);
}

TEST(WireDtype, AValueOutsideTheEnumHasNoName) { EXPECT_EQ(to_string(static_cast<WireDtype>(7)), "?"); }

TEST(ParseWireDtype, EachNameBackToItsDtype) {
  for (WireDtype d : {WireDtype::f32, WireDtype::bf16, WireDtype::f16}) EXPECT_EQ(parse_wire_dtype(to_string(d)), d);
}

TEST(ParseWireDtype, NothingElse) {
  for (const char* other : {"", "F32", "float32", "fp32", "f64", "bf16 ", "fp16", "half", "bfloat16", "?", "f8"})
    EXPECT_EQ(parse_wire_dtype(other), std::nullopt) << "'" << other << "'";
}

static_assert(parse_wire_dtype("bf16") == WireDtype::bf16 && wire_size(WireDtype::f16) == 2, "compile time");

}  // namespace
}  // namespace blockps
