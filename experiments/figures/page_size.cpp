// vAttention (ASPLOS'25): what mapping a page costs, and how much KV memory each page size wastes.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>

#include "alloc/core/error.hpp"
#include "alloc/memory/huge_pages.hpp"
#include "alloc/memory/memory_resource.hpp"
#include "experiments/figures/figure_kit.hpp"
#include "experiments/figures/figure_list.hpp"
#include "kernels/kv_view.hpp"

namespace kvlab::fig {

namespace {

/// Mean microseconds per page: map+set_access, synchronize+unmap, and map+set_access plus the
/// first write (which is when the host commits the physical page — the cost a GPU pays inside
/// cuMemCreate/cuMemMap instead).
struct MapTiming {
  double map_us = 0, unmap_us = 0, touch_map_us = 0;
};

/// A counter the backend must report; a backend without it cannot be measured here.
double counter(const KvBackend& b, std::string_view name) {
  for (const auto& [key, value] : b.counters())
    if (key == name) return value;
  KVLAB_THROW(Error, fmt::format("backend {} does not report the counter '{}'", b.name(), name));
}

/// Critical-path map and unmap work a backend reported, as read at one moment.
struct MappingCounters {
  double maps = 0, map_s = 0, unmaps = 0, unmap_s = 0;
  explicit MappingCounters(const KvBackend& b)
      : maps(counter(b, "critical_maps")),
        map_s(counter(b, "critical_map_s")),
        unmaps(counter(b, "critical_unmaps")),
        unmap_s(counter(b, "critical_unmap_s")) {}
};

/// Writes one byte into every 4 KiB of the sequence's K and V in layer 0; returns the seconds.
double touch_pages(KvBackend& b, SeqId id, std::int64_t tokens) {
  const auto t0 = std::chrono::steady_clock::now();
  b.prepare_batch(std::vector<SeqId>{id});
  const KvView v = b.layer_view(0);
  const std::size_t bytes = static_cast<std::size_t>(tokens) * v.token_stride * sizeof(half_t);
  for (auto* base : {static_cast<volatile char*>(static_cast<void*>(as_contiguous<half_t>(v).k(0, 0, 0))),
                     static_cast<volatile char*>(static_cast<void*>(as_contiguous<half_t>(v).v(0, 0, 0)))})
    for (std::size_t off = 0; off < bytes; off += 4096) base[off] = 1;
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// Maps and unmaps `pages` pages of `page` bytes `rounds` times through a vmm backend over host
/// memory (the POSIX VM driver: memfd + mmap MAP_FIXED|MAP_SHARED + mprotect): one sequence of a
/// one-layer model fills all of them at admit and gives them back at release (no deferred
/// reclamation, so release unmaps). Every other round also writes to each page. Times are what
/// the backend reports for its critical-path maps and unmaps.
MapTiming time_mapping(const FigureContext& ctx, const std::string& label, std::size_t page, int pages, int rounds) {
  BackendOptions o;
  o.model = model_preset("llama-3-8b");
  o.model.num_layers = 1;  // two tensors (K, V): pages / 2 pages each
  const std::int64_t tokens =
      static_cast<std::int64_t>(page * static_cast<std::size_t>(pages / 2) / o.model.kv_bytes_per_token() * 2);
  o.max_seq_len = tokens;
  o.capacity_bytes = page * static_cast<std::size_t>(pages);
  o.memory = ctx.device != nullptr ? &ctx.device->memory() : &huge_page_host_memory_resource();
  o.device = ctx.device;
  auto b = make_backend(fmt::format("vmm-{}-nodefer", label), o);
  // The CPU can write only memory it can address: on a GPU the touched rounds are left out.
  const bool can_touch = host_addressable(b->device());
  MapTiming t;
  double touch_s = 0, touch_maps = 0, plain_maps = 0;
  for (int r = 0; r < rounds; ++r) {
    const bool touch = can_touch && r % 2 == 1;
    const MappingCounters before(*b);
    b->admit(0, {tokens, tokens}, tokens);
    if (touch) touch_s += touch_pages(*b, 0, tokens);
    const MappingCounters mapped(*b);
    b->release(0);
    const MappingCounters after(*b);
    (touch ? t.touch_map_us : t.map_us) += (mapped.map_s - before.map_s) * 1e6;
    (touch ? touch_maps : plain_maps) += mapped.maps - before.maps;
    t.unmap_us += (after.unmap_s - mapped.unmap_s) * 1e6 / std::max(after.unmaps - mapped.unmaps, 1.0) / rounds;
  }
  t.map_us /= std::max(plain_maps, 1.0);
  t.touch_map_us = can_touch ? (t.touch_map_us + touch_s * 1e6) / std::max(touch_maps, 1.0)
                             : std::numeric_limits<double>::quiet_NaN();
  return t;
}

/// "n/a" for a number not measured (NaN), else fixed().
std::string maybe(double v, int digits) { return std::isnan(v) ? "n/a" : fixed(v, digits); }

/// The page sizes measured: vAttention's 4 KiB..2 MiB on the host; on a CUDA device (stock driver:
/// 2 MiB granularity) 2 MiB and its multiples.
std::vector<std::pair<std::string, std::size_t>> page_sizes(const FigureContext& ctx) {
  if (ctx.device != nullptr) return {{"2m", 2 << 20}, {"4m", 4 << 20}, {"8m", 8 << 20}, {"16m", 16 << 20}};
  return {{"4k", 4096}, {"64k", 64 << 10}, {"256k", 256 << 10}, {"2m", 2 << 20}};
}

std::string mapping_setup(const FigureContext& ctx) {
  if (ctx.device == nullptr)
    return "mapping: the vmm backend over host memory (the POSIX VM driver: memfd + mmap MAP_FIXED|MAP_SHARED + "
           "mprotect) mapping and unmapping up to 256 MiB in pages of each size, timed by the backend's own "
           "critical-path counters";
  return "mapping: the vmm backend on " + ctx.device->describe() +
         " (vmm/cuda_vm_driver: cuMemMap + cuMemSetAccess, "
         "cuCtxSynchronize + cuMemUnmap) mapping and unmapping up to 256 MiB in pages of each size, timed by the "
         "backend's own critical-path counters" +
         (ctx.device->device() == Device::cuda ? "; the CPU cannot write device memory, so no map_touch columns"
                                               : "; map_touch writes the double's host memory");
}

std::string mapping_clock(const FigureContext& ctx) {
  if (ctx.device == nullptr)
    return "mapping measured on the host CPU (a GPU's cuMemMap path differs; run tests/gpu/run.sh there); "
           "fragmentation modelled (A100-80GB roofline)";
  if (ctx.device->device() == Device::emulated)
    return "mapping through the CUDA code path on the emulated GPU (the driver double: host memory, no GPU; the "
           "times are the double's); fragmentation modelled (A100-80GB roofline)";
  return "mapping measured on " + ctx.device->describe() + "; fragmentation modelled (A100-80GB roofline)";
}

void page_size(const FigureContext& ctx) {
  const auto pages = page_sizes(ctx);
  Table t{{"page", "layout", "map_per_page_us", "unmap_per_page_us", "map_bandwidth_gb_per_s", "map_touch_per_page_us",
           "map_touch_bandwidth_gb_per_s", "token_states_pct", "internal_fragmentation_pct", "reserved_pct",
           "mean_batch"}};
  const auto w = sharegpt(ctx, 4.0, ctx.full ? 2000 : 300);
  BackendOptions o;
  o.model = model_preset("llama-3-8b");
  o.capacity_bytes = std::size_t{8} << 30;
  Facts f;
  const std::string vattention = "vAttention (ASPLOS'25), measured on an A100 with its driver patch";
  for (const auto& [label, bytes] : pages) {
    const int count = static_cast<int>(std::clamp<std::size_t>((std::size_t{256} << 20) / bytes, 8, 4096));
    const bool emulated = ctx.device != nullptr && ctx.device->device() == Device::emulated;
    const MapTiming m = time_mapping(ctx, label, bytes, emulated ? std::min(count, 16) : count, ctx.full ? 10 : 4);
    if (label == "64k") {  // the page size vAttention quotes its mapping bandwidth for
      const bool touched = std::isfinite(m.touch_map_us);
      f.claim(fmt::format("64 KiB pages: mapping bandwidth (GB/s; {})", touched ? "map_touch" : "map"),
              static_cast<double>(bytes) / (touched ? m.touch_map_us : m.map_us) / 1e3, 7.6, 2, vattention);
    }
    for (const std::string layout : {"per-layer", "megacache"}) {
      const std::string name = fmt::format("vmm-{}{}", label, layout == "megacache" ? "-mega" : "");
      const ReplaySummary s = run(ctx, name, o, w, ReplayConfig{}).summary;
      t.add({label, layout, fixed(m.map_us, 2), fixed(m.unmap_us, 2),
             fixed(static_cast<double>(bytes) / m.map_us / 1e3, 1), maybe(m.touch_map_us, 2),
             maybe(static_cast<double>(bytes) / m.touch_map_us / 1e3, 2), pct(s.mean_fractions.token_states),
             pct(s.mean_fractions.internal_fragmentation), pct(s.mean_fractions.reserved), fixed(s.mean_batch)});
    }
  }
  publish(ctx,
          {"page-size", "vAttention (ASPLOS'25): mapping cost and fragmentation against page size",
           mapping_setup(ctx) +
               "; fragmentation: Llama-3-8B, 8 GiB of KV, ShareGPT lengths at 4 req/s through vmm at each page "
               "size, per-layer tensors and the layer-interleaved megacache",
           mapping_clock(ctx),
           "vAttention measured ~" +
               f.quote("vAttention: cuMemMap + cuMemSetAccess per page (us, about)", 40, 0, vattention) +
               " us per cuMemMap+cuMemSetAccess on a GPU and " +
               f.quote("vAttention: mapping bandwidth with 64 KiB pages (GB/s)", 7.6, 1, vattention) +
               " GB/s of mapping bandwidth with 64 KiB pages, against a serving need of at most ~" +
               f.quote("vAttention: serving's mapping need (MB/s, at most)", 750, 0, vattention) +
               " MB/s. On the host, mapping without "
               "touching is nearly free per page (the kernel defers the work), so `map_touch_*` — which includes "
               "committing the page on first write — is the fair comparison. Fragmentation: with per-layer tensors "
               "every sequence holds at least one page per layer for K and V (2 x " +
               f.quote("Llama-3-8B layers", o.model.num_layers, 0, "model preset llama-3-8b") +
               " pages), so 2 MiB pages waste "
               "most of a page per tensor; the megacache puts all layers of a token in one tensor and brings that "
               "back to one page per sequence.",
           "", f},
          t);
}
}  // namespace

Figure page_size_figure() {
  return {"page-size", "vAttention: map latency, mapping bandwidth and fragmentation per page size", page_size, true};
}

}  // namespace kvlab::fig
