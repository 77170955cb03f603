// vmm-SIZE[-mega][-overlap][-eagerN][-nodefer][-prefix]: vAttention's virtually contiguous
// per-sequence buffers over pages mapped on demand (vmm/).
#include <fmt/format.h>

#include <charconv>

#include "alloc/core/error.hpp"
#include "serving/replay/families/families.hpp"
#include "vmm/vmm_backend.hpp"

namespace kvlab {

namespace {
using family::kMaxBookkeptUnits;
using family::suffix_number;

/// "vmm-64k" -> 64 KiB page, per-layer layout; "vmm-2m-mega" -> 2 MiB page, megacache layout.
std::unique_ptr<KvBackend> make_vmm_backend(std::string_view name, const BackendOptions& options) {
  std::string_view rest = name.substr(4);  // after "vmm-"
  VmmConfig c;
  c.deferred_reclamation = true;  // vAttention's default; cached pages count as free (docs/vmm.md)
  // Options after the page size, each switchable so its effect can be measured:
  //   -mega (layers inside a token), -overlap (background mapping), -eagerN (map N tokens ahead),
  //   -nodefer (unmap a finished sequence's pages at once), -prefix (page-granular prefix sharing).
  std::string_view size = rest.substr(0, rest.find('-'));
  for (std::string_view opts = rest.substr(size.size()); !opts.empty();) {
    opts.remove_prefix(1);  // the dash
    const std::string_view opt = opts.substr(0, opts.find('-'));
    opts.remove_prefix(opt.size());
    if (opt == "mega") {
      c.layout = VmmLayout::megacache;
    } else if (opt == "overlap") {
      c.overlap = true;
    } else if (opt == "nodefer") {
      c.deferred_reclamation = false;
    } else if (opt == "prefix") {
      c.prefix_cache = true;
    } else if (opt.starts_with("eager") && suffix_number(opt, "eager") > 0) {
      c.eager_tokens = suffix_number(opt, "eager");
    } else {
      KVLAB_THROW(InvalidArgument, fmt::format("backend '{}': unknown vmm option '{}' (options: -mega, -overlap, "
                                               "-eagerN, -nodefer, -prefix)",
                                               name, opt));
    }
  }
  rest = size;
  unsigned long long n = 0;
  const auto [ptr, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), n);
  const std::string_view unit = rest.substr(static_cast<std::size_t>(ptr - rest.data()));
  const unsigned long long scale = unit == "k" ? 1ull << 10 : unit == "m" ? 1ull << 20 : unit == "g" ? 1ull << 30 : 0;
  if (ec != std::errc() || ptr == rest.data() || scale == 0 || n == 0) {
    KVLAB_THROW(InvalidArgument, fmt::format("backend '{}': expected vmm-<page size>[-mega] with the size in k, m or g "
                                             "(vmm-4k, vmm-64k, vmm-256k, vmm-2m)",
                                             name));
  }
  if (n > (1ull << 30) / scale)  // a page is a unit of mapping: past 1 GiB it is the whole cache
    KVLAB_THROW(InvalidArgument, fmt::format("backend '{}': the page size must be at most 1g (1 GiB)", name));
  c.page_bytes = static_cast<std::size_t>(n * scale);
  if (options.capacity_bytes / c.page_bytes > kMaxBookkeptUnits)  // as for paged blocks (make_paged_backend)
    KVLAB_THROW(InvalidArgument,
                fmt::format("backend '{}': --capacity-gib gives {} pages, more than {} (their "
                            "bookkeeping alone would take gigabytes); use a smaller capacity or larger "
                            "pages",
                            name, options.capacity_bytes / c.page_bytes, kMaxBookkeptUnits));
  if (c.page_bytes % 4096 != 0) {
    KVLAB_THROW(InvalidArgument,
                fmt::format("backend '{}': the page size ({} bytes) must be a multiple of 4 KiB", name, c.page_bytes));
  }
  c.model = options.model;
  c.capacity_bytes = options.capacity_bytes;
  c.max_seq_len = options.max_seq_len;
  const Device device = options.device != nullptr   ? options.device->device()
                        : options.memory != nullptr ? options.memory->device()
                                                    : Device::host;
  if (device != Device::host && options.device != nullptr && c.page_bytes % options.device->granularity() != 0) {
    // Checked even for accounting only, so a run fails before its first replay (the backend checks
    // again against its driver).
    KVLAB_THROW(
        InvalidArgument,
        fmt::format("backend '{}' on --device {}: vmm page size {} is not a multiple of the CUDA driver's "
                    "granularity ({}): use vmm-{} or a multiple of it (smaller pages need vAttention's "
                    "modified driver)",
                    name, options.device->spec().name(), page_size_name(c.page_bytes),
                    page_size_name(options.device->granularity()), page_size_name(options.device->granularity())));
  }
  if (options.memory != nullptr) {
    // Storage: KV bytes come from the VM driver of the device; the resource itself only serves
    // the per-batch arrays on a device.
    c.memory = options.memory;
    KVLAB_EXPECTS(device == Device::host || options.device != nullptr,
                  fmt::format("backend '{}' on a device needs its DeviceContext", name));
    c.driver = make_vm_driver(device == Device::host ? nullptr : options.device, options.capacity_bytes,
                              options.max_map_count);
  }
  return std::make_unique<VmmBackend>(std::move(c));
}

}  // namespace

BackendFamily vmm_backend_family() {
  // Forms whose pages fit the conformance suite's tiny model (300-2000 token budgets): a vmm-64k
  // page holds 512 of its tokens per tensor, vmm-2m 16384.
  return {"vmm-",
          "vmm-SIZE[-mega][-overlap][-eagerN][-nodefer][-prefix] (SIZE: 4k, 64k, 2m, ...)",
          {"vmm-4k", "vmm-16k", "vmm-64k-mega"},
          make_vmm_backend};
}

}  // namespace kvlab
