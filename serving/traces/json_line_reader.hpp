#pragma once
// Reads one line of a JSON-lines trace: a JSON object whose top-level keys a format names in a
// table of JsonFields, through nlohmann-json's SAX interface (no DOM). Every problem becomes a
// TraceError naming the file, the line, the key and, for syntax errors, the column. Internal to
// the trace reader; the formats using it are in trace_formats_jsonl.cpp.
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "serving/traces/trace_text.hpp"

namespace kvlab::trace_detail {

/// A top-level key of a JSON-lines format.
struct JsonField {
  enum Kind {
    tokens,   ///< a token count (parse_tokens)
    time,     ///< a time >= 0 in `unit` (parse_time)
    int64s,   ///< an array of 64-bit integers
    int32s,   ///< an array of integers in [0, INT32_MAX] (token ids)
    counted,  ///< an array whose elements are only counted
  };
  Kind kind;
  std::string_view name;
  bool required;
  const char* unit = nullptr;
};

inline constexpr std::size_t kMaxJsonFields = 5;  ///< fields a format may name

/// One line's values, by index in the format's field list.
struct JsonValues {
  std::array<bool, kMaxJsonFields> seen{};
  std::array<std::int64_t, kMaxJsonFields> integer{};  ///< tokens; a counted array's length
  std::array<double, kMaxJsonFields> time{};
  std::vector<std::int64_t> int64s;  ///< the int64s field's elements (a format has at most one)
  std::vector<std::int32_t> int32s;  ///< the int32s field's elements (a format has at most one)
};

/// Reads one JSON-lines record (`line` is not blank) into `out` (its `seen` and arrays are reset;
/// `out` may be reused line after line): a fast pass, and at a problem a tracked one for the exact
/// message. Fails at a missing required field.
void read_json_line(std::string_view line, const At& at, std::span<const JsonField> fields, JsonValues& out);

}  // namespace kvlab::trace_detail
