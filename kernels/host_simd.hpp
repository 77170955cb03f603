#pragma once
// The host kernels' SIMD vocabulary: one 16-lane fp32 vector (one AVX-512 register; GCC/Clang
// vector extensions split it on narrower machines), loading 16 K/V elements of any storage dtype
// straight into it, a vectorised exp, and the transposed reduction that turns 16 dot-product
// accumulators into one vector of 16 sums. Host code only (never compiled by nvcc).
#include <bit>
#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__AVX512F__) || defined(__F16C__)
#include <immintrin.h>
#endif

#include "kernels/numeric.hpp"

namespace kvlab::simd {

constexpr int kLanes = 16;
using vec = float __attribute__((vector_size(kLanes * sizeof(float))));
using ivec = std::int32_t __attribute__((vector_size(kLanes * sizeof(std::int32_t))));
using uvec = std::uint32_t __attribute__((vector_size(kLanes * sizeof(std::uint32_t))));
using u16vec = std::uint16_t __attribute__((vector_size(kLanes * sizeof(std::uint16_t))));

inline vec splat(float x) { return vec{} + x; }

inline vec loadv(const float* p) {
  vec v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void storev(float* p, vec v) { std::memcpy(p, &v, sizeof v); }

/// 16 consecutive elements of a K or V row as fp32, converted in registers (no scratch buffer).
template <class T>
inline vec load_as_float(const T* src) {
  if constexpr (std::is_same_v<T, float>) {
    return loadv(src);
  } else if constexpr (std::is_same_v<T, half_t>) {
#if defined(__AVX512F__)
    return reinterpret_cast<vec>(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src))));
#elif defined(__F16C__)
    const __m256 lo = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src)));
    const __m256 hi = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 8)));
    vec v;
    std::memcpy(&v, &lo, sizeof lo);
    std::memcpy(reinterpret_cast<char*>(&v) + sizeof lo, &hi, sizeof hi);
    return v;
#else
    vec v;
    for (int i = 0; i < kLanes; ++i) v[i] = to_float(src[i]);
    return v;
#endif
  } else {
    // bfloat16 is the top half of a float: widen and shift.
    u16vec bits;
    std::memcpy(&bits, src, sizeof bits);
    const uvec wide = __builtin_convertvector(bits, uvec) << 16;
    return reinterpret_cast<vec>(wide);
  }
}

namespace detail {
// v with each lane swapped with its partner W lanes away (within 2W blocks).
template <int W>
inline vec swap_halves(vec v) {
  if constexpr (W == 8)
    return __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7);
  else if constexpr (W == 4)
    return __builtin_shufflevector(v, v, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11);
  else if constexpr (W == 2)
    return __builtin_shufflevector(v, v, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13);
  else
    return __builtin_shufflevector(v, v, 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14);
}
inline vec vmax(vec a, vec b) { return a > b ? a : b; }
}  // namespace detail

/// Sum of the lanes (a balanced tree: 4 shuffles, 4 adds).
inline float hsum(vec v) {
  v += detail::swap_halves<8>(v);
  v += detail::swap_halves<4>(v);
  v += detail::swap_halves<2>(v);
  v += detail::swap_halves<1>(v);
  return v[0];
}

/// Largest lane (NaN lanes may or may not win; callers never rely on NaN ordering).
inline float hmax(vec v) {
  v = detail::vmax(v, detail::swap_halves<8>(v));
  v = detail::vmax(v, detail::swap_halves<4>(v));
  v = detail::vmax(v, detail::swap_halves<2>(v));
  v = detail::vmax(v, detail::swap_halves<1>(v));
  return v[0];
}

/// exp of every lane (Cephes expf polynomial, relative error ~2e-7), for softmax arguments.
/// NaN stays NaN; arguments below -87 give about 1.6e-38 (callers zero masked lanes themselves).
inline vec exp(vec x) {
  x = x < -87.0f ? splat(-87.0f) : x;
  x = x > 88.0f ? splat(88.0f) : x;
  // Round to nearest through the 1.5 * 2^23 trick: exact for |x * log2(e)| < 2^22.
  const vec magic = splat(12582912.0f);
  const vec n = (x * 1.44269504088896341f + magic) - magic;
  vec r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  vec p = splat(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const ivec ni = __builtin_convertvector(n == n ? n : splat(0.f), ivec);
  return p * reinterpret_cast<vec>((ni + 127) << 23);
}

namespace detail {
// One level of the transposed reduction: lanes [2wb, 2wb+w) of x and y go to the low operand,
// [2wb+w, 2wb+2w) to the high one; combining them keeps w partial results of x then w of y per
// 2w block.
template <int W>
inline vec fold_low(vec x, vec y) {
  if constexpr (W == 8)
    return __builtin_shufflevector(x, y, 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23);
  else if constexpr (W == 4)
    return __builtin_shufflevector(x, y, 0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27);
  else if constexpr (W == 2)
    return __builtin_shufflevector(x, y, 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29);
  else
    return __builtin_shufflevector(x, y, 0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30);
}
template <int W>
inline vec fold_high(vec x, vec y) {
  if constexpr (W == 8)
    return __builtin_shufflevector(x, y, 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
  else if constexpr (W == 4)
    return __builtin_shufflevector(x, y, 4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31);
  else if constexpr (W == 2)
    return __builtin_shufflevector(x, y, 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31);
  else
    return __builtin_shufflevector(x, y, 1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31);
}
template <int W>
inline vec fold(vec x, vec y) {
  return fold_low<W>(x, y) + fold_high<W>(x, y);
}
template <int W>
inline vec fold_max(vec x, vec y) {
  return vmax(fold_low<W>(x, y), fold_high<W>(x, y));
}
constexpr int bit_reverse4(int i) { return ((i & 1) << 3) | ((i & 2) << 1) | ((i & 4) >> 1) | ((i & 8) >> 3); }
}  // namespace detail

/// Lane i of the result is the sum of the lanes of a[i]: 16 horizontal sums in 15 vector adds
/// and 30 shuffles (per-vector sums would take 4 adds and 4 shuffles each, then 16 inserts).
/// The four folds leave lane L holding input bit_reverse4(L), so inputs enter bit-reversed.
inline vec transpose_sum(const vec (&a)[kLanes]) {
  using detail::bit_reverse4;
  using detail::fold;
  vec b[8], c[4], d[2];
  for (int k = 0; k < 8; ++k) b[k] = fold<8>(a[bit_reverse4(2 * k)], a[bit_reverse4(2 * k + 1)]);
  for (int k = 0; k < 4; ++k) c[k] = fold<4>(b[2 * k], b[2 * k + 1]);
  for (int k = 0; k < 2; ++k) d[k] = fold<2>(c[2 * k], c[2 * k + 1]);
  return fold<1>(d[0], d[1]);
}

/// The largest lane of each of four vectors, out[i] = hmax(v[i]), in 8 shuffles and 5 maxima
/// (four hmax calls take 16 of each): the softmax needs every row's tile maximum.
inline void hmax4(const vec (&v)[4], float (&out)[4]) {
  using detail::fold_max;
  const vec a = fold_max<8>(v[0], v[1]);  // lanes 0-7 hold v[0]'s candidates, 8-15 v[1]'s
  const vec b = fold_max<8>(v[2], v[3]);
  vec c = fold_max<4>(a, b);  // lanes 0-3: v[0], 4-7: v[2], 8-11: v[1], 12-15: v[3]
  c = detail::vmax(c, detail::swap_halves<2>(c));
  c = detail::vmax(c, detail::swap_halves<1>(c));
  out[0] = c[0];
  out[1] = c[8];
  out[2] = c[4];
  out[3] = c[12];
}

}  // namespace kvlab::simd
