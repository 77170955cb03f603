#include "serving/replay/backend_factory.hpp"

#include "alloc/cuda/cuda_runtime.hpp"
#include "alloc/core/error.hpp"
#include "alloc/faults/fault_injection.hpp"
#include "alloc/memory/huge_pages.hpp"
#include "serving/replay/families/families.hpp"
#include "vmm/posix_vm_driver.hpp"
#if KVLAB_HAS_CUDA_HEADERS
#include "alloc/cuda/cuda_driver_log.hpp"
#include "alloc/cuda/cuda_vmm_memory_resource.hpp"
#include "alloc/cuda/emulated/cuda_driver_double.hpp"
#include "vmm/cuda_vm_driver.hpp"
#endif
#if KVLAB_HAS_CUDA
#include "alloc/cuda/cuda_check.hpp"
#include "alloc/cuda/cuda_memory_resource.hpp"
#endif

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <mutex>

namespace kvlab {

// --- devices ---

struct DeviceContext::Impl {
  DeviceSpec spec;
  std::string description;
#if KVLAB_HAS_CUDA_HEADERS
  std::unique_ptr<CudaDriverDouble> dbl;  // emulated: destroyed last, after everything using it
  std::unique_ptr<CudaVmmMemoryResource> device_memory;
  const CudaDriverApi* api = nullptr;
#endif
  std::unique_ptr<MemoryResource> swap;  // pinned host memory on a GPU
  std::vector<std::string> reported;     // what problems() found last time
};

namespace {
#if KVLAB_HAS_CUDA_HEADERS
constexpr std::size_t kStockGranularity = std::size_t{2} << 20;  // what NVIDIA drivers report

void open_emulated(DeviceContext::Impl& d, std::size_t device_bytes) {
  CudaDriverDoubleConfig dc;
  dc.granularity = kStockGranularity;
  dc.capacity =
      device_bytes == 0 ? std::size_t{8} << 30 : (device_bytes + dc.granularity - 1) / dc.granularity * dc.granularity;
  dc.device_name = "kvlab emulated GPU (CUDA driver double)";
  d.dbl = std::make_unique<CudaDriverDouble>(dc);
  d.api = &logged_if_requested(d.dbl->api());  // KVLAB_DRIVER_LOG=FILE logs the double's calls too
  d.device_memory = std::make_unique<CudaVmmMemoryResource>(*d.api, Device::emulated, 0);
  d.description = fmt::format(
      "emulated GPU (CUDA driver double, {} MiB granularity, {} MiB; CUDA kernels under the "
      "SIMT emulator)",
      dc.granularity >> 20, dc.capacity >> 20);
}

/// Device `ordinal`'s name from the driver (cuda_status() names device 0 only).
std::string cuda_device_name(const CudaDriverApi& api, int ordinal) {
  CUdevice dev = 0;
  char name[256] = {};
  if (api.cuDeviceGet(&dev, ordinal) != CUDA_SUCCESS || api.cuDeviceGetName(name, sizeof name, dev) != CUDA_SUCCESS)
    return "unnamed";
  return name;
}

void open_cuda(DeviceContext::Impl& d) {
  const CudaStatus& status = cuda_status();
  if (!status.available)
    throw Error("--device " + d.spec.name() + ": no CUDA GPU found (" + status.message +
                "); use --device host, or --device emulated to run the CUDA code path on the host");
  if (d.spec.index >= status.device_count)  // like a missing GPU: a fact of this machine, exit 1
    throw Error(fmt::format("--device {}: this machine has {} CUDA device(s) (cuda:0..cuda:{})", d.spec.name(),
                            status.device_count, status.device_count - 1));
#if KVLAB_HAS_CUDA
  KVLAB_CUDA_TRY(cudaSetDevice(d.spec.index));  // the runtime (kernels, copies) on the same GPU
  d.swap = std::make_unique<CudaPinnedMemoryResource>();
#endif
  d.api = &cuda_driver();
  d.device_memory = std::make_unique<CudaVmmMemoryResource>(*d.api, Device::cuda, d.spec.index);
  d.description = fmt::format("CUDA device {} ({}; driver {}, runtime {})", d.spec.index,
                              cuda_device_name(*d.api, d.spec.index), status.driver_version, status.runtime_version);
}
#endif
}  // namespace

DeviceContext::DeviceContext(const DeviceSpec& spec, std::size_t device_bytes) : impl_(std::make_unique<Impl>()) {
  impl_->spec = spec;
  if (spec.kind == Device::host) {
    impl_->description = "host memory";
    return;
  }
#if KVLAB_HAS_CUDA_HEADERS
  if (spec.kind == Device::emulated) {
    open_emulated(*impl_, device_bytes);
  } else {
    open_cuda(*impl_);
  }
#else
  (void)device_bytes;
  KVLAB_THROW(InvalidArgument, "--device " + spec.name() + " needs a build with the CUDA toolkit headers");
#endif
}

DeviceContext::~DeviceContext() = default;

const DeviceSpec& DeviceContext::spec() const noexcept { return impl_->spec; }

MemoryResource& DeviceContext::memory() noexcept {
#if KVLAB_HAS_CUDA_HEADERS
  if (impl_->device_memory) return *impl_->device_memory;
#endif
  return huge_page_host_memory_resource();  // the host kernels stream these pools
}

MemoryResource* DeviceContext::swap_memory() noexcept { return impl_->swap.get(); }

std::size_t DeviceContext::granularity() const noexcept {
#if KVLAB_HAS_CUDA_HEADERS
  if (impl_->device_memory) return impl_->device_memory->granularity();
#endif
  return 0;
}

const CudaDriverApi& DeviceContext::driver_api() const {
#if KVLAB_HAS_CUDA_HEADERS
  if (impl_->api != nullptr) return *impl_->api;
#endif
  KVLAB_THROW(InvalidArgument, "--device " + impl_->spec.name() + " has no CUDA driver");
}

CudaDriverDouble* DeviceContext::driver_double() noexcept {
#if KVLAB_HAS_CUDA_HEADERS
  return impl_->dbl.get();
#else
  return nullptr;
#endif
}

void DeviceContext::inject_driver_faults(FaultInjector* faults) {
#if KVLAB_HAS_CUDA_HEADERS
  if (!impl_->dbl) return;
  impl_->dbl->use_fault_injector(faults, {CuEntry::cuMemCreate, CuEntry::cuMemMap, CuEntry::cuMemSetAccess,
                                          CuEntry::cuMemUnmap, CuEntry::cuMemRelease, CuEntry::cuMemAddressReserve,
                                          CuEntry::cuMemAddressFree, CuEntry::cuCtxSynchronize});
#else
  (void)faults;
#endif
}

void DeviceContext::refuse_unmaps(bool refuse) {
#if KVLAB_HAS_CUDA_HEADERS
  if (impl_->dbl) {
    if (refuse) {
      impl_->dbl->fail_randomly(1.0, 1, CUDA_ERROR_UNKNOWN, {CuEntry::cuMemUnmap});
    } else {
      impl_->dbl->clear_faults();
    }
    return;
  }
#endif
  (void)refuse;
  KVLAB_THROW(InvalidArgument, "--device " + impl_->spec.name() + ": only the emulated device can refuse unmaps");
}

std::string DeviceContext::problems() {
  std::vector<std::string> now;  // everything the device holds or refused right now, one line each
#if KVLAB_HAS_CUDA_HEADERS
  if (!impl_->device_memory) return {};
  impl_->device_memory->flush_pending();  // deallocations a fault deferred
  const std::size_t pending = impl_->device_memory->pending_frees();
  if (!impl_->dbl) {  // a GPU: what the memory resource still holds is all kvlab can see
    const std::size_t live = impl_->device_memory->live_allocations();
    if (live + pending > 0)
      now.push_back(fmt::format("{} device allocation(s) still live, {} deallocation(s) the driver refused{}", live,
                                pending, pending > 0 ? " (" + impl_->device_memory->refusals() + ")" : std::string()));
  } else {
    if (pending > 0)
      now.push_back(
          fmt::format("{} deallocation(s) the driver refused ({})", pending, impl_->device_memory->refusals()));
    const CudaDriverDoubleUsage u = impl_->dbl->usage();
    if (u.reservations + u.handles + u.allocations + u.mappings > 0) {
      // The memory resource's own primary-context reference is not a leak; anything else is.
      const std::string report = impl_->dbl->leak_report();
      for (std::size_t at = 0; at < report.size();) {
        const std::size_t end = report.find('\n', at);
        const std::string line = report.substr(at, end - at);
        if (!line.starts_with("primary context")) now.push_back(line);
        at = end == std::string::npos ? report.size() : end + 1;
      }
    }
    for (const std::string& v : impl_->dbl->violations()) now.push_back(v);
  }
#endif
  // Only what is new since the last call: a leak a vmm backend's teardown left (a mapping it could
  // not unmap stays in the driver) is that backend's, not every later one's.
  std::string out;
  for (const std::string& line : now)
    if (std::find(impl_->reported.begin(), impl_->reported.end(), line) == impl_->reported.end())
      out += (out.empty() ? "" : "; ") + line;
  impl_->reported = std::move(now);
  return out;
}

std::string DeviceContext::describe() const { return impl_->description; }

std::shared_ptr<VmDriver> make_vm_driver(DeviceContext* device, std::size_t host_capacity, std::int64_t max_map_count) {
  if (device == nullptr || device->device() == Device::host)
    return std::make_shared<PosixVmDriver>(host_capacity, max_map_count);
#if KVLAB_HAS_CUDA_HEADERS
  if (device->device() == Device::emulated)
    return std::make_shared<CudaVmDriver>(device->driver_api(), CudaVmOptions{0, false, true});
  return std::make_shared<CudaVmDriver>(device->driver_api(), CudaVmOptions{device->spec().index, false, false});
#else
  KVLAB_THROW(InvalidArgument, "--device " + device->spec().name() + " needs a build with the CUDA headers");
#endif
}

// --- backends ---

namespace family {

long long suffix_number(std::string_view name, std::string_view prefix) {
  const std::string_view rest = name.substr(prefix.size());
  long long v = -1;
  const auto [ptr, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), v);
  return ec == std::errc() && ptr == rest.data() + rest.size() && !rest.empty() ? v : -1;
}

std::size_t parse_page_size(std::string_view text) {
  unsigned long long n = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  const std::string_view unit = text.substr(static_cast<std::size_t>(ptr - text.data()));
  const unsigned long long scale = unit == "k" ? 1ull << 10 : unit == "m" ? 1ull << 20 : unit == "g" ? 1ull << 30 : 0;
  if (ec != std::errc() || ptr == text.data() || scale == 0 || n == 0 || n > (1ull << 30) / scale) return 0;
  return static_cast<std::size_t>(n * scale);
}

Device device_of(const BackendOptions& options) {
  return options.device != nullptr   ? options.device->device()
         : options.memory != nullptr ? options.memory->device()
                                     : Device::host;
}

}  // namespace family

std::string default_compare_backends() {
  // vmm at vAttention's two page sizes, the 2 MiB one also with layers interleaved (megacache).
  return "contiguous-max,contiguous-pow2,contiguous-oracle,paged-16,paged-64,vmm-64k,vmm-2m,vmm-2m-mega";
}

namespace {
struct Registry {
  std::mutex mutex;
  std::vector<BackendFamily> families;
};

/// The registry, with the built-in families entered on first use (so no static-initialisation
/// order matters for code that registers more). One line per family (serving/replay/families/).
Registry& registry() {
  static Registry r{
      {}, {contiguous_backend_family(), paged_backend_family(), vmm_backend_family(), elastic_backend_family()}};
  return r;
}
}  // namespace

void register_backend_family(BackendFamily family) {
  KVLAB_EXPECTS(!family.prefix.empty(), "a backend family needs a name prefix");
  KVLAB_EXPECTS(static_cast<bool>(family.make), fmt::format("backend family '{}' has no maker", family.prefix));
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  for (const BackendFamily& f : r.families) {
    const bool clash = f.prefix.starts_with(family.prefix) || family.prefix.starts_with(f.prefix);
    KVLAB_EXPECTS(!clash, fmt::format("backend family '{}' clashes with '{}'", family.prefix, f.prefix));
  }
  r.families.push_back(std::move(family));
}

std::vector<BackendFamily> backend_families() {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  return r.families;
}

bool backend_shares_memory(std::string_view name) {
  for (const BackendFamily& f : backend_families())
    if (name.starts_with(f.prefix)) return f.shares_memory;
  return false;
}

std::vector<std::string> backend_forms() {
  std::vector<std::string> forms;
  for (const BackendFamily& f : backend_families()) forms.insert(forms.end(), f.test_forms.begin(), f.test_forms.end());
  return forms;
}

std::unique_ptr<KvBackend> make_backend(std::string_view name, const BackendOptions& options) {
  const std::vector<BackendFamily> families = backend_families();
  for (const BackendFamily& f : families) {
    if (!name.starts_with(f.prefix)) continue;
    if (options.budget != nullptr && !f.shares_memory)
      KVLAB_THROW(InvalidArgument, fmt::format("backend '{}' holds its whole capacity and cannot share memory with "
                                               "other backends; elastic-B backends can",
                                               name));
    return f.make(name, options);
  }
  std::vector<std::string> known;
  for (const BackendFamily& f : families) known.push_back(f.usage);
  KVLAB_THROW(InvalidArgument, fmt::format("unknown backend '{}' (known: {})", name, fmt::join(known, ", ")));
}

}  // namespace kvlab
