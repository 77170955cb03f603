#pragma once
// What every benchmark JSON says about the host it ran on, so that results from different hosts
// are never compared as one (a kernel at 0.98 of one host's bandwidth was at 0.86 on a faster one):
// the CPU model, its L3, the transparent-huge-page mode (the KV pools' page size depends on it), how
// far ahead the host kernel requests its rows on this CPU, and the read bandwidth measured at
// start, the roofline the kernels' fractions are taken against.
#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "alloc/memory/huge_pages.hpp"
#include "kernels/attention.hpp"
#include "kernels/measure/host_throughput.hpp"
#include "kernels/thread_pool.hpp"

namespace kvlab::bench {

/// /proc/cpuinfo's first "model name", or "unknown".
inline std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0)
      if (const auto colon = line.find(':'); colon != std::string::npos)
        return line.substr(line.find_first_not_of(' ', colon + 1));
  return "unknown";
}

/// The L3 size of CPU 0 in bytes as sysfs gives it (what the kernel was told, e.g. "32768K"), or
/// "unknown". (glibc's sysconf(_SC_LEVEL3_CACHE_SIZE) decodes CPUID itself and disagrees on VMs.)
inline std::string l3_cache_bytes() {
  for (int i = 0; i < 8; ++i) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
    std::ifstream level(dir + "level"), size(dir + "size");
    int l = 0;
    std::string text;
    if (!(level >> l) || l != 3 || !(size >> text) || text.empty()) continue;
    const char unit = text.back();
    const long long n = std::atoll(text.c_str());
    return std::to_string(unit == 'K' ? n << 10 : unit == 'M' ? n << 20 : n);
  }
  return "unknown";
}

/// Adds the host's description to the benchmark context (before RunSpecifiedBenchmarks).
inline void add_host_context() {
  benchmark::AddCustomContext("cpu_model", cpu_model());
  benchmark::AddCustomContext("l3_cache_bytes", l3_cache_bytes());
  benchmark::AddCustomContext("transparent_hugepage", transparent_huge_page_mode());
  benchmark::AddCustomContext("host_prefetch_lead_heads", std::to_string(host_prefetch_lead_heads()));
}

/// Measures the host's read bandwidth (every hardware thread, 256 MiB, far past any L3; best of 3:
/// about 0.2 s) into the context as memory_read_bandwidth_bytes_per_s, the name attention_bench,
/// which measures its own between rounds, gives it.
inline void add_measured_read_bandwidth() {
  ThreadPool pool(std::thread::hardware_concurrency());
  const double bandwidth = measure_read_bandwidth(pool, std::size_t{256} << 20, 3);
  char text[32];
  std::snprintf(text, sizeof text, "%.0f", bandwidth);
  benchmark::AddCustomContext("memory_read_bandwidth_bytes_per_s", text);
}

}  // namespace kvlab::bench
