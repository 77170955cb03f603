#pragma once
// Memory resources in the style of RAPIDS RMM: a public, non-virtual allocate/deallocate pair over
// private do_ hooks, so every resource validates arguments the same way and adaptors (statistics,
// limiting) compose by wrapping an upstream. A resource only supplies bytes; which sequence owns
// which bytes is the KV backend's policy.
#include <cstddef>
#include <string>

#include "alloc/core/device.hpp"

namespace kvlab {

inline constexpr std::size_t kDefaultAlignment = 256;  // cudaMalloc's guarantee; also a cache-line multiple

class MemoryResource {
 public:
  MemoryResource() = default;
  MemoryResource(const MemoryResource&) = delete;
  MemoryResource& operator=(const MemoryResource&) = delete;
  virtual ~MemoryResource() = default;

  /// Returns `bytes` bytes aligned to `alignment` (a power of two). Throws OutOfMemory when the
  /// resource cannot supply them and InvalidArgument on a bad alignment. bytes == 0 returns nullptr.
  [[nodiscard]] void* allocate(std::size_t bytes, std::size_t alignment = kDefaultAlignment);
  /// Returns memory obtained from allocate() with the same bytes and alignment.
  void deallocate(void* p, std::size_t bytes, std::size_t alignment = kDefaultAlignment) noexcept;

  [[nodiscard]] Device device() const noexcept { return do_device(); }
  [[nodiscard]] std::string name() const { return do_name(); }

 private:
  virtual void* do_allocate(std::size_t bytes, std::size_t alignment) = 0;
  virtual void do_deallocate(void* p, std::size_t bytes, std::size_t alignment) noexcept = 0;
  [[nodiscard]] virtual Device do_device() const noexcept = 0;
  [[nodiscard]] virtual std::string do_name() const = 0;
};

/// Page-aligned host memory from the system allocator; large blocks are not touched (first-touch
/// commit), so a host KV region can stand for a large GPU budget without costing RAM until used.
class HostMemoryResource final : public MemoryResource {
 private:
  void* do_allocate(std::size_t bytes, std::size_t alignment) override;
  void do_deallocate(void* p, std::size_t bytes, std::size_t alignment) noexcept override;
  [[nodiscard]] Device do_device() const noexcept override { return Device::host; }
  [[nodiscard]] std::string do_name() const override { return "host"; }
};

/// The process-wide host resource.
[[nodiscard]] HostMemoryResource& host_memory_resource();

}  // namespace kvlab
