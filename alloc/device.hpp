#pragma once
// Where memory lives and kernels run. `host` is always present; `cuda` needs a driver and a GPU,
// which kvlab discovers at run time (see alloc/cuda_runtime.hpp).
#include <string>
#include <string_view>

namespace kvlab {

enum class Device { host, cuda };

[[nodiscard]] std::string_view to_string(Device d) noexcept;
/// Parses "host" or "cuda"; throws InvalidArgument naming the bad value otherwise.
[[nodiscard]] Device parse_device(std::string_view name);

}  // namespace kvlab
