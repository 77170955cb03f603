#pragma once
// Helpers shared by the vmm tests: backend configs over the tiny model, a deterministic KV pattern
// written and checked through the backend's own views, /proc/self/maps counting.
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "kernels/kv_view.hpp"
#include "tests/support/tiny_model.hpp"
#include "vmm/posix_vm_driver.hpp"
#include "vmm/vmm_backend.hpp"

namespace kvlab::testing {

inline constexpr std::size_t kKiB = 1024;
inline constexpr std::size_t kTinyToken = 512;  // tiny model: KV bytes per token, all layers

/// A backend over the tiny model. `driver` nullptr: accounting only.
inline VmmConfig tiny_vmm(std::size_t page_bytes, std::size_t capacity_bytes, std::shared_ptr<VmDriver> driver,
                          VmmLayout layout = VmmLayout::per_layer, std::int64_t max_seq_len = 512, int max_batch = 8) {
  VmmConfig c;
  c.model = tiny_model();
  c.page_bytes = page_bytes;
  c.capacity_bytes = capacity_bytes;
  c.max_seq_len = max_seq_len;
  c.max_batch = max_batch;
  c.layout = layout;
  c.driver = std::move(driver);
  return c;
}

/// The value stored at (sequence tag, layer, K|V, token, head, dim): distinct for every element
/// and exactly representable in fp16 (integers below 2048).
inline half_t pattern(std::int64_t tag, int layer, int kv, std::int64_t token, int head, int dim) {
  const std::int64_t v = (tag * 7919 + layer * 613 + kv * 307 + token * 31 + head * 17 + dim) % 2039;
  return from_float<half_t>(static_cast<float>(v));
}

/// Writes tokens [from, to) of sequence `id` through the backend's layer views.
inline void write_tokens(VmmBackend& b, SeqId id, std::int64_t tag, std::int64_t from, std::int64_t to) {
  const SeqId one[] = {id};
  b.prepare_batch(one);
  const ModelGeometry& m = b.model();
  for (int layer = 0; layer < m.num_layers; ++layer) {
    const auto v = as_contiguous<half_t>(b.layer_view(layer));
    for (std::int64_t t = from; t < to; ++t)
      for (int h = 0; h < m.num_kv_heads; ++h)
        for (int d = 0; d < m.head_dim; ++d) {
          v.k(0, t, h)[d] = pattern(tag, layer, 0, t, h, d);
          v.v(0, t, h)[d] = pattern(tag, layer, 1, t, h, d);
        }
  }
}

/// Counts elements of tokens [0, to) of `id` that differ from the pattern.
inline std::int64_t count_mismatches(VmmBackend& b, SeqId id, std::int64_t tag, std::int64_t to) {
  const SeqId one[] = {id};
  b.prepare_batch(one);
  const ModelGeometry& m = b.model();
  std::int64_t bad = 0;
  for (int layer = 0; layer < m.num_layers; ++layer) {
    const auto v = as_contiguous<half_t>(b.layer_view(layer));
    for (std::int64_t t = 0; t < to; ++t)
      for (int h = 0; h < m.num_kv_heads; ++h)
        for (int d = 0; d < m.head_dim; ++d) {
          bad += to_float(v.k(0, t, h)[d]) != to_float(pattern(tag, layer, 0, t, h, d));
          bad += to_float(v.v(0, t, h)[d]) != to_float(pattern(tag, layer, 1, t, h, d));
        }
  }
  return bad;
}

/// Lines of /proc/self/maps that name `what` (e.g. the vmm memfd "memfd:kvlab-vmm").
inline int maps_lines_containing(const std::string& what) {
  std::ifstream maps("/proc/self/maps");
  int n = 0;
  for (std::string line; std::getline(maps, line);) n += line.find(what) != std::string::npos;
  return n;
}

/// Whether any mapping in /proc/self/maps overlaps [base, base + bytes).
inline bool maps_overlap(const void* base, std::size_t bytes) {
  const auto lo = reinterpret_cast<std::uintptr_t>(base), hi = lo + bytes;
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    const std::size_t dash = line.find('-');
    const std::uintptr_t a = std::stoull(line.substr(0, dash), nullptr, 16);
    const std::uintptr_t z = std::stoull(line.substr(dash + 1, line.find(' ') - dash - 1), nullptr, 16);
    if (a < hi && lo < z) return true;
  }
  return false;
}

/// The five fractions sum to the capacity and nothing is negative (size_t underflow shows huge).
inline void expect_consistent(const KvBackend& b) {
  const MemoryBreakdown m = b.breakdown();
  ASSERT_LE(m.used(), m.capacity);
  EXPECT_NEAR(MemoryFractions::of(m).sum(), 1.0, 1e-12);
}

}  // namespace kvlab::testing
