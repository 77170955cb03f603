#pragma once
// Backends by name, the one place the command line, sweeps and tests turn a name into a backend.
// Each backend family (contiguous-, paged-, vmm-, and any new one) is one entry of a registry: a
// name prefix, the forms it accepts and a maker. Adding a backend means writing its own file and
// one register_backend_family call (docs/backend-interface.md). An unknown name fails loudly,
// listing the known forms.
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "alloc/kv_backend.hpp"
#include "alloc/memory_resource.hpp"

namespace kvlab {

struct BackendOptions {
  ModelGeometry model;
  std::size_t capacity_bytes = 0;
  std::int64_t max_seq_len = 0;      ///< 0: the model's max context
  MemoryResource* memory = nullptr;  ///< nullptr: accounting only
};

/// One family of backends: every name that starts with `prefix` is made by `make` (which throws
/// InvalidArgument naming the name when the rest is not one of its forms).
struct BackendFamily {
  std::string prefix;                   ///< e.g. "paged-"
  std::string usage;                    ///< e.g. "paged-B[-hash|-radix]", for error messages and help
  std::vector<std::string> test_forms;  ///< forms the conformance suite runs (tiny model, 300-2000 tokens)
  std::function<std::unique_ptr<KvBackend>(std::string_view name, const BackendOptions& options)> make;
};

/// Adds a family. Throws InvalidArgument when the prefix is empty, has no maker, or is taken.
void register_backend_family(BackendFamily family);
/// The registered families, the built-in ones first.
[[nodiscard]] std::vector<BackendFamily> backend_families();

/// Known forms (each family's usage string): contiguous-max|pow2|oracle; paged-B[-hash|-radix]
/// (B = block size in tokens, 1..1024); vmm-SIZE[-mega][-overlap][-eagerN][-nodefer][-prefix]
/// (SIZE a multiple of 4 KiB written with k or m: vmm-4k, vmm-64k, vmm-2m; deferred reclamation on
/// unless -nodefer).
[[nodiscard]] std::unique_ptr<KvBackend> make_backend(std::string_view name, const BackendOptions& options);
/// The test forms of every family (what the conformance suite and the fuzzer run).
[[nodiscard]] std::vector<std::string> backend_forms();
/// What `kvlab compare` runs by default: every contiguous policy, paged and vmm at a few sizes.
[[nodiscard]] std::string default_compare_backends();

}  // namespace kvlab
