#include "serving/support/csv.hpp"

#include <csv.h>

namespace kvlab {

namespace {

void on_field(void* text, std::size_t size, void* out) {
  static_cast<std::vector<std::string>*>(out)->emplace_back(static_cast<const char*>(text), size);
}

void on_row_end(int /*terminator*/, void* /*out*/) {}

/// libcsv's parser, freed on every path.
struct Parser {
  csv_parser p{};
  Parser() {
    if (csv_init(&p, CSV_STRICT | CSV_STRICT_FINI) != 0) throw CsvError("cannot start the CSV parser");
  }
  ~Parser() { csv_free(&p); }
  Parser(const Parser&) = delete;
  Parser& operator=(const Parser&) = delete;
};

}  // namespace

std::vector<std::string> csv_fields(std::string_view line) {
  std::vector<std::string> out;
  Parser parser;
  const std::size_t parsed = csv_parse(&parser.p, line.data(), line.size(), on_field, on_row_end, &out);
  if (parsed != line.size() || csv_fini(&parser.p, on_field, on_row_end, &out) != 0) {
    throw CsvError("not CSV: a stray quote or an unterminated quoted field");
  }
  if (out.empty()) out.emplace_back();  // an empty line: one empty field
  return out;
}

}  // namespace kvlab
