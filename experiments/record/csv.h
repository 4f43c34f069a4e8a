// CSV output in long (tidy) form: a header row, then one row per observation.
//
// A CsvWriter writes to an injected stream (so tests capture it) and flushes after every
// row, so a run that stops abruptly keeps every row written so far. Numbers are written
// with enough digits to round-trip float32 values; text cells are quoted when needed.
//
// Thread safety: not thread-safe; one writer per file, used by one thread (or under a
// lock owned by the caller).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace asgd::experiments {

// Formatting of one cell.
std::string CsvCell(double v);  // %.9g; "nan"/"inf" spelled out
std::string CsvCell(int64_t v);
std::string CsvCell(std::string_view text);  // quoted if it holds , " or a newline
inline std::string CsvCell(int v) { return CsvCell(static_cast<int64_t>(v)); }
inline std::string CsvCell(uint64_t v) { return CsvCell(static_cast<int64_t>(v)); }
inline std::string CsvCell(const char* text) { return CsvCell(std::string_view(text)); }
inline std::string CsvCell(const std::string& text) { return CsvCell(std::string_view(text)); }

class CsvWriter {
 public:
  // Writes the header unless write_header is false (appending to an existing file).
  CsvWriter(std::ostream& out, std::vector<std::string> columns, bool write_header = true);

  const std::vector<std::string>& columns() const { return columns_; }

  // REQUIRES: cells.size() == columns().size() (throws InvariantError otherwise).
  void WriteRow(const std::vector<std::string>& cells);

  template <typename... Args>
  void Write(const Args&... args) {
    WriteRow({CsvCell(args)...});
  }

  int64_t rows() const { return rows_; }

 private:
  std::ostream& out_;
  std::vector<std::string> columns_;
  int64_t rows_ = 0;
};

// Splits one CSV line into cells (handles quotes). For tests and `asgd compare`.
std::vector<std::string> ParseCsvLine(std::string_view line);

}  // namespace asgd::experiments
