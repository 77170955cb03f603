#pragma once
// KV storage element types usable in host and device code: IEEE binary16 (f16), bfloat16 (bf16)
// and float. They are plain 16-bit bit patterns so that views stay trivially copyable and the same
// kernel source compiles with and without nvcc; arithmetic always happens in fp32.
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "alloc/core/dtype.hpp"
#include "kernels/platform.hpp"

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#elif defined(__F16C__)
#include <immintrin.h>
#endif

namespace kvlab {

struct half_t {
  std::uint16_t bits;
};
struct bfloat16_t {
  std::uint16_t bits;
};
static_assert(sizeof(half_t) == 2 && std::is_trivially_copyable_v<half_t>);
static_assert(sizeof(bfloat16_t) == 2 && std::is_trivially_copyable_v<bfloat16_t>);

namespace detail {
KVLAB_HD inline float bits_to_float(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}
KVLAB_HD inline std::uint32_t float_to_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}

// Portable binary16 <-> binary32, round to nearest even; used where no hardware path exists.
KVLAB_HD inline float half_bits_to_float_soft(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  std::uint32_t exp = (h >> 10) & 0x1fu;
  std::uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return bits_to_float(sign | 0x7f800000u | (mant << 13));  // inf / nan
  if (exp == 0) {
    if (mant == 0) return bits_to_float(sign);
    // subnormal: normalise
    exp = 127 - 15 + 1;
    while ((mant & 0x400u) == 0) {
      mant <<= 1;
      --exp;
    }
    mant &= 0x3ffu;
    return bits_to_float(sign | (exp << 23) | (mant << 13));
  }
  return bits_to_float(sign | ((exp + 127 - 15) << 23) | (mant << 13));
}
KVLAB_HD inline std::uint16_t float_to_half_bits_soft(float f) {
  const std::uint32_t u = float_to_bits(f);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  const std::uint32_t absu = u & 0x7fffffffu;
  if (absu >= 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7c00u | (absu > 0x7f800000u ? 0x200u : 0));
  if (absu >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (absu < 0x38800000u) {                                                    // subnormal or zero
    if (absu < 0x33000000u) return static_cast<std::uint16_t>(sign);
    const std::uint32_t e = absu >> 23;
    const std::uint32_t m = (absu & 0x7fffffu) | 0x800000u;
    const std::uint32_t shift = 126 - e;  // 14 + (113 - e) ... places m into 10-bit subnormal
    std::uint32_t r = m >> shift;
    const std::uint32_t rem = m & ((1u << shift) - 1);
    const std::uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return static_cast<std::uint16_t>(sign | r);
  }
  std::uint32_t r = ((absu >> 13) - ((127 - 15) << 10));
  const std::uint32_t rem = absu & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;
  return static_cast<std::uint16_t>(sign | r);
}
}  // namespace detail

KVLAB_HD KVLAB_FORCEINLINE float to_float(float x) { return x; }
KVLAB_HD KVLAB_FORCEINLINE float to_float(half_t x) {
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(x.bits));
#elif defined(__F16C__) && !defined(__CUDACC__)
  return _cvtsh_ss(x.bits);
#else
  return detail::half_bits_to_float_soft(x.bits);
#endif
}
KVLAB_HD KVLAB_FORCEINLINE float to_float(bfloat16_t x) {
  return detail::bits_to_float(static_cast<std::uint32_t>(x.bits) << 16);
}

template <class T>
KVLAB_HD KVLAB_FORCEINLINE T from_float(float f);
template <>
KVLAB_HD KVLAB_FORCEINLINE float from_float<float>(float f) {
  return f;
}
template <>
KVLAB_HD KVLAB_FORCEINLINE half_t from_float<half_t>(float f) {
#if defined(__CUDA_ARCH__)
  return half_t{__half_as_ushort(__float2half_rn(f))};
#elif defined(__F16C__) && !defined(__CUDACC__)
  return half_t{static_cast<std::uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT))};
#else
  return half_t{detail::float_to_half_bits_soft(f)};
#endif
}
template <>
KVLAB_HD KVLAB_FORCEINLINE bfloat16_t from_float<bfloat16_t>(float f) {
  const std::uint32_t u = detail::float_to_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bfloat16_t{static_cast<std::uint16_t>((u >> 16) | 0x40u)};  // quiet NaN
  const std::uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return bfloat16_t{static_cast<std::uint16_t>((u + rounding) >> 16)};
}

/// The storage type for a runtime DType (used only at dispatch sites).
template <DType D>
struct storage_of;
template <>
struct storage_of<DType::f16> {
  using type = half_t;
};
template <>
struct storage_of<DType::bf16> {
  using type = bfloat16_t;
};
template <>
struct storage_of<DType::f32> {
  using type = float;
};

template <class T>
inline constexpr DType dtype_of = std::is_same_v<T, float>    ? DType::f32
                                  : std::is_same_v<T, half_t> ? DType::f16
                                                              : DType::bf16;

}  // namespace kvlab
