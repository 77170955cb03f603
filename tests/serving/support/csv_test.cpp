// The one CSV reader (libcsv behind csv_fields): quoting, spaces, empty fields, malformed lines.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "serving/report/report.hpp"
#include "serving/support/csv.hpp"

namespace kvlab {
namespace {

using Fields = std::vector<std::string>;

TEST(CsvFields, SplitsAtCommasAndDropsTheSpacesAroundAField) {
  EXPECT_EQ(csv_fields("a,b,c"), (Fields{"a", "b", "c"}));
  EXPECT_EQ(csv_fields("  a , b\t,c  "), (Fields{"a", "b", "c"}));
  EXPECT_EQ(csv_fields("2023-11-16 18:15:46.6805900,12,3"), (Fields{"2023-11-16 18:15:46.6805900", "12", "3"}));
}

TEST(CsvFields, AQuotedFieldHoldsCommasAndDoubledQuotes) {
  EXPECT_EQ(csv_fields(R"("a, b",c)"), (Fields{"a, b", "c"}));
  EXPECT_EQ(csv_fields(R"("say ""hi""",x)"), (Fields{R"(say "hi")", "x"}));
  EXPECT_EQ(csv_fields(R"("  kept  ",y)"), (Fields{"  kept  ", "y"})) << "spaces inside quotes are the field's";
}

TEST(CsvFields, EmptyFieldsAndAnEmptyLine) {
  EXPECT_EQ(csv_fields("a,,b"), (Fields{"a", "", "b"}));
  EXPECT_EQ(csv_fields(","), (Fields{"", ""}));
  EXPECT_EQ(csv_fields(""), (Fields{""}));
  EXPECT_EQ(csv_fields(R"("")"), (Fields{""}));
}

TEST(CsvFields, AStrayOrUnterminatedQuoteIsAnError) {
  EXPECT_THROW((void)csv_fields(R"("open,1,2)"), CsvError);
  EXPECT_THROW((void)csv_fields(R"(a,"b)"), CsvError);
  EXPECT_THROW((void)csv_fields(R"({"timestamp": 1})"), CsvError) << "a JSON line is not CSV";
  EXPECT_THROW((void)csv_fields(R"("a"b,c)"), CsvError) << "text after the closing quote";
  try {
    (void)csv_fields(R"("x)");
    FAIL() << "no error";
  } catch (const CsvError& e) {
    EXPECT_NE(std::string(e.what()).find("unterminated quoted field"), std::string::npos) << e.what();
  }
}

/// What kvlab writes (report's csv_field quotes where needed) reads back as it was.
TEST(CsvFields, ReadsBackWhatCsvFieldWrites) {
  const Fields values{"plain", "with, comma", R"(with "quotes")", "", "azure trace x.csv: 19366 requests, mean 1154.7"};
  std::string line;
  for (std::size_t i = 0; i < values.size(); ++i) line += (i ? "," : "") + csv_field(values[i]);
  EXPECT_EQ(csv_fields(line), values);
}

}  // namespace
}  // namespace kvlab
