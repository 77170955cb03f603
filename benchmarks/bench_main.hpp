#pragma once
// main() for kvlab's Google Benchmark binaries: every JSON result (--benchmark_out) carries the
// git revision, the device it was measured on and the host (benchmarks/host_context.hpp)
// in its context.
#include <benchmark/benchmark.h>

#include <thread>

#include "benchmarks/host_context.hpp"

#define KVLAB_BENCHMARK_MAIN()                                                                        \
  int main(int argc, char** argv) {                                                                   \
    benchmark::Initialize(&argc, argv);                                                               \
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;                                 \
    benchmark::AddCustomContext("kvlab_git_revision", KVLAB_GIT_REVISION);                            \
    benchmark::AddCustomContext("device", "host");                                                    \
    benchmark::AddCustomContext("host_threads", std::to_string(std::thread::hardware_concurrency())); \
    kvlab::bench::add_host_context();                                                                 \
    kvlab::bench::add_measured_read_bandwidth();                                                      \
    benchmark::RunSpecifiedBenchmarks();                                                              \
    benchmark::Shutdown();                                                                            \
    return 0;                                                                                         \
  }
