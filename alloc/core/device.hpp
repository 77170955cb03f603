#pragma once
// Where memory lives and kernels run. `host` is always present; `cuda` needs a driver and a GPU,
// which kvlab discovers at run time (see alloc/cuda/cuda_runtime.hpp); `emulated` is the CUDA code path
// on the host: device memory from the contract-checking driver double (alloc/cuda/emulated/, host
// addressable), the CUDA kernels under the host SIMT emulator (docs/devices.md).
#include <string>
#include <string_view>

namespace kvlab {

enum class Device { host, cuda, emulated };

[[nodiscard]] std::string_view to_string(Device d) noexcept;
/// Parses "host", "cuda" or "emulated"; throws InvalidArgument naming the bad value otherwise.
[[nodiscard]] Device parse_device(std::string_view name);

/// True where the CPU may dereference the device's memory (host, emulated): KV integrity checks
/// and host copies work on it directly.
[[nodiscard]] constexpr bool host_addressable(Device d) noexcept { return d != Device::cuda; }

/// A device as the command line names it: host, cuda (GPU 0), cuda:N or emulated.
struct DeviceSpec {
  Device kind = Device::host;
  int index = 0;  ///< the GPU's ordinal (cuda only)
  /// "host", "cuda:0", "emulated".
  [[nodiscard]] std::string name() const;
};

/// The one parser of --device: host | cuda[:N] | emulated, N a GPU ordinal 0..1023 (whether it
/// exists is checked when the device is opened). Throws InvalidArgument naming the value.
[[nodiscard]] DeviceSpec parse_device_spec(std::string_view text);

}  // namespace kvlab
