// contract/control_lines.h: the keywords of the control lines, the list a refusal names as known, and the grammar
// of job and model names (1 to 128 of A-Z a-z 0-9 . _ : @ / + -), with the rule a refusal quotes.
#include <gtest/gtest.h>

#include <string>
#include <string_view>

#include "contract/control_lines.h"

namespace blockps::control {
namespace {

TEST(ControlLines, TheKeywordsAndTheListOfThemARefusalGives) {
  EXPECT_EQ(kLr, "lr");
  EXPECT_EQ(kCheckpoint, "checkpoint");
  EXPECT_EQ(kResetRounds, "reset-rounds");
  EXPECT_EQ(kJob, "job");
  EXPECT_EQ(kTakeover, "takeover");
  EXPECT_EQ(kRelease, "release");
  EXPECT_EQ(kPlace, "place");
  EXPECT_EQ(kReplacePlace, "replace-place");
  // Every keyword is in the list, in the order above.
  std::size_t from = 0;
  for (std::string_view keyword : {kLr, kCheckpoint, kResetRounds, kJob, kTakeover, kRelease, kPlace, kReplacePlace}) {
    const std::size_t at = kKnown.find(keyword, from);
    ASSERT_NE(at, std::string_view::npos) << keyword;
    from = at + keyword.size();
  }
}

TEST(IsNameChar, LettersDigitsAndDotUnderscoreColonAtSlashPlusMinus) {
  const std::string_view allowed = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:@/+-";
  for (int c = 0; c < 256; ++c) {
    const char ch = static_cast<char>(c);
    EXPECT_EQ(is_name_char(ch), c != 0 && allowed.find(ch) != std::string_view::npos) << "character " << c;
  }
}

TEST(IsName, OneTo128NameCharacters) {
  EXPECT_TRUE(is_name("r"));
  EXPECT_TRUE(is_name("run7"));
  EXPECT_TRUE(is_name("m-3f9a2c01d4e5b677"));
  EXPECT_TRUE(is_name("user@host:job/7+a_b.c"));
  EXPECT_TRUE(is_name(std::string(kMaxNameBytes, 'a')));
  EXPECT_FALSE(is_name(std::string(kMaxNameBytes + 1, 'a')));
  EXPECT_FALSE(is_name(""));
}

TEST(IsName, RefusesBlanksSeparatorsAndOtherCharacters) {
  for (std::string_view name :
       {"run 7", " run7", "run7 ", "run\t7", "run7\n", "a=b", "a;b", "a,b", "é", "a*", "a#b", "a\\b", "'a'", "\"a\""})
    EXPECT_FALSE(is_name(name)) << "'" << name << "'";
  EXPECT_FALSE(is_name(std::string_view("a\0b", 3)));
}

TEST(NameRule, SaysWhatIsName) {
  EXPECT_EQ(kMaxNameBytes, 128u);
  EXPECT_EQ(kNameRule, "1 to 128 characters of A-Z a-z 0-9 . _ : @ / + -");
}

static_assert(is_name("job-1") && !is_name("job 1"), "usable at compile time");

}  // namespace
}  // namespace blockps::control
