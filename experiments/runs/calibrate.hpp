#pragma once
// `kvlab calibrate`: measures the present machine and returns a device model (the constants of the
// modelled clock, serving/clock/device_model.hpp) whose every key says how it was measured.
//
// Rationale: the presets' GPU constants come from datasheets and published profiles, but the
// constants of kvlab's own work (the scheduler's CPU time per step, a mapping call) and of the
// host that runs execute-mode replays can only be measured. Approach: each group of keys has one
// measurement (memory read bandwidth, fp32 FMA peak, the host attention kernel through the
// contiguous and the paged view, POSIX map/unmap per page, memcpy of block-sized chunks, and the
// replayer's own wall time per step fitted to steps, sequences and block-table entries); every
// source comment names the machine, the date, what was timed, the repetitions and the statistic
// (the median, so one preempted run does not move a constant). On a GPU (`--device cuda[:N]`) the
// same measurements run through the device's code path: device memory from the CUDA VMM calls, the
// CUDA attention kernels timed by CUDA events, the driver's map/unmap per page at multiples of its
// granularity, cudaMemcpy between pinned host memory and the device and within the device; and
// `--device emulated` runs that code path on the host (driver double, SIMT emulator), which tests
// it but measures nothing about a GPU. Limitations: the linear layers are not calibrated (no GEMM of
// kvlab's runs anywhere): the host file makes them the measured roofline, a GPU file takes them and
// peak_flops from the preset named by `base`.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "serving/clock/device_model.hpp"

namespace kvlab {

struct CalibrateOptions {
  std::string device = "host";  ///< host, cuda[:N] or emulated (parse_device_spec)
  /// GPU only: the preset whose peak_flops and linear_* constants the file takes (not measured).
  std::string base = "h100-sxm";
  std::string name = "host";  ///< the model's name (one word)
  bool quick = false;         ///< short measurements (CI: seconds, noisier)
  /// GPU only: "auto" (FlashInfer's kernels where built, else kvlab's), "kvlab" or "flashinfer".
  std::string kernels = "auto";
  /// Called with one line per measurement as it finishes (kvlab prints them on stderr); may be empty.
  std::function<void(const std::string&)> progress;
};

/// Measures the device of `options` and returns a complete model (every key, every source).
/// Throws InvalidArgument on a bad device, base or name, and Error ("calibrate --device cuda:0: no
/// CUDA GPU found (...)" and the like) when the device cannot be measured here. A GPU calibration
/// that leaves device memory, mappings or reservations behind is an Error too.
/// `device_fault`: where a fault the device showed once the measurements finished (memory still
/// held, a deallocation the driver refused) is reported; nullptr: it throws Error instead. The
/// measurements stand either way when it is given (kvlab calibrate writes the file and exits 1).
[[nodiscard]] DeviceModel calibrate_device(const CalibrateOptions& options, std::string* device_fault = nullptr);

/// Checks, before any measurement, that `file` can be written: named, not a directory, in an
/// existing writable directory. Throws InvalidArgument (a bad name) or Error (cannot write).
void check_calibrate_output(const std::filesystem::path& file);

/// What the machine is, for sources: "Intel(R) Xeon(R) Processor (2 threads)".
[[nodiscard]] std::string host_machine_name();

// The statistics calibrate uses, exposed for tests.

/// The median (the mean of the middle two for an even count). Throws InvalidArgument when empty.
[[nodiscard]] double median(std::vector<double> values);
/// Least squares: the x minimising |A x - y|, A given by rows. Throws InvalidArgument when A has
/// fewer rows than columns or its columns are linearly dependent.
[[nodiscard]] std::vector<double> least_squares(const std::vector<std::vector<double>>& rows,
                                                const std::vector<double>& y);
/// The same with every x >= 0 (the best of the fits over subsets of the columns whose solution is
/// non-negative; columns left out are 0). For the few columns calibrate fits.
[[nodiscard]] std::vector<double> nonnegative_least_squares(const std::vector<std::vector<double>>& rows,
                                                            const std::vector<double>& y);

}  // namespace kvlab
