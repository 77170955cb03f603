// Device model files (serving/clock/device_model.hpp): every defect is an error naming FILE:LINE and
// the key; size tables interpolate in log2(size) and clamp outside their points.
#include <gtest/gtest.h>

#include <string>

#include "alloc/core/error.hpp"
#include "serving/clock/device_model.hpp"

namespace kvlab {
namespace {

/// A complete, valid model file; `line` replaces the line starting with its key (or is appended).
std::string model_text(const std::string& replace_key = "", const std::string& line = "") {
  std::string text = format_device_model(device_model_preset("h100-sxm"));
  if (replace_key.empty()) return text + line;
  const auto at = text.find("\n" + replace_key + " =");
  EXPECT_NE(at, std::string::npos) << replace_key;
  const auto end = text.find('\n', at + 1);
  return text.substr(0, at + 1) + line + text.substr(end);
}

/// The line number of `key` in `text` (1-based).
int line_of(const std::string& text, const std::string& key) {
  const auto at = text.find("\n" + key + " =");
  int line = 2;
  for (std::size_t i = 0; i < at; ++i) line += text[i] == '\n';
  return line;
}

std::string error_of(const std::string& text) {
  try {
    (void)parse_device_model(text, "dev.txt");
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

TEST(DeviceModel, PresetsRoundTripThroughTheirFormat) {
  for (const std::string& name : device_model_names()) {
    const DeviceModel a = device_model_preset(name);
    const DeviceModel b = parse_device_model(format_device_model(a), "x");
    EXPECT_EQ(b.name, a.name);
    EXPECT_DOUBLE_EQ(b.memory_bandwidth, a.memory_bandwidth);
    EXPECT_EQ(b.map_s.points.size(), a.map_s.points.size());
    EXPECT_EQ(b.sources, a.sources);
    for (const auto& [key, source] : a.sources) {
      EXPECT_FALSE(source.empty()) << name << " " << key;
      EXPECT_EQ(source.find("PENDING"), std::string::npos) << name << " " << key << ": " << source;
    }
  }
}

TEST(DeviceModel, MissingSourceCommentNamesFileLineAndKey) {
  const std::string text = model_text("memory_bandwidth", "memory_bandwidth = 1e12");
  const std::string e = error_of(text);
  EXPECT_NE(e.find("dev.txt:" + std::to_string(line_of(text, "memory_bandwidth")) + ":"), std::string::npos) << e;
  EXPECT_NE(e.find("key 'memory_bandwidth'"), std::string::npos) << e;
  EXPECT_NE(e.find("source"), std::string::npos) << e;
  // An empty comment is no source either.
  EXPECT_NE(error_of(model_text("peak_flops", "peak_flops = 1e12  #   ")).find("key 'peak_flops'"), std::string::npos);
}

TEST(DeviceModel, UnknownKeyNamesFileLineAndKey) {
  const std::string text = model_text("", "memory_bandwith = 1e12  # a typo\n");
  const std::string e = error_of(text);
  EXPECT_NE(e.find("dev.txt:" + std::to_string(line_of(text, "memory_bandwith")) + ": key 'memory_bandwith': unknown"),
            std::string::npos)
      << e;
  EXPECT_NE(error_of(model_text("", "map_s.abc = 1e-6  # x\n")).find("key 'map_s.abc'"), std::string::npos);
  EXPECT_NE(error_of(model_text("", "map_s.0 = 1e-6  # x\n")).find("positive whole size"), std::string::npos);
}

TEST(DeviceModel, DuplicateKeyNamesTheSecondLine) {
  const std::string text = model_text("", "peak_flops = 2e15  # again\n");
  const std::string e = error_of(text);
  int last = 0;
  for (char c : text) last += c == '\n';
  EXPECT_NE(e.find("dev.txt:" + std::to_string(last) + ": key 'peak_flops': given twice"), std::string::npos) << e;
}

TEST(DeviceModel, BadNumberNamesFileLineAndKey) {
  for (const std::string v : {"fast", "1e12x", "", "nan", "inf", "1e999"}) {
    const std::string text = model_text("host_bandwidth", "host_bandwidth = " + v + "  # x");
    const std::string e = error_of(text);
    EXPECT_NE(e.find("dev.txt:" + std::to_string(line_of(text, "host_bandwidth")) + ": key 'host_bandwidth'"),
              std::string::npos)
        << v << ": " << e;
    EXPECT_NE(e.find("not a finite number"), std::string::npos) << v << ": " << e;
  }
}

TEST(DeviceModel, MissingKeyIsNamed) {
  for (const std::string key : {"step_overhead_s", "format", "name"}) {
    const std::string e = error_of(model_text(key, "# removed"));
    EXPECT_NE(e.find("dev.txt: key '" + key + "' is missing"), std::string::npos) << key << ": " << e;
  }
  // attention_layer_overhead_s came later: a file without it still reads, as 0.
  const std::string old_file = model_text("attention_layer_overhead_s", "# removed");
  EXPECT_EQ(error_of(old_file), "");
  EXPECT_EQ(parse_device_model(old_file, "old.txt").attention_layer_overhead_s, 0);
  EXPECT_EQ(format_device_model(parse_device_model(old_file, "old.txt")).find("unspecified"), std::string::npos);
  EXPECT_DOUBLE_EQ(parse_device_model(
                       model_text("attention_layer_overhead_s", "attention_layer_overhead_s = 2.5e-5  # x"), "new.txt")
                       .attention_layer_overhead_s,
                   2.5e-5);
  EXPECT_NE(error_of(model_text("attention_layer_overhead_s", "attention_layer_overhead_s = -1e-6  # x"))
                .find("key 'attention_layer_overhead_s'"),
            std::string::npos);
  // A table with no point at all.
  std::string text = model_text();
  for (std::size_t at; (at = text.find("\nunmap_s.")) != std::string::npos;)
    text.erase(at + 1, text.find('\n', at + 1) - at);
  EXPECT_NE(error_of(text).find("key 'unmap_s.SIZE' is missing"), std::string::npos) << error_of(text);
}

TEST(DeviceModel, OutOfRangeNamesFileLineKeyAndRange) {
  const std::string text = model_text("attention_bandwidth_efficiency", "attention_bandwidth_efficiency = 3  # x");
  const std::string e = error_of(text);
  EXPECT_NE(e.find("dev.txt:" + std::to_string(line_of(text, "attention_bandwidth_efficiency")) +
                   ": key 'attention_bandwidth_efficiency': 3 is outside [0.001, 2]"),
            std::string::npos)
      << e;
  EXPECT_NE(error_of(model_text("step_overhead_s", "step_overhead_s = -1e-6  # x")).find("outside"), std::string::npos);
  EXPECT_NE(error_of(model_text("", "paged_attention_factor.16 = 0.01  # x\n")).find("key 'paged_attention_factor.16'"),
            std::string::npos);
  EXPECT_NE(error_of(model_text("format", "format = 2  # x")).find("key 'format'"), std::string::npos);
}

TEST(DeviceModel, TensorParallelIsWholeGpusAndNeedsItsInterconnect) {
  // A file without the keys is one GPU, and reads as before.
  const std::string one = model_text("tensor_parallel", "# removed");
  EXPECT_EQ(error_of(one), "");
  EXPECT_EQ(parse_device_model(one, "one.txt").tensor_parallel, 1);
  // Four GPUs with an interconnect read; the values are kept.
  const std::string four = model_text("tensor_parallel", "tensor_parallel = 4  # x");
  const auto with = [&](const std::string& text, const std::string& key, const std::string& line) {
    const auto at = text.find("\n" + key + " =");
    const auto end = text.find('\n', at + 1);
    return text.substr(0, at + 1) + line + text.substr(end);
  };
  const std::string good = with(with(four, "interconnect_bandwidth", "interconnect_bandwidth = 3e11  # x"),
                                "allreduce_latency_s", "allreduce_latency_s = 1e-5  # x");
  ASSERT_EQ(error_of(good), "");
  const DeviceModel d = parse_device_model(good, "tp.txt");
  EXPECT_EQ(d.tensor_parallel, 4);
  EXPECT_EQ(d.interconnect_bandwidth, 3e11);
  EXPECT_EQ(d.allreduce_latency_s, 1e-5);
  EXPECT_EQ(parse_device_model(format_device_model(d), "again.txt").tensor_parallel, 4);
  // Without the interconnect's bandwidth the all-reduces have no price: refused, naming the key.
  for (const std::string& line : {std::string("# removed"), std::string("interconnect_bandwidth = 0  # x")}) {
    const std::string lacking = with(four, "interconnect_bandwidth", line);
    EXPECT_NE(error_of(lacking).find("dev.txt: key 'interconnect_bandwidth' is missing or 0: tensor_parallel 4"),
              std::string::npos)
        << error_of(lacking);
  }
  // Half a GPU, no GPU, or more than a node's worth are named with their line.
  const std::string half = model_text("tensor_parallel", "tensor_parallel = 2.5  # x");
  EXPECT_NE(error_of(half).find("dev.txt:" + std::to_string(line_of(half, "tensor_parallel")) +
                                ": key 'tensor_parallel': must be a whole number of GPUs"),
            std::string::npos)
      << error_of(half);
  EXPECT_NE(error_of(model_text("tensor_parallel", "tensor_parallel = 0  # x")).find("outside [1, 64]"),
            std::string::npos);
  EXPECT_NE(error_of(model_text("tensor_parallel", "tensor_parallel = 128  # x")).find("outside [1, 64]"),
            std::string::npos);
}

TEST(DeviceModel, ReadingAMissingFileNamesIt) {
  try {
    (void)read_device_model("/nonexistent-kvlab/dev.txt");
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent-kvlab/dev.txt"), std::string::npos) << e.what();
  }
}

TEST(SizeTable, InterpolatesInLog2AndClampsOutside) {
  SizeTable t;
  t.points = {{4, 1.0}, {16, 3.0}, {256, 7.0}};
  EXPECT_DOUBLE_EQ(t.at(4), 1.0);  // a point
  EXPECT_DOUBLE_EQ(t.at(16), 3.0);
  EXPECT_DOUBLE_EQ(t.at(8), 2.0);   // halfway in log2 between 4 and 16
  EXPECT_DOUBLE_EQ(t.at(64), 5.0);  // halfway in log2 between 16 and 256
  EXPECT_NEAR(t.at(32), 4.0, 1e-12);
  EXPECT_DOUBLE_EQ(t.at(1), 1.0);  // below the first point: the first value
  EXPECT_DOUBLE_EQ(t.at(3), 1.0);
  EXPECT_DOUBLE_EQ(t.at(1 << 20), 7.0);  // above the last: the last value
  SizeTable one;
  one.points = {{65536, 2.5e-6}};
  EXPECT_DOUBLE_EQ(one.at(4096), 2.5e-6);
  EXPECT_DOUBLE_EQ(one.at(2 << 20), 2.5e-6);
  EXPECT_THROW((void)SizeTable{}.at(16), Error);
  EXPECT_THROW((void)t.at(0), Error);
}

}  // namespace
}  // namespace kvlab
