#pragma once
// The one place where runtime choices become compile-time ones (storage dtype, head dim, layout).
// An unsupported value fails loudly with InvalidArgument; nothing silently falls back.
#include <string>
#include <type_traits>
#include <utility>

#include "alloc/core/dtype.hpp"
#include "alloc/core/error.hpp"
#include "kernels/kv_view.hpp"
#include "kernels/numeric.hpp"

namespace kvlab {

template <class T>
struct type_tag {
  using type = T;
};

/// Head dims the kernels are instantiated for.
inline constexpr int kSupportedHeadDims[] = {32, 64, 128, 256};

[[nodiscard]] constexpr bool supported_head_dim(int d) noexcept {
  for (int x : kSupportedHeadDims)
    if (x == d) return true;
  return false;
}

template <class F>
decltype(auto) dispatch_dtype(DType t, F&& f) {
  switch (t) {
    case DType::f16:
      return std::forward<F>(f)(type_tag<half_t>{});
    case DType::bf16:
      return std::forward<F>(f)(type_tag<bfloat16_t>{});
    case DType::f32:
      return std::forward<F>(f)(type_tag<float>{});
  }
  KVLAB_THROW(InvalidArgument, "unsupported KV dtype");
}

template <class F>
decltype(auto) dispatch_head_dim(int d, F&& f) {
  switch (d) {
    case 32:
      return std::forward<F>(f)(std::integral_constant<int, 32>{});
    case 64:
      return std::forward<F>(f)(std::integral_constant<int, 64>{});
    case 128:
      return std::forward<F>(f)(std::integral_constant<int, 128>{});
    case 256:
      return std::forward<F>(f)(std::integral_constant<int, 256>{});
  }
  KVLAB_THROW(InvalidArgument, "unsupported head dim " + std::to_string(d) + " (supported: 32, 64, 128, 256)");
}

/// Calls f(typed_view, integral_constant<head_dim>) for an erased KvView.
template <class F>
decltype(auto) visit_kv_view(const KvView& v, F&& f) {
  return dispatch_dtype(v.dtype, [&](auto tag) -> decltype(auto) {
    using T = typename decltype(tag)::type;
    return dispatch_head_dim(v.head_dim, [&](auto dim) -> decltype(auto) {
      if (v.layout == KvLayout::paged) return f(as_paged<T>(v), dim);
      return f(as_contiguous<T>(v), dim);
    });
  });
}

}  // namespace kvlab
