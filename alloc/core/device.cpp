#include "alloc/core/device.hpp"

#include <charconv>

#include "alloc/core/error.hpp"

namespace kvlab {

std::string_view to_string(Device d) noexcept {
  switch (d) {
    case Device::host:
      return "host";
    case Device::cuda:
      return "cuda";
    case Device::emulated:
      return "emulated";
  }
  return "unknown";
}

Device parse_device(std::string_view name) {
  if (name == "host") return Device::host;
  if (name == "cuda") return Device::cuda;
  if (name == "emulated") return Device::emulated;
  KVLAB_THROW(InvalidArgument, "unknown device '" + std::string(name) + "' (expected host, cuda or emulated)");
}

std::string DeviceSpec::name() const {
  return kind == Device::cuda ? "cuda:" + std::to_string(index) : std::string(to_string(kind));
}

DeviceSpec parse_device_spec(std::string_view text) {
  DeviceSpec spec;
  if (text == "host" || text == "emulated" || text == "cuda") {
    spec.kind = parse_device(text);
    return spec;
  }
  if (text.starts_with("cuda:")) {
    const std::string_view n = text.substr(5);
    int index = -1;
    const auto [ptr, ec] = std::from_chars(n.data(), n.data() + n.size(), index);
    if (ec != std::errc() || ptr != n.data() + n.size() || n.empty() || index < 0 || index > 1023)
      KVLAB_THROW(InvalidArgument,
                  "device '" + std::string(text) + "': the GPU index must be a number 0..1023 (cuda:0)");
    spec.kind = Device::cuda;
    spec.index = index;
    return spec;
  }
  KVLAB_THROW(InvalidArgument, "unknown device '" + std::string(text) + "' (expected host, cuda, cuda:N or emulated)");
}

}  // namespace kvlab
