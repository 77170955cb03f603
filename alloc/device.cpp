#include "alloc/device.hpp"

#include "alloc/error.hpp"

namespace kvlab {

std::string_view to_string(Device d) noexcept { return d == Device::host ? "host" : "cuda"; }

Device parse_device(std::string_view name) {
  if (name == "host") return Device::host;
  if (name == "cuda") return Device::cuda;
  KVLAB_THROW(InvalidArgument, "unknown device '" + std::string(name) + "' (expected host or cuda)");
}

}  // namespace kvlab
