#include "alloc/core/dtype.hpp"

#include <string>

#include "alloc/core/error.hpp"

namespace kvlab {

std::string_view to_string(DType t) noexcept {
  switch (t) {
    case DType::f16:
      return "f16";
    case DType::bf16:
      return "bf16";
    case DType::f32:
      return "f32";
  }
  return "?";
}

DType parse_dtype(std::string_view name) {
  if (name == "f16" || name == "fp16" || name == "half" || name == "float16") return DType::f16;
  if (name == "bf16" || name == "bfloat16") return DType::bf16;
  if (name == "f32" || name == "fp32" || name == "float" || name == "float32") return DType::f32;
  KVLAB_THROW(InvalidArgument, "unknown dtype '" + std::string(name) + "' (expected f16, bf16 or f32)");
}

}  // namespace kvlab
