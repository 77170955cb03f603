#pragma once
// The device model files of serving/devices/, compiled into the binary by CMake
// (embedded_device_models.cpp is generated in the build tree), so presets need no install path.
#include <span>
#include <string_view>
#include <utility>

namespace kvlab {

/// (name, file text) of every serving/devices/NAME.txt, sorted by name.
[[nodiscard]] std::span<const std::pair<std::string_view, std::string_view>> embedded_device_models();

}  // namespace kvlab
