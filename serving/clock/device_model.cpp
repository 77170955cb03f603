#include "serving/support/text.hpp"
#include "serving/clock/device_model.hpp"

#include "serving/support/input_file.hpp"

#include <array>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "alloc/core/error.hpp"
#include "serving/devices/embedded_device_models.hpp"

namespace kvlab {

double SizeTable::at(std::int64_t size) const {
  KVLAB_EXPECTS(!points.empty(), "an empty size table has no value");
  KVLAB_EXPECTS(size > 0, "sizes are positive");
  const auto hi = points.lower_bound(size);
  if (hi == points.end()) return std::prev(hi)->second;
  if (hi->first == size || hi == points.begin()) return hi->second;
  const auto lo = std::prev(hi);
  const double x0 = std::log2(static_cast<double>(lo->first)), x1 = std::log2(static_cast<double>(hi->first));
  const double t = (std::log2(static_cast<double>(size)) - x0) / (x1 - x0);
  return lo->second + t * (hi->second - lo->second);
}

namespace {

constexpr int kFormat = 1;

struct Scalar {
  const char* key;
  double DeviceModel::*field;
  double min;             ///< inclusive
  double max;             ///< inclusive
  bool optional = false;  ///< may be left out (the field keeps its default)
};

constexpr double kInf = 1e300;
const std::array<Scalar, 18> kScalars = {{
    {"memory_bandwidth", &DeviceModel::memory_bandwidth, 1e6, kInf},
    {"peak_flops", &DeviceModel::peak_flops, 1e6, kInf},
    {"linear_bandwidth_efficiency", &DeviceModel::linear_bandwidth_efficiency, 1e-3, 2},
    {"linear_flops_efficiency", &DeviceModel::linear_flops_efficiency, 1e-3, 2},
    {"linear_layer_overhead_s", &DeviceModel::linear_layer_overhead_s, 0, 10},
    {"attention_bandwidth_efficiency", &DeviceModel::attention_bandwidth_efficiency, 1e-3, 2},
    {"attention_flops_efficiency", &DeviceModel::attention_flops_efficiency, 1e-3, 2},
    {"attention_layer_overhead_s", &DeviceModel::attention_layer_overhead_s, 0, 10, true},
    {"step_overhead_s", &DeviceModel::step_overhead_s, 0, 10},
    {"sequence_overhead_s", &DeviceModel::sequence_overhead_s, 0, 10},
    {"block_table_entry_s", &DeviceModel::block_table_entry_s, 0, 10},
    {"host_bandwidth", &DeviceModel::host_bandwidth, 1e3, kInf},
    {"host_transfer_latency_s", &DeviceModel::host_transfer_latency_s, 0, 10},
    {"device_copy_latency_s", &DeviceModel::device_copy_latency_s, 0, 10},
    {"tensor_parallel", &DeviceModel::tensor_parallel, 1, 64, true},
    {"interconnect_bandwidth", &DeviceModel::interconnect_bandwidth, 0, kInf, true},
    {"allreduce_latency_s", &DeviceModel::allreduce_latency_s, 0, 10, true},
    // Not a constant of the clock, but checked like one: the format this file is written in.
    {"format", nullptr, kFormat, kFormat},
}};

struct Table {
  const char* key;
  SizeTable DeviceModel::*field;
  double min;
  double max;
};

const std::array<Table, 3> kTables = {{
    {"paged_attention_factor", &DeviceModel::paged_attention_factor, 0.1, 1000},
    {"map_s", &DeviceModel::map_s, 0, 10},
    {"unmap_s", &DeviceModel::unmap_s, 0, 10},
}};

/// A finite number that is the whole of `text`, or nothing.
bool parse_number(const std::string& text, double& out) {
  if (text.empty()) return false;
  errno = 0;
  char* end = nullptr;
  out = std::strtod(text.c_str(), &end);
  return errno == 0 && end == text.c_str() + text.size() && std::isfinite(out);
}

bool parse_size(const std::string& text, std::int64_t& out) {
  if (text.empty() || text.size() > 15 || text.find_first_not_of("0123456789") != std::string::npos) return false;
  out = std::stoll(text);
  return out > 0;
}

std::string known_keys() {
  std::string s;
  for (const Scalar& k : kScalars) s += std::string(s.empty() ? "" : ", ") + k.key;
  for (const Table& t : kTables) s += std::string(", ") + t.key + ".SIZE";
  return s;
}

}  // namespace

DeviceModel parse_device_model(std::string_view text, const std::string& origin) {
  DeviceModel m;
  m.origin = origin;
  std::set<std::string> seen;
  std::istringstream in{std::string(text)};
  std::string raw;
  int line_no = 0;
  auto fail = [&](const std::string& key, const std::string& why) {
    KVLAB_THROW(InvalidArgument,
                fmt::format("{}:{}: {}{}", origin, line_no, key.empty() ? "" : "key '" + key + "': ", why));
  };
  while (std::getline(in, raw)) {
    ++line_no;
    const std::string line(trim(raw));
    if (line.empty() || line.front() == '#') continue;
    const auto hash = line.find('#');
    const std::string body(trim(line.substr(0, hash)));
    const std::string source = hash == std::string::npos ? std::string{} : std::string(trim(line.substr(hash + 1)));
    const auto eq = body.find('=');
    if (eq == std::string::npos) fail("", "expected 'key = value  # source'");
    const std::string key(trim(body.substr(0, eq)));
    const std::string value(trim(body.substr(eq + 1)));
    if (key.empty()) fail("", "missing key before '='");
    if (source.empty()) fail(key, "every value needs a '# source' comment naming where it comes from");
    if (!seen.insert(key).second) fail(key, "given twice");
    m.sources[key] = source;
    if (key == "name") {
      if (value.empty() || value.find_first_of(" \t/") != std::string::npos) fail(key, "must be one word");
      m.name = value;
      continue;
    }
    if (key == "description") {
      m.description = value;
      continue;
    }
    double v = 0;
    bool known = false;
    for (const Scalar& s : kScalars) {
      if (key != s.key) continue;
      known = true;
      if (!parse_number(value, v)) fail(key, "'" + value + "' is not a finite number");
      if (v < s.min || v > s.max) fail(key, fmt::format("{} is outside [{:g}, {:g}]", value, s.min, s.max));
      if (s.field == &DeviceModel::tensor_parallel && v != std::floor(v)) fail(key, "must be a whole number of GPUs");
      if (s.field != nullptr) m.*(s.field) = v;
    }
    for (const Table& t : kTables) {
      const std::string prefix = std::string(t.key) + ".";
      if (!key.starts_with(prefix)) continue;
      known = true;
      std::int64_t size = 0;
      if (!parse_size(key.substr(prefix.size()), size)) fail(key, "the suffix must be a positive whole size");
      if (!parse_number(value, v)) fail(key, "'" + value + "' is not a finite number");
      if (v < t.min || v > t.max) fail(key, fmt::format("{} is outside [{:g}, {:g}]", value, t.min, t.max));
      (m.*(t.field)).points[size] = v;
    }
    if (!known) fail(key, "unknown (known: name, description, " + known_keys() + ")");
  }
  line_no = 0;  // the file as a whole
  const auto missing = [&](const std::string& key) {
    KVLAB_THROW(InvalidArgument, fmt::format("{}: key '{}' is missing", origin, key));
  };
  if (m.name.empty()) missing("name");
  for (const Scalar& s : kScalars)
    if (!s.optional && !seen.contains(s.key)) missing(s.key);
  for (const Table& t : kTables)
    if ((m.*(t.field)).empty()) missing(std::string(t.key) + ".SIZE");
  if (m.tensor_parallel > 1 && m.interconnect_bandwidth <= 0)
    KVLAB_THROW(InvalidArgument, fmt::format("{}: key 'interconnect_bandwidth' is missing or 0: tensor_parallel {:g} "
                                             "needs the bandwidth its all-reduces run at",
                                             origin, m.tensor_parallel));
  return m;
}

DeviceModel read_device_model(const std::filesystem::path& file) {
  check_small_input_file(file, "a device model file", std::uintmax_t{1} << 20);  // 1 MiB: ~50 lines in practice
  std::ifstream in(file, std::ios::binary);
  if (!in) KVLAB_THROW(InvalidArgument, "cannot read device model file '" + file.string() + "'");
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (in.bad()) KVLAB_THROW(InvalidArgument, "cannot read device model file '" + file.string() + "'");
  return parse_device_model(text, file.string());
}

std::string format_device_model(const DeviceModel& m) {
  const auto source = [&](const std::string& key) {
    const auto it = m.sources.find(key);
    if (it != m.sources.end() && !it->second.empty()) return it->second;
    for (const Scalar& s : kScalars)
      if (s.optional && key == s.key)
        return std::string("not given in the model this file was written from: the default");
    return std::string("unspecified");
  };
  std::string out =
      "# kvlab device model (format 1): the constants of the modelled clock for one device.\n"
      "# One 'key = value  # source' per line; see docs/clock.md for what each key means.\n";
  out += fmt::format("format = {}  # kvlab device model format\n", kFormat);
  out += fmt::format("name = {}  # {}\n", m.name, source("name"));
  if (!m.description.empty()) out += fmt::format("description = {}  # {}\n", m.description, source("description"));
  for (const Scalar& s : kScalars)
    if (s.field != nullptr) out += fmt::format("{} = {:.6g}  # {}\n", s.key, m.*(s.field), source(s.key));
  for (const Table& t : kTables)
    for (const auto& [size, v] : (m.*(t.field)).points) {
      const std::string key = fmt::format("{}.{}", t.key, size);
      out += fmt::format("{} = {:.6g}  # {}\n", key, v, source(key));
    }
  return out;
}

DeviceModel device_model_preset(std::string_view name) {
  for (const auto& [preset, text] : embedded_device_models())
    if (preset == name) {
      DeviceModel m = parse_device_model(text, "serving/devices/" + std::string(preset) + ".txt");
      m.origin = "preset " + std::string(preset);
      return m;
    }
  std::string known;
  for (const auto& n : device_model_names()) known += (known.empty() ? "" : ", ") + n;
  KVLAB_THROW(InvalidArgument, "unknown device model '" + std::string(name) + "' (known: " + known +
                                   "; or a path to a device model file, e.g. one written by kvlab calibrate)");
}

std::vector<std::string> device_model_names() {
  std::vector<std::string> names;
  for (const auto& [preset, text] : embedded_device_models()) names.emplace_back(preset);
  return names;
}

DeviceModel resolve_device_model(std::string_view name_or_file) {
  if (name_or_file.find('/') != std::string_view::npos || name_or_file.ends_with(".txt"))
    return read_device_model(std::filesystem::path(name_or_file));
  return device_model_preset(name_or_file);
}

std::string describe_sources(const DeviceModel& m) {
  // Group keys by their source text, in first-seen order of the scalar list, so a README reads
  // "memory_bandwidth, peak_flops: NVIDIA datasheet; linear_*: Vidur profile ...".
  std::vector<std::pair<std::string, std::vector<std::string>>> groups;
  const auto add = [&](const std::string& key, const std::string& label) {
    const auto it = m.sources.find(key);
    if (it == m.sources.end()) return;
    for (auto& [src, keys] : groups)
      if (src == it->second) {
        if (keys.empty() || keys.back() != label) keys.push_back(label);
        return;
      }
    groups.push_back({it->second, {label}});
  };
  for (const Scalar& s : kScalars)
    if (s.field != nullptr) add(s.key, s.key);
  for (const Table& t : kTables)  // a table by the source of its first point (the others say "same as ...")
    if (!(m.*(t.field)).empty())
      add(fmt::format("{}.{}", t.key, (m.*(t.field)).points.begin()->first), std::string(t.key) + ".*");
  if (groups.empty()) return "source not recorded";
  std::string out;
  for (const auto& [src, keys] : groups) {
    if (!out.empty()) out += "; ";
    for (std::size_t i = 0; i < keys.size(); ++i) out += (i ? ", " : "") + keys[i];
    out += ": " + src;
  }
  return out;
}

}  // namespace kvlab
