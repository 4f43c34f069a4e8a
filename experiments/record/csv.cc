#include "experiments/record/csv.h"

#include <cmath>
#include <cstdio>

#include "core/check.h"

namespace asgd::experiments {

std::string CsvCell(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.9g", v);
  return buf;
}

std::string CsvCell(int64_t v) { return std::to_string(v); }

std::string CsvCell(std::string_view text) {
  if (text.find_first_of(",\"\n\r") == std::string_view::npos) return std::string(text);
  std::string out = "\"";
  for (char c : text) {
    if (c == '"') out += '"';
    out += c;
  }
  out += '"';
  return out;
}

CsvWriter::CsvWriter(std::ostream& out, std::vector<std::string> columns, bool write_header)
    : out_(out), columns_(std::move(columns)) {
  if (write_header) {
    std::vector<std::string> cells;
    for (const auto& c : columns_) cells.push_back(CsvCell(c));
    for (std::size_t i = 0; i < cells.size(); ++i) out_ << (i ? "," : "") << cells[i];
    out_ << '\n';
    out_.flush();
  }
}

void CsvWriter::WriteRow(const std::vector<std::string>& cells) {
  ASGD_CHECK_EQ(cells.size(), columns_.size(), "cells in a CSV row vs columns");
  for (std::size_t i = 0; i < cells.size(); ++i) out_ << (i ? "," : "") << cells[i];
  out_ << '\n';
  out_.flush();
  ++rows_;
}

std::vector<std::string> ParseCsvLine(std::string_view line) {
  std::vector<std::string> out;
  std::string cell;
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    char c = line[i];
    if (quoted) {
      if (c == '"') {
        if (i + 1 < line.size() && line[i + 1] == '"') {
          cell += '"';
          ++i;
        } else {
          quoted = false;
        }
      } else {
        cell += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      out.push_back(std::move(cell));
      cell.clear();
    } else if (c != '\r') {
      cell += c;
    }
  }
  out.push_back(std::move(cell));
  return out;
}

}  // namespace asgd::experiments
