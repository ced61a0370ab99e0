// contract/byte_size.h: the one grammar of byte sizes (bsopts, cluster files, command lines): a whole number with
// an optional binary suffix K, M, G or T in either case, blanks around it ignored, everything else and overflow
// refused; and the spelling back with the largest suffix that divides exactly.
#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string_view>

#include "contract/byte_size.h"

namespace blockps {
namespace {

std::optional<std::uint64_t> parsed(std::string_view text) {
  std::uint64_t n = 12345;
  if (!parse_byte_size(text, n)) {
    EXPECT_EQ(n, 12345u) << "'" << text << "': a refusal leaves the output alone";
    return std::nullopt;
  }
  return n;
}

TEST(ParseByteSize, AWholeNumberOfBytes) {
  EXPECT_EQ(parsed("0"), 0u);
  EXPECT_EQ(parsed("512"), 512u);
  EXPECT_EQ(parsed("007"), 7u);
  EXPECT_EQ(parsed("18446744073709551615"), UINT64_MAX);
}

TEST(ParseByteSize, BinarySuffixesInEitherCase) {
  EXPECT_EQ(parsed("4K"), 4096u);
  EXPECT_EQ(parsed("4k"), 4096u);
  EXPECT_EQ(parsed("64M"), 64ull << 20);
  EXPECT_EQ(parsed("64m"), 64ull << 20);
  EXPECT_EQ(parsed("2G"), 2ull << 30);
  EXPECT_EQ(parsed("2g"), 2ull << 30);
  EXPECT_EQ(parsed("3T"), 3ull << 40);
  EXPECT_EQ(parsed("3t"), 3ull << 40);
  EXPECT_EQ(parsed("0K"), 0u);
}

TEST(ParseByteSize, BlanksAroundItButNotInside) {
  EXPECT_EQ(parsed(" \t256K\r "), 256u << 10);
  EXPECT_EQ(parsed("256 K"), std::nullopt);
  EXPECT_EQ(parsed("2 56"), std::nullopt);
}

TEST(ParseByteSize, RefusesAnythingElse) {
  for (std::string_view text : {"", " ", "K", "k", "4KB", "4KiB", "-4K", "+4K", "-1", "1.5M", "0x10", "1e3", "M4", "4P",
                                "4B", "four", "4K4", "4\n"})
    EXPECT_EQ(parsed(text), std::nullopt) << "'" << text << "'";
}

TEST(ParseByteSize, RefusesWhatOverflowsSixtyFourBits) {
  EXPECT_EQ(parsed("18446744073709551616"), std::nullopt);
  EXPECT_EQ(parsed("16777215T"), 16777215ull << 40);  // the largest T that fits
  EXPECT_EQ(parsed("16777216T"), std::nullopt);
  EXPECT_EQ(parsed("17179869183G"), 17179869183ull << 30);
  EXPECT_EQ(parsed("17179869184G"), std::nullopt);
  EXPECT_EQ(parsed("18014398509481984K"), std::nullopt);
}

TEST(FormatByteSize, TheLargestSuffixThatDividesExactly) {
  EXPECT_EQ(format_byte_size(0), "0");
  EXPECT_EQ(format_byte_size(512), "512");
  EXPECT_EQ(format_byte_size(1024), "1K");
  EXPECT_EQ(format_byte_size(1536), "1536");
  EXPECT_EQ(format_byte_size(3ull << 19), "1536K");
  EXPECT_EQ(format_byte_size(64ull << 20), "64M");
  EXPECT_EQ(format_byte_size(1ull << 30), "1G");
  EXPECT_EQ(format_byte_size(5ull << 40), "5T");
  EXPECT_EQ(format_byte_size(1ull << 50), "1024T");  // T is the largest suffix
}

TEST(FormatByteSize, ParsesBackToTheSameSize) {
  for (std::uint64_t bytes : std::initializer_list<std::uint64_t>{
           0, 1, 512, 4096, 1536, 3ull << 19, 64ull << 20, 7ull << 30, 1ull << 50, UINT64_MAX, UINT64_MAX - 1023}) {
    EXPECT_EQ(parsed(format_byte_size(bytes)), bytes) << format_byte_size(bytes);
  }
}

}  // namespace
}  // namespace blockps
