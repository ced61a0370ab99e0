// Plain-text tables for the CLI's reports (status, bench): columns sized to their widest cell, text left-aligned,
// numbers right-aligned, and the byte counts people read (1.5M rather than 1572864).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace blockps::cli {

class TextTable {
 public:
  enum class Align { left, right };
  struct Column {
    std::string heading;
    Align align = Align::right;
  };

  explicit TextTable(std::vector<Column> columns) : columns_(std::move(columns)) {}
  // A row of cells, one per column (missing cells are blank; extra cells are dropped).
  void add_row(std::vector<std::string> cells);
  // A rule (dashes across every column) before the next row, e.g. above a total.
  void add_rule() { rows_.push_back({}); }
  // Heading, rule, rows; two spaces between columns; no trailing blanks.
  void print(std::ostream& out) const;

 private:
  std::vector<Column> columns_;
  std::vector<std::vector<std::string>> rows_;  // an empty row is a rule
};

// 512 -> "512", 262144 -> "256K", 1572864 -> "1.5M", 1073741824 -> "1G" (binary units K, M, G, T; one decimal
// when not whole). Exact values use the cluster file's own spelling.
std::string format_bytes(std::uint64_t bytes);
// A number with `decimals` digits after the point ("12.50").
std::string format_fixed(double value, int decimals);

}  // namespace blockps::cli
