#pragma once
// Storage element types of the KV cache. Attention math always accumulates in fp32.
#include <cstddef>
#include <string_view>

namespace kvlab {

enum class DType { f16, bf16, f32 };

[[nodiscard]] constexpr std::size_t size_of(DType t) noexcept { return t == DType::f32 ? 4 : 2; }
[[nodiscard]] std::string_view to_string(DType t) noexcept;
/// Parses "f16"/"fp16"/"half", "bf16", "f32"/"fp32"/"float"; throws InvalidArgument otherwise.
[[nodiscard]] DType parse_dtype(std::string_view name);

}  // namespace kvlab
