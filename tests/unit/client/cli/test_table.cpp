// client/cli/table.cpp: the CLI's plain-text tables (columns as wide as their widest cell, text left and numbers
// right, two spaces between, no trailing blanks, rules) and the byte counts and fixed-point numbers in their cells.
#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "client/cli/table.h"

namespace blockps::cli {
namespace {

std::string printed(const TextTable& table) {
  std::ostringstream out;
  table.print(out);
  return out.str();
}

TEST(TextTable, SizesColumnsToTheWidestCellAndAlignsTextLeftNumbersRight) {
  TextTable table({{"shard", TextTable::Align::left}, {"pushes"}, {"MB/s"}});
  table.add_row({"s0", "12", "1.5"});
  table.add_row({"shard-long", "3", "1024.0"});
  EXPECT_EQ(printed(table),
            "shard       pushes    MB/s\n"
            "----------  ------  ------\n"
            "s0              12     1.5\n"
            "shard-long       3  1024.0\n");
}

TEST(TextTable, ARuleSpansEveryColumnBeforeTheNextRow) {
  TextTable table({{"shard", TextTable::Align::left}, {"bytes"}});
  table.add_row({"a", "1"});
  table.add_row({"b", "22"});
  table.add_rule();
  table.add_row({"total", "23"});
  EXPECT_EQ(printed(table),
            "shard  bytes\n"
            "-----  -----\n"
            "a          1\n"
            "b         22\n"
            "-----  -----\n"
            "total     23\n");
}

TEST(TextTable, MissingCellsAreBlankExtraCellsDroppedAndNoLineEndsInBlanks) {
  TextTable table({{"name", TextTable::Align::left}, {"note", TextTable::Align::left}});
  table.add_row({"only-a-name"});
  table.add_row({"x", "y", "dropped"});
  EXPECT_EQ(printed(table),
            "name         note\n"
            "-----------  ----\n"
            "only-a-name\n"
            "x            y\n");
}

TEST(TextTable, WithoutRowsPrintsTheHeadingAndItsRule) {
  TextTable table({{"a"}, {"bb", TextTable::Align::left}});
  EXPECT_EQ(printed(table), "a  bb\n-  --\n");
}

TEST(FormatBytes, BelowAKibibyteInBytes) {
  EXPECT_EQ(format_bytes(0), "0");
  EXPECT_EQ(format_bytes(512), "512");
  EXPECT_EQ(format_bytes(1023), "1023");
}

TEST(FormatBytes, WholeBinaryUnitsWithoutADecimal) {
  EXPECT_EQ(format_bytes(1024), "1K");
  EXPECT_EQ(format_bytes(262144), "256K");
  EXPECT_EQ(format_bytes(1023ull << 10), "1023K");
  EXPECT_EQ(format_bytes(1ull << 20), "1M");
  EXPECT_EQ(format_bytes(1073741824), "1G");
  EXPECT_EQ(format_bytes(1ull << 40), "1T");
  EXPECT_EQ(format_bytes(3ull << 50), "3072T");  // T is the largest unit
}

TEST(FormatBytes, OneDecimalWhenNotWhole) {
  EXPECT_EQ(format_bytes(1536), "1.5K");
  EXPECT_EQ(format_bytes(1572864), "1.5M");
  EXPECT_EQ(format_bytes((5ull << 30) / 4), "1.2G");  // 1.25 rounds to even
  EXPECT_EQ(format_bytes(1025), "1.0K");              // not whole, so a decimal even where it rounds to .0
  EXPECT_EQ(format_bytes((1ull << 20) - 1), "1024.0K");
}

TEST(FormatFixed, DigitsAfterThePoint) {
  EXPECT_EQ(format_fixed(12.5, 2), "12.50");
  EXPECT_EQ(format_fixed(2.0 / 3.0, 3), "0.667");
  EXPECT_EQ(format_fixed(7.6, 0), "8");
  EXPECT_EQ(format_fixed(-0.25, 1), "-0.2");
}

}  // namespace
}  // namespace blockps::cli
