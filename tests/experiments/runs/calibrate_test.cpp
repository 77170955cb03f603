// kvlab calibrate (experiments/runs/calibrate.hpp): the statistics it fits with, and a quick host
// calibration whose file reads back complete, with a measurement named as the source of every key,
// and which a replay really uses.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include "alloc/cuda/cuda_runtime.hpp"
#include "alloc/core/error.hpp"
#include "alloc/core/model_geometry.hpp"
#include "serving/support/atomic_file.hpp"
#include "serving/replay/backend_factory.hpp"
#include "experiments/runs/calibrate.hpp"
#include "serving/replay/replayer.hpp"
#include "serving/traces/workload.hpp"

namespace kvlab {
namespace {

namespace fs = std::filesystem;

TEST(CalibrateStatistics, Median) {
  EXPECT_DOUBLE_EQ(median({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(median({4, 1, 3, 2}), 2.5);
  EXPECT_DOUBLE_EQ(median({7}), 7);
  EXPECT_DOUBLE_EQ(median({1, 1000, 2, 3, 1e9}), 3);  // an outlier does not move it
  EXPECT_THROW((void)median({}), InvalidArgument);
}

TEST(CalibrateStatistics, LeastSquaresRecoversAKnownLine) {
  // y = 2 + 3 a + 0.5 b exactly, and with noise that cancels in pairs.
  std::vector<std::vector<double>> rows;
  std::vector<double> y;
  for (int a = 0; a < 4; ++a)
    for (int b = 0; b < 3; ++b) {
      rows.push_back({1.0, double(a), double(b * b + a)});
      y.push_back(2 + 3 * a + 0.5 * (b * b + a));
    }
  const auto x = least_squares(rows, y);
  ASSERT_EQ(x.size(), 3u);
  EXPECT_NEAR(x[0], 2, 1e-9);
  EXPECT_NEAR(x[1], 3, 1e-9);
  EXPECT_NEAR(x[2], 0.5, 1e-9);
  EXPECT_THROW((void)least_squares({{1, 2}, {2, 4}, {3, 6}}, {1, 2, 3}), InvalidArgument);  // dependent columns
  EXPECT_THROW((void)least_squares({{1, 2}}, {1}), InvalidArgument);                        // too few rows
}

TEST(CalibrateStatistics, NonNegativeLeastSquaresDropsANegativeCoefficient) {
  // Unconstrained, y = 1 + 2 a - 0.1 b fits exactly; constrained, b's coefficient is 0 and the
  // others are refitted, never negative.
  std::vector<std::vector<double>> rows;
  std::vector<double> y;
  for (int a = 1; a <= 5; ++a)
    for (int b = 1; b <= 5; ++b) {
      rows.push_back({1.0, double(a), double(b)});
      y.push_back(1 + 2 * a - 0.1 * b);
    }
  const auto free = least_squares(rows, y);
  EXPECT_NEAR(free[2], -0.1, 1e-9);
  const auto x = nonnegative_least_squares(rows, y);
  EXPECT_DOUBLE_EQ(x[2], 0);
  EXPECT_NEAR(x[1], 2, 1e-9);
  EXPECT_NEAR(x[0], 1 - 0.1 * 3, 1e-9);  // the mean of the dropped term
  // A fit that needs no constraint is the plain one.
  const auto same = nonnegative_least_squares({{1, 0}, {0, 1}, {1, 1}}, {2, 3, 5});
  EXPECT_NEAR(same[0], 2, 1e-9);
  EXPECT_NEAR(same[1], 3, 1e-9);
}

/// One quick host calibration, shared by the tests below (a few seconds).
const DeviceModel& quick_model() {
  static const DeviceModel m = [] {
    CalibrateOptions o;
    o.quick = true;
    o.name = "ci-test";
    return calibrate_device(o);
  }();
  return m;
}

TEST(Calibrate, QuickHostFileReadsBackWithEveryKeyAndAMeasuredSource) {
  const DeviceModel& m = quick_model();
  const fs::path file = fs::temp_directory_path() / ("kvlab-calibrate-test-" + std::to_string(::getpid()) + ".txt");
  write_file_atomically(file, format_device_model(m));
  const DeviceModel back = read_device_model(file);
  fs::remove(file);
  EXPECT_EQ(back.name, "ci-test");
  EXPECT_NE(back.description.find("kvlab calibrate --device host --quick"), std::string::npos) << back.description;
  EXPECT_GT(back.memory_bandwidth, 1e8);
  EXPECT_GT(back.peak_flops, 1e8);
  for (const int b : {1, 2, 4, 8, 16, 32, 64, 128, 256})
    EXPECT_TRUE(back.paged_attention_factor.points.contains(b)) << b;
  for (std::int64_t p = 4096; p <= 2 << 20; p *= 2) {
    EXPECT_TRUE(back.map_s.points.contains(p)) << p;
    EXPECT_TRUE(back.unmap_s.points.contains(p)) << p;
    EXPECT_GT(back.map_s.at(p), 0) << p;
  }
  const std::string machine = host_machine_name();
  for (const auto& [key, source] : back.sources) {
    if (key == "format" || key == "name" || key == "description") continue;
    const bool measured = source.rfind("measured by kvlab calibrate on " + machine + ", ", 0) == 0;
    const bool declared =
        (key.starts_with("linear_") && source.rfind("not calibrated on the host", 0) == 0) ||
        ((key == "tensor_parallel" || key == "interconnect_bandwidth" || key == "allreduce_latency_s") &&
         source.rfind("one device: ", 0) == 0);
    EXPECT_TRUE(measured || declared) << key << ": " << source;
    if (measured) {
      EXPECT_NE(source.find("median"), std::string::npos) << key << ": " << source;
    }
  }
  // Every key of the format has its own source (none fell back to "unspecified").
  EXPECT_EQ(format_device_model(m).find("unspecified"), std::string::npos);
}

/// Makespan of the same decode-heavy synthetic workload through paged-16 on `device`: short prompts,
/// long outputs, two sequences at a time, so the steps read weights and KV (bandwidth-bound) even on
/// a host whose peak FLOP/s are low.
ReplaySummary replay_on(const DeviceModel& device) {
  SyntheticWorkload w;
  w.num_requests = 6;
  w.rate = 0;
  w.seed = 3;
  w.prompt = LengthDistribution::parse("fixed:16", "prompt");
  w.output = LengthDistribution::parse("fixed:64", "output");
  BackendOptions bo;
  bo.model = model_preset("llama-3-8b");
  bo.capacity_bytes = std::size_t{4} << 30;
  ReplayConfig rc;
  rc.device = device;
  rc.max_running = 2;
  const auto backend = make_backend("paged-16", bo);
  return replay(*backend, generate(w), rc).summary;
}

TEST(Calibrate, AReplayUsesTheCalibratedModel) {
  // Twice the bandwidth, twice the FLOP/s and half the attention call's measured floor halve the
  // model's compute parts exactly (the host model has no linear per-layer floor), whichever roof
  // binds; the CPU part, measured by the same calibration, is what it is (under a sanitizer it is
  // large), so the makespan only has to shrink.
  const DeviceModel& m = quick_model();
  ASSERT_EQ(m.linear_layer_overhead_s, 0);
  ASSERT_GT(m.attention_layer_overhead_s, 0) << "calibrate measures the attention call's floor";
  DeviceModel faster = m;
  faster.memory_bandwidth *= 2;
  faster.peak_flops *= 2;
  faster.attention_layer_overhead_s /= 2;
  const ReplaySummary base = replay_on(m), fast = replay_on(faster);
  const double base_compute = base.clock_parts.linear + base.clock_parts.attention;
  const double fast_compute = fast.clock_parts.linear + fast.clock_parts.attention;
  ASSERT_GT(base_compute, 0);
  EXPECT_NEAR(fast_compute / base_compute, 0.5, 1e-9) << "the replay must take its roofs from the calibrated model";
  EXPECT_DOUBLE_EQ(fast.clock_parts.cpu, base.clock_parts.cpu);
  EXPECT_LT(fast.makespan_s, base.makespan_s);
  EXPECT_NE(replay_on(device_model_preset("a100-80gb")).makespan_s, base.makespan_s);  // not the default device
}

TEST(Calibrate, BadOptionsAreErrorsBeforeAnyMeasurement) {
  CalibrateOptions o;
  o.device = "tpu";
  EXPECT_THROW((void)calibrate_device(o), InvalidArgument);
  o.device = "host";
  o.name = "two words";
  EXPECT_THROW((void)calibrate_device(o), InvalidArgument);
  o.name = "a/b";
  EXPECT_THROW((void)calibrate_device(o), InvalidArgument);
}

TEST(Calibrate, CudaWithoutAGpuFailsWithOneLine) {
  if (cuda_status().available) GTEST_SKIP() << "a GPU is here: tests/gpu/run.sh calibrates it";
  CalibrateOptions o;
  o.device = "cuda";
  try {
    (void)calibrate_device(o);
    FAIL() << "calibrate --device cuda returned a model without a GPU";
  } catch (const InvalidArgument& e) {
    FAIL() << "not a usage error: " << e.what();
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    EXPECT_EQ(what.rfind("calibrate --device cuda:0: no CUDA GPU found (", 0), 0u) << what;
  }
}

/// The GPU code path on the emulated device (driver double, SIMT emulator): it completes, leaves no
/// device memory, mapping or reservation behind (calibrate_device checks and throws otherwise),
/// measures the driver's map/unmap at the granularity and its multiples, and every key names
/// either a measurement on the emulated device or the --base preset it came from.
TEST(Calibrate, TheGpuPathRunsOnTheEmulatedDevice) {
  CalibrateOptions o;
  o.device = "emulated";
  o.base = "a100-80gb";
  o.name = "emulated-test";
  o.quick = true;
  const DeviceModel m = calibrate_device(o);
  const DeviceModel back = parse_device_model(format_device_model(m), "emulated.txt");
  EXPECT_NE(back.description.find("EMULATED"), std::string::npos) << back.description;
  const DeviceModel base = device_model_preset("a100-80gb");
  EXPECT_EQ(back.peak_flops, base.peak_flops);
  EXPECT_EQ(back.linear_flops_efficiency, base.linear_flops_efficiency);
  EXPECT_EQ(back.linear_layer_overhead_s, base.linear_layer_overhead_s);
  EXPECT_GT(back.memory_bandwidth, 1e6);
  // The double's granularity is 2 MiB: nothing smaller is measured, 2, 4 and 8 MiB are.
  std::vector<std::int64_t> pages;
  for (const auto& [page, seconds] : back.map_s.points) {
    pages.push_back(page);
    EXPECT_GT(seconds, 0) << page;
    EXPECT_TRUE(back.unmap_s.points.contains(page)) << page;
  }
  EXPECT_EQ(pages, (std::vector<std::int64_t>{2 << 20, 4 << 20, 8 << 20}));
  for (const int b : {1, 2, 4, 8, 16, 32, 64, 128, 256})
    EXPECT_TRUE(back.paged_attention_factor.points.contains(b)) << b;
  for (const auto& [key, source] : back.sources) {
    if (key == "format" || key == "name" || key == "description") continue;
    const bool measured = source.rfind("measured by kvlab calibrate on emulated GPU", 0) == 0;
    const bool from_base = source.rfind("not measured by kvlab calibrate --device emulated", 0) == 0 &&
                           source.find("from preset a100-80gb") != std::string::npos;
    const bool one_device = key == "tensor_parallel" && source.rfind("one device: ", 0) == 0;
    EXPECT_TRUE(measured || from_base || one_device) << key << ": " << source;
  }
  // Each measured through the device's code path, not the host's.
  const std::vector<std::pair<std::string, std::string>> how = {
      {"memory_bandwidth", "device-to-device copy"},
      {"attention_bandwidth_efficiency", "emulated CUDA decode attention"},
      {"attention_flops_efficiency", "emulated CUDA prefill attention"},
      {"paged_attention_factor.16", "emulated CUDA decode attention time through the paged view"},
      {"map_s.2097152", "CUDA vmm driver (cuda)"},
      {"unmap_s.8388608", "CUDA vmm driver (cuda)"},
      {"host_bandwidth", "between pinned host memory and device memory"},
      {"host_transfer_latency_s", "half the intercept"},
      {"device_copy_latency_s", "device-to-device copies"}};
  for (const auto& [key, text] : how)
    EXPECT_NE(back.sources.at(key).find(text), std::string::npos) << key << ": " << back.sources.at(key);
  // The base's linear-layer bandwidth efficiency, rescaled to the measured bandwidth.
  EXPECT_NEAR(back.linear_bandwidth_efficiency,
              std::clamp(base.linear_bandwidth_efficiency * base.memory_bandwidth / back.memory_bandwidth, 1e-3, 2.0),
              1e-5 * back.linear_bandwidth_efficiency);
}

TEST(Calibrate, ABadBaseOrDeviceIsAUsageError) {
  CalibrateOptions o;
  o.device = "emulated";
  o.base = "tpu-v5";
  EXPECT_THROW((void)calibrate_device(o), InvalidArgument);
  o.base = "h100-sxm";
  o.device = "cuda:x";
  EXPECT_THROW((void)calibrate_device(o), InvalidArgument);
}

TEST(Calibrate, OutputIsCheckedFirst) {
  EXPECT_THROW(check_calibrate_output(""), InvalidArgument);
  EXPECT_THROW(check_calibrate_output(fs::temp_directory_path()), InvalidArgument);  // a directory
  EXPECT_THROW(check_calibrate_output("/nonexistent-kvlab/host.txt"), Error);
  EXPECT_NO_THROW(check_calibrate_output(fs::temp_directory_path() / "kvlab-calibrate-ok.txt"));
}

}  // namespace
}  // namespace kvlab
