// elastic-B[-PAGE][-interleaved][-firstfree|-local|-spread][-reserveN][-retainM][-overlap][-radix[-maxcachedN][-lru][-compact]]:
// a paged backend whose blocks lie on physical pages mapped on demand and returned when they empty (kvcached's design;
// elastic/, docs/elastic.md).
#include <fmt/format.h>

#include "alloc/core/error.hpp"
#include "elastic/elastic_pages.hpp"
#include "paged/paged_backend.hpp"
#include "serving/replay/families/families.hpp"

namespace kvlab {

namespace {
using family::suffix_number;

constexpr const char* kOptions =
    "-PAGE (4k, 64k, 2m ...), -interleaved, -firstfree or -local or -spread, -reserveN, -retainM, -overlap, -radix, "
    "-maxcachedN (tokens), "
    "-lru, -compact";

/// The prefix cache's part of an elastic name: the mode, kvcached's cap on cached tokens and how
/// trimming to it chooses victims.
struct CacheOptions {
  PrefixCacheMode mode = PrefixCacheMode::none;
  long long max_cached_tokens = -1;
  bool lru = false;
  bool compact = false;
};

/// Reads the options after the block size into `e` and `cache`.
void parse_elastic_options(std::string_view name, std::string_view opts, ElasticConfig& e, CacheOptions& cache) {
  bool first = true;
  while (!opts.empty()) {
    opts.remove_prefix(1);  // the dash
    const std::string_view opt = opts.substr(0, opts.find('-'));
    opts.remove_prefix(opt.size());
    const bool page = first && family::parse_page_size(opt) > 0;
    first = false;
    if (page) {
      e.page_bytes = family::parse_page_size(opt);
    } else if (opt == "interleaved") {
      e.layout = ElasticLayout::interleaved;
    } else if (opt == "firstfree" || opt == "local" || opt == "spread") {
      if (e.allocation != ElasticAllocation::fullest)
        KVLAB_THROW(InvalidArgument, fmt::format("backend '{}': -firstfree, -local and -spread are allocation "
                                                 "policies; give one",
                                                 name));
      e.allocation = opt == "firstfree" ? ElasticAllocation::first_free
                     : opt == "local"   ? ElasticAllocation::local
                                        : ElasticAllocation::spread;
    } else if (opt == "radix") {
      cache.mode = PrefixCacheMode::radix;
    } else if (opt.starts_with("maxcached") && suffix_number(opt, "maxcached") >= 0 &&
               suffix_number(opt, "maxcached") <= 1'000'000'000) {
      cache.max_cached_tokens = suffix_number(opt, "maxcached");
    } else if (opt == "lru") {
      cache.lru = true;
    } else if (opt == "compact") {
      cache.compact = true;
    } else if (opt.starts_with("reserve") && suffix_number(opt, "reserve") >= 0 &&
               suffix_number(opt, "reserve") <= 1'000'000) {
      e.reserve_groups = static_cast<std::int32_t>(suffix_number(opt, "reserve"));
    } else if (opt.starts_with("retain") && suffix_number(opt, "retain") >= 0 &&
               suffix_number(opt, "retain") <= 1'000'000) {
      e.retain_groups = static_cast<std::int32_t>(suffix_number(opt, "retain"));
    } else if (opt == "overlap") {
      e.overlap = true;
    } else if (opt == "hash") {
      KVLAB_THROW(InvalidArgument, fmt::format("backend '{}': the hash prefix cache needs vLLM's LRU free queue, "
                                               "which decides which blocks (and so pages) empty; use -radix",
                                               name));
    } else {
      KVLAB_THROW(InvalidArgument,
                  fmt::format("backend '{}': unknown elastic option '{}' (options, in this order: {}; the page "
                              "size comes right after B, up to 1g)",
                              name, opt, kOptions));
    }
  }
}

std::unique_ptr<KvBackend> make_elastic_backend(std::string_view name, const BackendOptions& options) {
  const std::string_view rest = name.substr(std::string_view("elastic-").size());
  const std::string_view size = rest.substr(0, rest.find('-'));
  const long long bs = suffix_number(size, "");
  if (bs < 1 || bs > 1024)
    KVLAB_THROW(InvalidArgument, fmt::format("backend '{}': expected elastic-B[{}] with B, the block size, 1..1024 "
                                             "tokens",
                                             name, kOptions));
  ElasticConfig e;
  e.model = options.model;
  e.block_size = static_cast<std::int32_t>(bs);
  e.capacity_bytes = options.capacity_bytes;
  e.budget = options.budget;
  CacheOptions cache;
  parse_elastic_options(name, rest.substr(size.size()), e, cache);
  if (cache.max_cached_tokens >= 0 && cache.mode != PrefixCacheMode::radix)
    KVLAB_THROW(InvalidArgument,
                fmt::format("backend '{}': -maxcachedN caps the radix prefix cache; add -radix", name));
  if (cache.compact && (cache.mode != PrefixCacheMode::radix || e.allocation == ElasticAllocation::first_free))
    KVLAB_THROW(InvalidArgument, fmt::format("backend '{}': -compact moves the radix cache's blocks between page "
                                             "groups of the page-aware pool; add -radix, drop -firstfree",
                                             name));
  if (cache.lru && cache.max_cached_tokens < 0)
    KVLAB_THROW(InvalidArgument, fmt::format("backend '{}': -lru chooses how trimming to -maxcachedN evicts; give "
                                             "the cap too",
                                             name));
  const std::size_t block_bytes = static_cast<std::size_t>(bs) * options.model.kv_bytes_per_token();
  if (block_bytes > 0 && options.capacity_bytes / block_bytes > family::kMaxBookkeptUnits)
    KVLAB_THROW(InvalidArgument,
                fmt::format("backend '{}': --capacity-gib gives {} blocks of {} tokens, more than {} "
                            "(their bookkeeping alone would take gigabytes); use a smaller capacity "
                            "or larger blocks",
                            name, options.capacity_bytes / block_bytes, bs, family::kMaxBookkeptUnits));
  if (const std::string problem = elastic_config_problem(e); !problem.empty())
    KVLAB_THROW(InvalidArgument, fmt::format("backend '{}': {}", name, problem));
  const Device device = family::device_of(options);
  if (device != Device::host && options.device != nullptr && e.page_bytes % options.device->granularity() != 0)
    KVLAB_THROW(InvalidArgument, fmt::format("backend '{}' on --device {}: the page size must be a multiple of the "
                                             "CUDA driver's granularity ({} bytes); 2m is the default",
                                             name, options.device->spec().name(), options.device->granularity()));
  PagedConfig c;
  c.model = options.model;
  c.capacity_bytes = options.capacity_bytes;
  c.max_seq_len = options.max_seq_len;
  c.memory = options.memory;
  c.block_size = e.block_size;
  c.prefix_cache = cache.mode;
  if (cache.max_cached_tokens >= 0) c.max_cached_blocks = cache.max_cached_tokens / bs;
  c.evict_by_pages = !cache.lru;
  c.compact_cache = cache.compact;
  if (options.device != nullptr) c.swap_memory = options.device->swap_memory();  // pinned on a GPU
  if (options.memory != nullptr) {  // storage: the pages come from the device's VM driver
    KVLAB_EXPECTS(device == Device::host || options.device != nullptr,
                  fmt::format("backend '{}' on a device needs its DeviceContext", name));
    e.driver = make_vm_driver(device == Device::host ? nullptr : options.device, options.capacity_bytes,
                              options.max_map_count);
  }
  c.storage = std::make_shared<ElasticPages>(std::move(e));
  return std::make_unique<PagedBackend>(std::move(c));
}
}  // namespace

BackendFamily elastic_backend_family() {
  // Forms whose page groups fit the conformance suite's tiny model (300-2000 token budgets): a
  // group of 4k pages holds 32 of its tokens per layer, an interleaved 4k page 8 tokens.
  return {"elastic-",
          "elastic-B[-PAGE][-interleaved][-firstfree|-local|-spread][-reserveN][-retainM][-overlap][-radix[-maxcachedN]"
          "[-lru][-compact]] "
          "(B = 1..1024 tokens, PAGE 2m by default, N cached tokens)",
          {"elastic-16-4k", "elastic-1-4k-firstfree", "elastic-2-4k-interleaved",
           "elastic-16-4k-radix-maxcached64-compact", "elastic-16-4k-reserve0-retain2",
           "elastic-16-4k-reserve2-overlap", "elastic-3-4k-local-radix-maxcached64", "elastic-16-4k-spread"},
          make_elastic_backend,
          /*shares_memory=*/true};
}

}  // namespace kvlab
