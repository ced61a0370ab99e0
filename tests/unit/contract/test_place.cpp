// contract/place.h: a shard's place "MODEL INDEX/COUNT LAYOUT", formatted, parsed back, and refused (as
// invalid_argument, naming the value, the reason and what is allowed) when it is anything else.
#include <gtest/gtest.h>

#include <string>

#include "contract/place.h"

namespace blockps {
namespace {

TEST(FormatPlace, ModelIndexSlashCountLayout) {
  EXPECT_EQ(format_place({"m-3f9a2c01d4e5b677", 0, 2, PlaceLayout::stripe}), "m-3f9a2c01d4e5b677 0/2 stripe");
  EXPECT_EQ(format_place({"run7", 5, 8, PlaceLayout::range}), "run7 5/8 range");
  EXPECT_EQ(to_string(PlaceLayout::stripe), "stripe");
  EXPECT_EQ(to_string(PlaceLayout::range), "range");
}

TEST(ParsePlace, WhatFormatPlaceWritesBackToThePlace) {
  for (const Place& p :
       {Place{"m", 0, 1, PlaceLayout::stripe}, Place{"a/b:c@d+e_f.g-h", 65535, 65536, PlaceLayout::range}}) {
    auto parsed = parse_place(format_place(p));
    ASSERT_TRUE(parsed.ok()) << parsed.message();
    EXPECT_EQ(parsed.value(), p);
  }
}

TEST(ParsePlace, BlanksBetweenAndAroundTheWords) {
  auto parsed = parse_place(" \tmodel\t 1/3  range \r");
  ASSERT_TRUE(parsed.ok()) << parsed.message();
  EXPECT_EQ(parsed.value(), (Place{"model", 1, 3, PlaceLayout::range}));
}

void expect_refused(const std::string& text, const std::string& why) {
  auto parsed = parse_place(text);
  ASSERT_FALSE(parsed.ok()) << "'" << text << "'";
  EXPECT_EQ(parsed.status().code(), StatusCode::invalid_argument);
  EXPECT_EQ(parsed.message(), "place '" + text + "': " + why +
                                  " (allowed: MODEL INDEX/COUNT LAYOUT, e.g. m-3f9a2c01d4e5b677 0/2 stripe; MODEL 1 "
                                  "to 128 characters of A-Z a-z 0-9 . _ : @ / + -, INDEX < COUNT <= 65536, LAYOUT "
                                  "stripe or range)");
}

TEST(ParsePlace, RefusesMoreThanThreeWords) {
  expect_refused("m 0/1 stripe extra", "more than three words");
  expect_refused("m 0/1 stripe stripe", "more than three words");
}

TEST(ParsePlace, RefusesAModelNameThatIsNotAName) {
  expect_refused("", "the model name is not allowed");
  expect_refused("m=1 0/1 stripe", "the model name is not allowed");
  expect_refused(std::string(129, 'm') + " 0/1 stripe", "the model name is not allowed");
}

TEST(ParsePlace, RefusesAPositionWithoutASlashOrWithoutWholeNumbers) {
  expect_refused("m", "no INDEX/COUNT");
  expect_refused("m 0 stripe", "no INDEX/COUNT");
  expect_refused("m 0-1 stripe", "no INDEX/COUNT");
  for (const char* position : {"/1", "0/", "/", "a/1", "0/b", "-1/2", "0/+2", "0.0/1", "0/1/2", "0x1/2"})
    expect_refused(std::string("m ") + position + " stripe", "INDEX/COUNT are not whole numbers");
  expect_refused("m 1 /2 stripe", "more than three words");
}

TEST(ParsePlace, RefusesAnIndexOrCountOutOfRange) {
  expect_refused("m 0/0 stripe", "INDEX/COUNT out of range");
  expect_refused("m 2/2 stripe", "INDEX/COUNT out of range");
  expect_refused("m 3/2 stripe", "INDEX/COUNT out of range");
  expect_refused("m 0/65537 stripe", "INDEX/COUNT out of range");
  expect_refused("m 0/4294967297 stripe", "INDEX/COUNT out of range");                     // not wrapped into 32 bits
  expect_refused("m 0/99999999999999999999 stripe", "INDEX/COUNT are not whole numbers");  // over 64 bits
}

TEST(ParsePlace, RefusesALayoutOtherThanStripeOrRange) {
  expect_refused("m 0/1", "the layout is not stripe or range");
  expect_refused("m 0/1 Stripe", "the layout is not stripe or range");
  expect_refused("m 0/1 striped", "the layout is not stripe or range");
}

}  // namespace
}  // namespace blockps
