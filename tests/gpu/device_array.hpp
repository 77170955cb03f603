#pragma once
// Test helper for the GPU suite: device copies of a host vector, freed at scope exit.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <vector>

namespace kvlab::testing {

template <class T>
struct DeviceArray {
  T* ptr = nullptr;
  std::size_t n = 0;
  explicit DeviceArray(const std::vector<T>& host) : n(host.size()) {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&ptr), std::max<std::size_t>(n, 1) * sizeof(T)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(ptr, host.data(), n * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DeviceArray() { cudaFree(ptr); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  std::vector<T> to_host() const {
    std::vector<T> h(n);
    EXPECT_EQ(cudaMemcpy(h.data(), ptr, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
};

}  // namespace kvlab::testing
