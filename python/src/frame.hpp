// Records (steps, requests) as columns for a pandas DataFrame: one numpy array per numeric column
// and a list of str per text column, named and typed by the same tables the CSV writers use
// (serving/report/record_columns.hpp).
#pragma once

#include <nanobind/nanobind.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "serving/report/record_columns.hpp"

namespace kvlab::python {

struct FrameColumn {
  std::string name;
  ColumnType type = ColumnType::f64;
  std::vector<double> f64;
  std::vector<std::int64_t> i64;
  std::vector<std::string> text;
};
/// Columns in the CSV file's order. Built without the GIL; turned into Python objects with it.
using Frame = std::vector<FrameColumn>;

template <class Row>
[[nodiscard]] Frame make_frame(std::span<const Row> rows, std::span<const RecordColumn<Row>> columns) {
  Frame frame;
  frame.reserve(columns.size());
  for (const RecordColumn<Row>& c : columns) {
    FrameColumn& col = frame.emplace_back(FrameColumn{c.name, c.type, {}, {}, {}});
    (c.type == ColumnType::f64   ? col.f64.reserve(rows.size())
     : c.type == ColumnType::i64 ? col.i64.reserve(rows.size())
                                 : col.text.reserve(rows.size()));
    for (const Row& r : rows) switch (c.type) {
        case ColumnType::f64:
          col.f64.push_back(c.f64(r));
          break;
        case ColumnType::i64:
          col.i64.push_back(c.i64(r));
          break;
        case ColumnType::text:
          col.text.push_back(c.text(r));
          break;
      }
  }
  return frame;
}

/// {name: numpy.ndarray (float64 or int64) or list[str]}, in column order; the frame's vectors move
/// into the arrays (no copy). Needs the GIL.
[[nodiscard]] nanobind::dict to_python(Frame&& frame);

}  // namespace kvlab::python
