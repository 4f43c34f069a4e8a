#include "experiments/record/csv.h"

#include <cmath>
#include <limits>
#include <sstream>

#include <gtest/gtest.h>

#include "core/error.h"

namespace asgd::experiments {
namespace {

TEST(Csv, CellsRoundTripFloat32AndSpellOutSpecials) {
  const float x = 0.1f;
  EXPECT_EQ(static_cast<float>(std::stod(CsvCell(static_cast<double>(x)))), x);
  EXPECT_EQ(CsvCell(std::numeric_limits<double>::quiet_NaN()), "nan");
  EXPECT_EQ(CsvCell(std::numeric_limits<double>::infinity()), "inf");
  EXPECT_EQ(CsvCell(int64_t{-42}), "-42");
  EXPECT_EQ(CsvCell("plain"), "plain");
  EXPECT_EQ(CsvCell("a,b"), "\"a,b\"");
  EXPECT_EQ(CsvCell("say \"hi\""), "\"say \"\"hi\"\"\"");
}

TEST(Csv, WriterWritesHeaderThenRowsAndParsesBack) {
  std::ostringstream out;
  CsvWriter w(out, {"name", "value"});
  w.Write("x,y", 1.5);
  w.Write("z", int64_t{3});
  EXPECT_EQ(w.rows(), 2);
  std::istringstream in(out.str());
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(ParseCsvLine(line), (std::vector<std::string>{"name", "value"}));
  std::getline(in, line);
  EXPECT_EQ(ParseCsvLine(line), (std::vector<std::string>{"x,y", "1.5"}));
  std::getline(in, line);
  EXPECT_EQ(ParseCsvLine(line), (std::vector<std::string>{"z", "3"}));
}

TEST(Csv, RowOfTheWrongWidthIsABug) {
  std::ostringstream out;
  CsvWriter w(out, {"a", "b"});
  EXPECT_THROW(w.WriteRow({"1"}), InvariantError);
}

}  // namespace
}  // namespace asgd::experiments
