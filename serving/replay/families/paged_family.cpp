// paged-B[-hash[-hostG]|-radix[-region]|-region]: vLLM's block pool and block tables (paged/).
#include <fmt/format.h>

#include <cctype>

#include "alloc/core/error.hpp"
#include "paged/paged_backend.hpp"
#include "serving/replay/families/families.hpp"

namespace kvlab {

namespace {
using family::kMaxBookkeptUnits;
using family::suffix_number;

/// paged-B or paged-B-hash / paged-B-radix (prefix caching, docs/prefix-caching.md);
/// paged-B-hash-hostG adds a host tier of G GiB to the hash cache; a -region suffix (not with
/// hash) turns on region block placement (paged/block_pool.hpp, docs/kernels.md).
std::unique_ptr<KvBackend> make_paged_backend(std::string_view name, const BackendOptions& options) {
  std::string_view rest = name.substr(std::string_view("paged-").size());
  // "paged-b16" is how the backend names itself in every output: accepted back as input.
  if (rest.size() > 1 && rest[0] == 'b' && std::isdigit(static_cast<unsigned char>(rest[1]))) rest.remove_prefix(1);
  bool region = false;
  if (rest.ends_with("-region")) {
    region = true;
    rest.remove_suffix(std::string_view("-region").size());
  }
  std::size_t host_gib = 0;
  if (const auto host = rest.find("-host"); host != std::string_view::npos) {
    const long long g = suffix_number(rest.substr(host + 1), "host");
    if (g < 1 || g > (1 << 20))
      KVLAB_THROW(InvalidArgument, fmt::format("backend '{}': host tier must be 1..1048576 GiB", name));
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
  // Block bookkeeping grows with the block count (about 25 bytes a block, 415 MB at 2^24):
  // refused before anything is allocated rather than past memory (1e6 GiB of paged-16 took 5 GB).
  const std::size_t block_bytes = static_cast<std::size_t>(bs) * options.model.kv_bytes_per_token();
  for (const auto& [what, bytes] :
       {std::pair{"--capacity-gib", options.capacity_bytes}, std::pair{"the host tier", host_gib << 30}})
    if (block_bytes > 0 && bytes / block_bytes > kMaxBookkeptUnits)
      KVLAB_THROW(InvalidArgument,
                  fmt::format("backend '{}': {} gives {} blocks of {} tokens, more than {} (their bookkeeping alone "
                              "would take gigabytes); use a smaller capacity or larger blocks",
                              name, what, bytes / block_bytes, bs, kMaxBookkeptUnits));
  PagedConfig c;
  c.model = options.model;
  c.capacity_bytes = options.capacity_bytes;
  c.max_seq_len = options.max_seq_len;
  c.memory = options.memory;
  c.block_size = static_cast<std::int32_t>(bs);
  c.prefix_cache = cache;
  c.host_cache_bytes = host_gib << 30;
  c.region_placement = region;
  if (region && cache == PrefixCacheMode::hash)
    KVLAB_THROW(InvalidArgument, fmt::format("backend '{}': region placement cannot be combined with the hash prefix "
                                             "cache (its LRU free queue decides evictions); use -radix or no cache",
                                             name));
  if (options.device != nullptr) c.swap_memory = options.device->swap_memory();  // pinned on a GPU
  if (host_gib > 0 && cache != PrefixCacheMode::hash)
    KVLAB_THROW(InvalidArgument, fmt::format("backend '{}': a host tier needs the hash prefix cache", name));
  return std::make_unique<PagedBackend>(std::move(c));
}

}  // namespace

BackendFamily paged_backend_family() {
  return {"paged-",
          "paged-B[-hash[-hostG]|-radix[-region]|-region] (B = 1..1024 tokens, G GiB of host tier)",
          {"paged-1", "paged-7", "paged-16", "paged-256", "paged-16-hash", "paged-16-radix", "paged-7-region",
           "paged-16-radix-region"},
          make_paged_backend};
}

}  // namespace kvlab
