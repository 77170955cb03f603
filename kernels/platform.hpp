#pragma once
// Annotations shared by host and CUDA compilation of the same kernel source.
#if defined(__CUDACC__)
#define KVLAB_HD __host__ __device__
#define KVLAB_DEVICE __device__
#define KVLAB_FORCEINLINE __forceinline__
#else
#define KVLAB_HD
#define KVLAB_DEVICE
#define KVLAB_FORCEINLINE inline __attribute__((always_inline))
#endif
