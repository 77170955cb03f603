#pragma once
// The columns of steps.csv and requests.csv (docs/schema.md), once: a name, a type and how each
// row gives its value. The CSV writers (report.cpp) and the Python package's DataFrames
// (python/src/frame.cpp) both read these tables, so the files and the frames never disagree on a
// column's name, order or type.
#include <cstdint>
#include <ostream>
#include <span>
#include <string>

#include "serving/replay/replayer.hpp"

namespace kvlab {

enum class ColumnType { f64, i64, text };

template <class Row>
struct RecordColumn {
  const char* name;
  ColumnType type;
  double (*f64)(const Row&) = nullptr;        ///< type f64
  std::int64_t (*i64)(const Row&) = nullptr;  ///< type i64
  std::string (*text)(const Row&) = nullptr;  ///< type text
};

/// steps.csv's columns, in the file's order.
[[nodiscard]] std::span<const RecordColumn<StepRecord>> step_columns() noexcept;
/// requests.csv's columns, in the file's order.
[[nodiscard]] std::span<const RecordColumn<RequestRecord>> request_columns() noexcept;

/// A request's status as requests.csv spells it: completed, rejected, truncated or failed.
[[nodiscard]] const char* status_name(RequestRecord::Status status) noexcept;

/// Writes the header and one line per row (doubles to 9 significant digits, as %.9g; text quoted when it
/// holds a comma, quote or newline).
template <class Row>
void write_csv_rows(std::ostream& os, std::span<const Row> rows, std::span<const RecordColumn<Row>> columns);

}  // namespace kvlab
