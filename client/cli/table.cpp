#include "client/cli/table.h"

#include <algorithm>
#include <cstdio>

namespace blockps::cli {

void TextTable::add_row(std::vector<std::string> cells) {
  cells.resize(columns_.size());
  rows_.push_back(std::move(cells));
}

void TextTable::print(std::ostream& out) const {
  std::vector<std::size_t> width(columns_.size());
  for (std::size_t c = 0; c < columns_.size(); ++c) {
    width[c] = columns_[c].heading.size();
    for (const auto& row : rows_)
      if (!row.empty()) width[c] = std::max(width[c], row[c].size());
  }
  const auto print_cells = [&](const std::vector<std::string>& cells) {
    std::string line;
    for (std::size_t c = 0; c < columns_.size(); ++c) {
      if (c != 0) line += "  ";
      const std::string pad(width[c] - cells[c].size(), ' ');
      line += columns_[c].align == Align::right ? pad + cells[c] : cells[c] + pad;
    }
    line.erase(line.find_last_not_of(' ') + 1);
    out << line << "\n";
  };
  std::vector<std::string> headings;
  headings.reserve(columns_.size());
  for (const Column& column : columns_) headings.push_back(column.heading);
  print_cells(headings);
  std::vector<std::string> rule;
  rule.reserve(width.size());
  for (std::size_t w : width) rule.emplace_back(w, '-');
  print_cells(rule);
  for (const auto& row : rows_) print_cells(row.empty() ? rule : row);
}

std::string format_bytes(std::uint64_t bytes) {
  static constexpr const char* kUnits[] = {"K", "M", "G", "T"};
  if (bytes < 1024) return std::to_string(bytes);
  int unit = 0;
  std::uint64_t scale = 1024;
  while (unit < 3 && bytes >= scale * 1024) {
    scale *= 1024;
    ++unit;
  }
  if (bytes % scale == 0) return std::to_string(bytes / scale) + kUnits[unit];
  return format_fixed(static_cast<double>(bytes) / static_cast<double>(scale), 1) + kUnits[unit];
}

std::string format_fixed(double value, int decimals) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", decimals, value);
  return text;
}

}  // namespace blockps::cli
