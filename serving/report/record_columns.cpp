#include "serving/report/record_columns.hpp"

#include <array>
#include <charconv>

#include "serving/report/report.hpp"

namespace kvlab {

namespace {

using Step = RecordColumn<StepRecord>;
using Req = RecordColumn<RequestRecord>;
constexpr ColumnType f64 = ColumnType::f64, i64 = ColumnType::i64, text = ColumnType::text;

// clang-format off
const std::array kStepColumns = {
    Step{"time_s", f64, [](const StepRecord& r) { return r.time_s; }},
    Step{"duration_s", f64, [](const StepRecord& r) { return r.duration_s; }},
    Step{"running", i64, nullptr, [](const StepRecord& r) -> std::int64_t { return r.running; }},
    Step{"waiting", i64, nullptr, [](const StepRecord& r) -> std::int64_t { return r.waiting; }},
    Step{"token_states_frac", f64, [](const StepRecord& r) { return r.fractions.token_states; }},
    Step{"reserved_frac", f64, [](const StepRecord& r) { return r.fractions.reserved; }},
    Step{"internal_fragmentation_frac", f64, [](const StepRecord& r) { return r.fractions.internal_fragmentation; }},
    Step{"external_fragmentation_frac", f64, [](const StepRecord& r) { return r.fractions.external_fragmentation; }},
    Step{"free_frac", f64, [](const StepRecord& r) { return r.fractions.free; }},
    Step{"allocated_bytes", i64, nullptr, [](const StepRecord& r) { return static_cast<std::int64_t>(r.allocated_bytes); }},
    Step{"kernel_s", f64, [](const StepRecord& r) { return r.kernel_s; }},
    Step{"prepare_s", f64, [](const StepRecord& r) { return r.prepare_s; }},
    Step{"mapping_s", f64, [](const StepRecord& r) { return r.mapping_s; }},
    Step{"linear_s", f64, [](const StepRecord& r) { return r.parts.linear; }},
    Step{"attention_s", f64, [](const StepRecord& r) { return r.parts.attention; }},
    Step{"cpu_s", f64, [](const StepRecord& r) { return r.parts.cpu; }},
    Step{"transfer_s", f64, [](const StepRecord& r) { return r.parts.transfer; }},
    Step{"copy_s", f64, [](const StepRecord& r) { return r.parts.copy; }},
    Step{"held_bytes", i64, nullptr, [](const StepRecord& r) { return static_cast<std::int64_t>(r.held_bytes); }},
    Step{"floor_bytes", i64, nullptr, [](const StepRecord& r) { return static_cast<std::int64_t>(r.floor_bytes); }},
};

const std::array kRequestColumns = {
    Req{"id", i64, nullptr, [](const RequestRecord& r) { return r.id; }},
    Req{"arrival_s", f64, [](const RequestRecord& r) { return r.arrival_s; }},
    Req{"first_scheduled_s", f64, [](const RequestRecord& r) { return r.first_scheduled_s; }},
    Req{"first_token_s", f64, [](const RequestRecord& r) { return r.first_token_s; }},
    Req{"finish_s", f64, [](const RequestRecord& r) { return r.finish_s; }},
    Req{"prompt_tokens", i64, nullptr, [](const RequestRecord& r) { return r.prompt_tokens; }},
    Req{"output_tokens", i64, nullptr, [](const RequestRecord& r) { return r.output_tokens; }},
    Req{"generated_tokens", i64, nullptr, [](const RequestRecord& r) { return r.generated_tokens; }},
    Req{"preemptions", i64, nullptr, [](const RequestRecord& r) -> std::int64_t { return r.preemptions; }},
    Req{"status", text, nullptr, nullptr, [](const RequestRecord& r) { return std::string(status_name(r.status)); }},
    Req{"reason", text, nullptr, nullptr, [](const RequestRecord& r) { return r.reason; }},
};
// clang-format on

}  // namespace

std::span<const RecordColumn<StepRecord>> step_columns() noexcept { return kStepColumns; }
std::span<const RecordColumn<RequestRecord>> request_columns() noexcept { return kRequestColumns; }

const char* status_name(RequestRecord::Status status) noexcept {
  switch (status) {
    case RequestRecord::Status::rejected:
      return "rejected";
    case RequestRecord::Status::completed:
      return "completed";
    case RequestRecord::Status::failed:
      return "failed";
    case RequestRecord::Status::truncated_completed:
      break;
  }
  return "truncated";
}

template <class Row>
void write_csv_rows(std::ostream& os, std::span<const Row> rows, std::span<const RecordColumn<Row>> columns) {
  for (std::size_t c = 0; c < columns.size(); ++c) os << (c > 0 ? "," : "") << columns[c].name;
  os << '\n';
  for (const Row& row : rows) {
    for (std::size_t c = 0; c < columns.size(); ++c) {
      if (c > 0) os << ',';
      const RecordColumn<Row>& col = columns[c];
      switch (col.type) {
        case ColumnType::f64: {
          // std::to_chars prints what printf's %.9g (the stream's precision 9) prints, without
          // printf: in a process where a library registered printf handlers (the Python package's,
          // where numpy loads libquadmath) every printf takes glibc's slow positional path.
          std::array<char, 32> text{};
          const auto [end, ec] =
              std::to_chars(text.data(), text.data() + text.size(), col.f64(row), std::chars_format::general, 9);
          os.write(text.data(), end - text.data());
          break;
        }
        case ColumnType::i64:
          os << col.i64(row);
          break;
        case ColumnType::text:
          os << csv_field(col.text(row));
          break;
      }
    }
    os << '\n';
  }
}

template void write_csv_rows(std::ostream&, std::span<const StepRecord>, std::span<const RecordColumn<StepRecord>>);
template void write_csv_rows(std::ostream&, std::span<const RequestRecord>,
                             std::span<const RecordColumn<RequestRecord>>);

}  // namespace kvlab
