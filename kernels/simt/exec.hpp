#pragma once
// The SIMT execution interface every kvlab kernel is written against, so that one kernel source
// compiles for the GPU (CudaExec, below, nvcc only) and for the host under the SIMT emulator
// (EmulatedExec, kernels/simt/emulator.hpp). A kernel is
//
//   template <class Exec> KVLAB_HD void kernel(Exec& ex, Args...);
//
// and may use nothing but
//   ex.block_idx(), ex.thread_idx(), ex.block_dim(), ex.grid_dim()   -> Dim3
//   ex.sync_threads()                                                -> __syncthreads()
//   ex.shfl(v, src_lane[, width]), ex.shfl_xor(v, lane_mask[, width]),
//   ex.shfl_up(v, delta[, width]), ex.shfl_down(v, delta[, width])    -> __shfl_*_sync(full warp)
//   shared_array<T>(ex, count)                                       -> carve from dynamic smem
//   ex.template load_global<V>(p)                                    -> one V-sized global load
//   ex.template load_shared<V>(p)                                    -> one V-sized shared load
// plus the helpers below built on them (lane/warp ids, warp and segment reductions). Shuffles
// move any trivially copyable value of at most 8 bytes; every non-exited lane of the warp must
// execute the same shuffle (CUDA's full-mask rule). Shared memory is one dynamic arena per block
// whose size the launcher passes; shared_array() hands out consecutive, suitably aligned pieces,
// and every thread must make the same sequence of calls (each thread keeps its own cursor, so the
// calls themselves need no synchronisation). Its contents start undefined (the emulator poisons
// them with 0xFF bytes, i.e. NaN for floats).
//
// Global loads a kernel wants judged go through load_global<V>(p): V is a trivially copyable type
// of 1, 2, 4, 8 or 16 bytes and p must be aligned to sizeof(V), as a GPU requires (a misaligned
// vector load faults there; the emulator fails the launch with SimtMisuse instead). Under the
// emulator every such load can also be traced and judged the way a GPU's L1 serves a warp: one
// request per warp-wide execution of the load, the 32-byte sectors it touches, the bytes its lanes
// use (simt::LaunchOptions::load_stats). Shared-memory loads a kernel wants judged go through
// load_shared<V>(p) the same way, judged by bank conflicts.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/platform.hpp"

namespace kvlab::simt {

inline constexpr int kWarpSize = 32;

/// Sixteen bytes moved by one load or store instruction (LDG.128 / LDS.128 / STS.128).
struct alignas(16) Vec16 {
  std::uint32_t w[4];
};

/// An aligned store of a V to shared (or any) memory: `p` must be aligned to sizeof(V). On the
/// device one vector instruction; on the host a memcpy, which keeps the access free of type
/// punning. (Loads that are to be judged go through ex.load_global / ex.load_shared.)
template <class V>
KVLAB_HD KVLAB_FORCEINLINE void store_aligned(void* p, const V& v) {
#if defined(__CUDA_ARCH__)
  *static_cast<V*>(p) = v;
#else
  std::memcpy(p, &v, sizeof(V));
#endif
}

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

[[nodiscard]] KVLAB_HD constexpr unsigned long long volume(Dim3 d) noexcept {
  return static_cast<unsigned long long>(d.x) * d.y * d.z;
}

/// CUDA's linear thread index within the block: x fastest, then y, then z. Warps are formed
/// from consecutive linear indices.
template <class Exec>
[[nodiscard]] KVLAB_HD KVLAB_FORCEINLINE unsigned linear_thread_idx(const Exec& ex) {
  const Dim3 t = ex.thread_idx(), b = ex.block_dim();
  return t.x + b.x * (t.y + b.y * t.z);
}
template <class Exec>
[[nodiscard]] KVLAB_HD KVLAB_FORCEINLINE unsigned lane_id(const Exec& ex) {
  return linear_thread_idx(ex) % kWarpSize;
}
template <class Exec>
[[nodiscard]] KVLAB_HD KVLAB_FORCEINLINE unsigned warp_id(const Exec& ex) {
  return linear_thread_idx(ex) / kWarpSize;
}

/// Carves `count` elements of T from the block's dynamic shared memory (same call sequence in
/// every thread of the block gives every thread the same pointers).
template <class T, class Exec>
[[nodiscard]] KVLAB_HD KVLAB_FORCEINLINE T* shared_array(Exec& ex, std::size_t count) {
  return ex.template shared<T>(count);
}

/// Bytes a sequence of shared_array() calls needs: call `add<T>(count)` in the same order.
struct SharedLayout {
  std::size_t bytes = 0;
  template <class T>
  KVLAB_HD constexpr SharedLayout& add(std::size_t count) {
    bytes = (bytes + alignof(T) - 1) / alignof(T) * alignof(T) + count * sizeof(T);
    return *this;
  }
};

/// Butterfly (xor) reduction over aligned segments of `Width` lanes (a power of two <= 32): every
/// lane of a segment ends with the segment's reduction. Width = 32 is a whole-warp reduction.
template <int Width = kWarpSize, class Exec, class T, class Op>
[[nodiscard]] KVLAB_HD KVLAB_FORCEINLINE T segment_reduce(Exec& ex, T v, Op op) {
  static_assert(Width >= 1 && Width <= kWarpSize && (Width & (Width - 1)) == 0, "Width: power of two <= 32");
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int mask = Width / 2; mask > 0; mask /= 2) v = op(v, ex.shfl_xor(v, mask, Width));
  return v;
}

struct SumOp {
  template <class T>
  KVLAB_HD KVLAB_FORCEINLINE T operator()(T a, T b) const {
    return a + b;
  }
};
struct MaxOp {
  template <class T>
  KVLAB_HD KVLAB_FORCEINLINE T operator()(T a, T b) const {
    return a < b ? b : a;
  }
};
struct MinOp {
  template <class T>
  KVLAB_HD KVLAB_FORCEINLINE T operator()(T a, T b) const {
    return b < a ? b : a;
  }
};

template <int Width = kWarpSize, class Exec, class T>
[[nodiscard]] KVLAB_HD KVLAB_FORCEINLINE T warp_sum(Exec& ex, T v) {
  return segment_reduce<Width>(ex, v, SumOp{});
}
template <int Width = kWarpSize, class Exec, class T>
[[nodiscard]] KVLAB_HD KVLAB_FORCEINLINE T warp_max(Exec& ex, T v) {
  return segment_reduce<Width>(ex, v, MaxOp{});
}
template <int Width = kWarpSize, class Exec, class T>
[[nodiscard]] KVLAB_HD KVLAB_FORCEINLINE T warp_min(Exec& ex, T v) {
  return segment_reduce<Width>(ex, v, MinOp{});
}

/// The source lane a shuffle reads, with CUDA's width semantics (PTX shfl.sync with
/// c = ((32 - width) << 8) | clamp): returns -1 where the lane keeps its own value.
/// mode: 0 idx, 1 up, 2 down, 3 bfly (xor).
[[nodiscard]] KVLAB_HD constexpr int shuffle_source(int mode, int lane, int b, int width) noexcept {
  const int segmask = (kWarpSize - width) & 0x1f;
  const int clamp = mode == 1 ? 0 : 0x1f;
  const int min_lane = lane & segmask;
  const int max_lane = min_lane | (clamp & ~segmask);
  int j = 0;
  bool ok = false;
  switch (mode) {
    case 0:
      j = min_lane | (b & ~segmask & 0x1f);
      ok = j <= max_lane;
      break;
    case 1:
      j = lane - b;
      ok = j >= max_lane;
      break;
    case 2:
      j = lane + b;
      ok = j <= max_lane;
      break;
    default:
      j = lane ^ (b & 0x1f);
      ok = j <= max_lane;
      break;
  }
  return ok ? j : -1;
}

#if defined(__CUDACC__)
/// Device implementation: thin wrappers over CUDA built-ins. Members are __host__ __device__ so
/// that host passes of nvcc accept __host__ __device__ kernel templates instantiated with it; the
/// host bodies are never called.
class CudaExec {
 public:
  KVLAB_HD KVLAB_FORCEINLINE CudaExec() {
#if defined(__CUDA_ARCH__)
    // Lanes of this thread's warp that exist (blockDim need not be a multiple of 32).
    const unsigned n = blockDim.x * blockDim.y * blockDim.z;
    const unsigned base = linear_thread_idx(*this) / kWarpSize * kWarpSize;
    warp_mask_ = n - base >= kWarpSize ? 0xffffffffu : (1u << (n - base)) - 1u;
#endif
  }
  KVLAB_HD KVLAB_FORCEINLINE Dim3 block_idx() const {
#if defined(__CUDA_ARCH__)
    return {blockIdx.x, blockIdx.y, blockIdx.z};
#else
    return {};
#endif
  }
  KVLAB_HD KVLAB_FORCEINLINE Dim3 thread_idx() const {
#if defined(__CUDA_ARCH__)
    return {threadIdx.x, threadIdx.y, threadIdx.z};
#else
    return {};
#endif
  }
  KVLAB_HD KVLAB_FORCEINLINE Dim3 block_dim() const {
#if defined(__CUDA_ARCH__)
    return {blockDim.x, blockDim.y, blockDim.z};
#else
    return {};
#endif
  }
  KVLAB_HD KVLAB_FORCEINLINE Dim3 grid_dim() const {
#if defined(__CUDA_ARCH__)
    return {gridDim.x, gridDim.y, gridDim.z};
#else
    return {};
#endif
  }
  KVLAB_HD KVLAB_FORCEINLINE void sync_threads() {
#if defined(__CUDA_ARCH__)
    __syncthreads();
#endif
  }
  template <class T>
  KVLAB_HD KVLAB_FORCEINLINE T shfl(T v, int src_lane, int width = kWarpSize) {
    return exchange(v, 0, src_lane, width);
  }
  template <class T>
  KVLAB_HD KVLAB_FORCEINLINE T shfl_up(T v, int delta, int width = kWarpSize) {
    return exchange(v, 1, delta, width);
  }
  template <class T>
  KVLAB_HD KVLAB_FORCEINLINE T shfl_down(T v, int delta, int width = kWarpSize) {
    return exchange(v, 2, delta, width);
  }
  template <class T>
  KVLAB_HD KVLAB_FORCEINLINE T shfl_xor(T v, int lane_mask, int width = kWarpSize) {
    return exchange(v, 3, lane_mask, width);
  }
  /// One global load of a V (p aligned to sizeof(V)); the emulator's version checks and traces it.
  template <class V>
  KVLAB_HD KVLAB_FORCEINLINE V load_global(const void* p) {
#if defined(__CUDA_ARCH__)
    if constexpr (sizeof(V) == 16) {  // one LDG.128 through the read-only path: KV is not written here
      const uint4 u = __ldg(static_cast<const uint4*>(p));
      V v;
      memcpy(&v, &u, sizeof(V));
      return v;
    } else {
      return *static_cast<const V*>(p);
    }
#else
    (void)p;
    return V{};
#endif
  }
  /// One shared-memory load of a V (p aligned to sizeof(V)); the emulator's version checks and
  /// traces it.
  template <class V>
  KVLAB_HD KVLAB_FORCEINLINE V load_shared(const void* p) {
#if defined(__CUDA_ARCH__)
    return *static_cast<const V*>(p);
#else
    (void)p;
    return V{};
#endif
  }
  template <class T>
  KVLAB_HD KVLAB_FORCEINLINE T* shared(std::size_t count) {
#if defined(__CUDA_ARCH__)
    extern __shared__ __align__(16) unsigned char kvlab_simt_smem[];
    const std::size_t at = (offset_ + alignof(T) - 1) / alignof(T) * alignof(T);
    offset_ = at + count * sizeof(T);
    unsigned avail;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(avail));
    if (offset_ > avail) __trap();  // the launcher passed too little dynamic shared memory
    return reinterpret_cast<T*>(kvlab_simt_smem + at);
#else
    (void)count;
    return nullptr;
#endif
  }

 private:
  template <class T>
  KVLAB_HD KVLAB_FORCEINLINE T exchange(T v, int mode, int b, int width) {
    static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8,
                  "shuffles move trivially copyable values of <= 8 bytes");
#if defined(__CUDA_ARCH__)
    if constexpr (sizeof(T) <= 4) {
      unsigned u = 0;
      memcpy(&u, &v, sizeof(T));
      switch (mode) {
        case 0:
          u = __shfl_sync(warp_mask_, u, b, width);
          break;
        case 1:
          u = __shfl_up_sync(warp_mask_, u, static_cast<unsigned>(b), width);
          break;
        case 2:
          u = __shfl_down_sync(warp_mask_, u, static_cast<unsigned>(b), width);
          break;
        default:
          u = __shfl_xor_sync(warp_mask_, u, b, width);
          break;
      }
      memcpy(&v, &u, sizeof(T));
    } else {
      unsigned long long u = 0;
      memcpy(&u, &v, sizeof(T));
      switch (mode) {
        case 0:
          u = __shfl_sync(warp_mask_, u, b, width);
          break;
        case 1:
          u = __shfl_up_sync(warp_mask_, u, static_cast<unsigned>(b), width);
          break;
        case 2:
          u = __shfl_down_sync(warp_mask_, u, static_cast<unsigned>(b), width);
          break;
        default:
          u = __shfl_xor_sync(warp_mask_, u, b, width);
          break;
      }
      memcpy(&v, &u, sizeof(T));
    }
#else
    (void)mode, (void)b, (void)width;
#endif
    return v;
  }

  unsigned warp_mask_ = 0xffffffffu;
  std::size_t offset_ = 0;
};
#endif  // __CUDACC__

}  // namespace kvlab::simt
