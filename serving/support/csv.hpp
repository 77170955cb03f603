#pragma once
// Splitting a line of CSV into its fields, the one way kvlab reads CSV (traces, sweep points).
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace kvlab {

/// A line that is not CSV (RFC 4180): a quote inside an unquoted field, text after a closing quote,
/// or a quoted field left open.
struct CsvError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// The fields of one CSV line, parsed by libcsv (RFC 4180): a field in double quotes may hold commas
/// and doubled quotes ("a ""b"", c" is `a "b", c`); spaces and tabs around a field are dropped. An
/// empty line is one empty field. Throws CsvError on a line that is not CSV.
[[nodiscard]] std::vector<std::string> csv_fields(std::string_view line);

}  // namespace kvlab
