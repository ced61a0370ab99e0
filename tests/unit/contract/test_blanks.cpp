// contract/blanks.h: the blanks every text grammar of the contract ignores (space, tab, a CRLF line's CR) and
// nothing else, trimmed at both ends only.
#include <gtest/gtest.h>

#include <string_view>

#include "contract/blanks.h"

namespace blockps {
namespace {

TEST(IsBlank, SpaceTabAndCarriageReturnOnly) {
  for (int c = 0; c < 256; ++c) {
    const char ch = static_cast<char>(c);
    EXPECT_EQ(is_blank(ch), ch == ' ' || ch == '\t' || ch == '\r') << "character " << c;
  }
}

TEST(TrimBlanks, BothEndsNotTheMiddle) {
  EXPECT_EQ(trim_blanks(" \t lr=0.1 \r"), "lr=0.1");
  EXPECT_EQ(trim_blanks("size = 64M"), "size = 64M");
  EXPECT_EQ(trim_blanks("\t a \t b \t"), "a \t b");
  EXPECT_EQ(trim_blanks("a"), "a");
}

TEST(TrimBlanks, AllBlanksOrNothingIsEmpty) {
  EXPECT_EQ(trim_blanks(""), "");
  EXPECT_EQ(trim_blanks(" \t\r \r\t"), "");
}

TEST(TrimBlanks, LeavesNewlinesAndOtherWhitespace) {
  EXPECT_EQ(trim_blanks("\nx\n"), "\nx\n");
  EXPECT_EQ(trim_blanks("\v\fx"), "\v\fx");
  EXPECT_EQ(trim_blanks(std::string_view("\0x\0", 3)), std::string_view("\0x\0", 3));
}

static_assert(trim_blanks("  k=v\r") == "k=v", "usable at compile time");

}  // namespace
}  // namespace blockps
