#include "experiments/backend_factory.hpp"

#include "alloc/contiguous_backend.hpp"
#include "alloc/error.hpp"
#include "paged/paged_backend.hpp"
#include "vmm/posix_vm_driver.hpp"
#include "vmm/vmm_backend.hpp"
#if KVLAB_HAS_CUDA_HEADERS
#include "vmm/cuda_vm_driver.hpp"
#endif

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <charconv>
#include <mutex>

namespace kvlab {

std::string default_compare_backends() {
  // vmm at vAttention's two page sizes, the 2 MiB one also with layers interleaved (megacache).
  return "contiguous-max,contiguous-pow2,contiguous-oracle,paged-16,paged-64,vmm-64k,vmm-2m,vmm-2m-mega";
}

namespace {
/// The integer after a prefix ("paged-16" -> 16), or -1 when the rest is not a plain number.
long long suffix_number(std::string_view name, std::string_view prefix) {
  const std::string_view rest = name.substr(prefix.size());
  long long v = -1;
  const auto [ptr, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), v);
  return ec == std::errc() && ptr == rest.data() + rest.size() && !rest.empty() ? v : -1;
}

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
  if (ec != std::errc() || ptr == rest.data() || scale == 0 || n == 0 || n > (1ull << 40) / scale) {
    KVLAB_THROW(InvalidArgument, fmt::format("backend '{}': expected vmm-<page size>[-mega] with the size in k or m "
                                             "(vmm-4k, vmm-64k, vmm-256k, vmm-2m)",
                                             name));
  }
  c.page_bytes = static_cast<std::size_t>(n * scale);
  if (c.page_bytes % 4096 != 0) {
    KVLAB_THROW(InvalidArgument,
                fmt::format("backend '{}': the page size ({} bytes) must be a multiple of 4 KiB", name, c.page_bytes));
  }
  c.model = options.model;
  c.capacity_bytes = options.capacity_bytes;
  c.max_seq_len = options.max_seq_len;
  if (options.memory != nullptr) {
    // Storage: KV bytes come from the VM driver of the resource's device; the resource itself only
    // serves the per-batch arrays on a GPU.
    c.memory = options.memory;
    if (options.memory->device() == Device::host) {
      c.driver = std::make_shared<PosixVmDriver>(options.capacity_bytes);
    } else {
#if KVLAB_HAS_CUDA_HEADERS
      c.driver = std::make_shared<CudaVmDriver>(cuda_driver());
#else
      KVLAB_THROW(InvalidArgument, fmt::format("backend '{}' on a GPU needs a build with the CUDA headers", name));
#endif
    }
  }
  return std::make_unique<VmmBackend>(std::move(c));
}

std::unique_ptr<KvBackend> make_contiguous_backend(std::string_view name, const BackendOptions& options) {
  ContiguousConfig c;
  c.model = options.model;
  c.capacity_bytes = options.capacity_bytes;
  c.max_seq_len = options.max_seq_len;
  c.memory = options.memory;
  c.policy = parse_reservation_policy(name.substr(std::string_view("contiguous-").size()));
  return std::make_unique<ContiguousBackend>(std::move(c));
}

/// paged-B or paged-B-hash / paged-B-radix (prefix caching, docs/prefix-caching.md);
/// paged-B-hash-hostG adds a host tier of G GiB to the hash cache.
std::unique_ptr<KvBackend> make_paged_backend(std::string_view name, const BackendOptions& options) {
  std::string_view rest = name.substr(std::string_view("paged-").size());
  std::size_t host_gib = 0;
  if (const auto host = rest.find("-host"); host != std::string_view::npos) {
    const long long g = suffix_number(rest.substr(host + 1), "host");
    if (g < 1 || g > (1 << 20)) KVLAB_THROW(InvalidArgument, fmt::format("backend '{}': host tier must be 1..1048576 GiB", name));
    host_gib = static_cast<std::size_t>(g);
    rest = rest.substr(0, host);
  }
  PrefixCacheMode cache = PrefixCacheMode::none;
  if (const auto dash = rest.find('-'); dash != std::string_view::npos) {
    cache = parse_prefix_cache_mode(rest.substr(dash + 1));
    rest = rest.substr(0, dash);
  }
  const long long bs = suffix_number(rest, "");
  if (bs < 1 || bs > 1024)
    KVLAB_THROW(InvalidArgument, fmt::format("backend '{}': block size must be 1..1024 tokens", name));
  PagedConfig c;
  c.model = options.model;
  c.capacity_bytes = options.capacity_bytes;
  c.max_seq_len = options.max_seq_len;
  c.memory = options.memory;
  c.block_size = static_cast<std::int32_t>(bs);
  c.prefix_cache = cache;
  c.host_cache_bytes = host_gib << 30;
  if (host_gib > 0 && cache != PrefixCacheMode::hash)
    KVLAB_THROW(InvalidArgument, fmt::format("backend '{}': a host tier needs the hash prefix cache", name));
  return std::make_unique<PagedBackend>(std::move(c));
}

struct Registry {
  std::mutex mutex;
  std::vector<BackendFamily> families;
};

/// The registry, with the built-in families entered on first use (so no static-initialisation
/// order matters for code that registers more).
Registry& registry() {
  static Registry r{{},
                    {{"contiguous-", "contiguous-max|pow2|oracle",
                      {"contiguous-max", "contiguous-pow2", "contiguous-oracle"}, make_contiguous_backend},
                     {"paged-", "paged-B[-hash[-hostG]|-radix] (B = 1..1024 tokens, G GiB of host tier)",
                      {"paged-1", "paged-7", "paged-16", "paged-256", "paged-16-hash", "paged-16-radix"},
                      make_paged_backend},
                     // vmm forms whose pages fit the conformance suite's tiny model (300-2000 token
                     // budgets): a vmm-64k page holds 512 of its tokens per tensor, vmm-2m 16384.
                     {"vmm-", "vmm-SIZE[-mega][-overlap][-eagerN][-nodefer][-prefix] (SIZE: 4k, 64k, 2m, ...)",
                      {"vmm-4k", "vmm-16k", "vmm-64k-mega"}, make_vmm_backend}}};
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

std::vector<std::string> backend_forms() {
  std::vector<std::string> forms;
  for (const BackendFamily& f : backend_families()) forms.insert(forms.end(), f.test_forms.begin(), f.test_forms.end());
  return forms;
}

std::unique_ptr<KvBackend> make_backend(std::string_view name, const BackendOptions& options) {
  const std::vector<BackendFamily> families = backend_families();
  for (const BackendFamily& f : families)
    if (name.starts_with(f.prefix)) return f.make(name, options);
  std::vector<std::string> known;
  for (const BackendFamily& f : families) known.push_back(f.usage);
  KVLAB_THROW(InvalidArgument, fmt::format("unknown backend '{}' (known: {})", name, fmt::join(known, ", ")));
}

}  // namespace kvlab
