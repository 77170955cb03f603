#pragma once
// The backend families kvlab ships, one file each (serving/replay/families/<family>_family.cpp):
// its name grammar, help text, conformance forms and maker. The registry
// (serving/replay/backend_factory.cpp) lists each with one line; a new family is a folder of its
// own plus one such file and that line (docs/backend-interface.md).
#include <cstddef>
#include <string_view>

#include "serving/replay/backend_factory.hpp"

namespace kvlab {

[[nodiscard]] BackendFamily contiguous_backend_family();
[[nodiscard]] BackendFamily paged_backend_family();
[[nodiscard]] BackendFamily vmm_backend_family();
[[nodiscard]] BackendFamily elastic_backend_family();

namespace family {

/// The most blocks (paged, elastic) or pages (vmm) a backend may keep books on: 2^25, under 1 GiB
/// of bookkeeping (415 MB at 2^24 paged-16 blocks, 563 MB at 2^25 vmm-4k pages, measured).
inline constexpr std::size_t kMaxBookkeptUnits = std::size_t{1} << 25;

/// The integer after a prefix ("paged-16" -> 16), or -1 when the rest is not a plain number.
[[nodiscard]] long long suffix_number(std::string_view name, std::string_view prefix);

/// "64k" -> 65536, "2m", "1g"; 0 when `text` is not a positive number with k, m or g, or passes 1 GiB.
[[nodiscard]] std::size_t parse_page_size(std::string_view text);

/// The device a backend's memory is on (the context's, the memory resource's, else the host).
[[nodiscard]] Device device_of(const BackendOptions& options);

}  // namespace family
}  // namespace kvlab
