#include "python/src/backend_binding.hpp"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "alloc/backend/kv_backend.hpp"
#include "alloc/core/error.hpp"
#include "alloc/core/model_geometry.hpp"
#include "serving/replay/backend_factory.hpp"

namespace nb = nanobind;

namespace kvlab::python {

namespace {

/// A backend in accounting mode (no KV bytes: the replayer's memory mode), owned by Python.
class PyBackend {
 public:
  PyBackend(const std::string& name, const std::string& model, double capacity_gib, std::int64_t max_seq_len) {
    if (!(capacity_gib > 0) || !std::isfinite(capacity_gib) || capacity_gib > 1 << 20)
      throw InvalidArgument("capacity_gib: must be a number of GiB in (0, 1048576], got " +
                            std::to_string(capacity_gib));
    BackendOptions options;
    options.model = model_preset(model);
    options.capacity_bytes = static_cast<std::size_t>(capacity_gib * 0x1p30);
    options.max_seq_len = max_seq_len;
    backend_ = make_backend(name, options);
  }

  KvBackend& get() { return *backend_; }
  const KvBackend& get() const { return *backend_; }

  /// A sequence's spec from Python's arguments; the ids are copied here and outlive the call.
  struct Spec {
    SequenceSpec spec;
    std::vector<std::int32_t> ids;
    std::vector<std::int64_t> keys;
  };
  static Spec spec(std::int64_t prompt_tokens, std::optional<std::int64_t> final_tokens,
                   std::optional<std::vector<std::int32_t>> token_ids,
                   std::optional<std::vector<std::int64_t>> extra_keys) {
    Spec s;
    s.ids = token_ids.value_or(std::vector<std::int32_t>{});
    s.keys = extra_keys.value_or(std::vector<std::int64_t>{});
    s.spec.prompt_tokens = prompt_tokens;
    s.spec.final_tokens = final_tokens.value_or(prompt_tokens);
    s.spec.prompt_token_ids = s.ids;
    s.spec.extra_keys = s.keys;
    return s;
  }

 private:
  std::unique_ptr<KvBackend> backend_;
};

nb::dict breakdown_dict(const MemoryBreakdown& b) {
  nb::dict d;
  d["capacity_bytes"] = b.capacity;
  d["token_states_bytes"] = b.token_states;
  d["reserved_bytes"] = b.reserved;
  d["internal_fragmentation_bytes"] = b.internal_fragmentation;
  d["external_fragmentation_bytes"] = b.external_fragmentation;
  d["free_bytes"] = b.free();
  d["cached_bytes"] = b.cached;
  const MemoryFractions f = MemoryFractions::of(b);
  d["token_states_frac"] = f.token_states;
  d["reserved_frac"] = f.reserved;
  d["internal_fragmentation_frac"] = f.internal_fragmentation;
  d["external_fragmentation_frac"] = f.external_fragmentation;
  d["free_frac"] = f.free;
  return d;
}

/// What a backend says of itself: lengths, the prefix cache, the breakdown, counters.
void bind_inspection(nb::class_<PyBackend>& c) {
  using Keys = std::optional<std::vector<std::int64_t>>;
  c.def(
       "contains", [](const PyBackend& b, SeqId id) { return b.get().contains(id); }, nb::arg("seq_id"))
      .def(
          "length", [](const PyBackend& b, SeqId id) { return b.get().length(id); }, nb::arg("seq_id"))
      .def(
          "cached_prefix_tokens",
          [](const PyBackend& b, std::vector<std::int32_t> token_ids, Keys keys) {
            const auto prompt = static_cast<std::int64_t>(token_ids.size());
            const auto s = PyBackend::spec(prompt, prompt, std::move(token_ids), std::move(keys));
            return b.get().cached_prefix_tokens(s.spec);
          },
          nb::arg("token_ids"), nb::arg("extra_keys") = nb::none(),
          "Prompt tokens an admission of these ids would find in the prefix cache (no side effects).")
      .def(
          "cached_tokens", [](const PyBackend& b, SeqId id) { return b.get().cached_tokens(id); }, nb::arg("seq_id"))
      .def("prefix_cache_stats",
           [](const PyBackend& b) {
             const PrefixCacheStats s = b.get().prefix_cache_stats();
             nb::dict d;
             d["lookups"] = s.lookups;
             d["hit_blocks"] = s.hit_blocks;
             d["hits"] = s.hits;
             d["queries"] = s.queries;
             d["evictions"] = s.evictions;
             d["inserted_blocks"] = s.inserted_blocks;
             return d;
           })
      .def(
          "breakdown", [](const PyBackend& b) { return breakdown_dict(b.get().breakdown()); },
          "Where every byte of capacity is now (the vLLM Fig. 2 categories), in bytes and as fractions.")
      .def("counters",
           [](const PyBackend& b) {
             nb::dict d;
             for (const auto& [name, value] : b.get().counters()) d[name.c_str()] = value;
             return d;
           })
      .def("held_bytes", [](const PyBackend& b) { return b.get().held_bytes(); })
      .def("__repr__", [](const PyBackend& b) {
        return "kvlab.Backend('" + b.get().name() + "', model='" + b.get().model().name + "')";
      });
}

}  // namespace

void bind_backend(nb::module_& m) {
  using Ids = std::optional<std::vector<std::int32_t>>;
  using Keys = std::optional<std::vector<std::int64_t>>;
  using Final = std::optional<std::int64_t>;
  nb::class_<PyBackend> c(m, "Backend",
                          "A KV-cache backend in accounting mode (no KV bytes), built by name like --backend.\n\n"
                          "Backend(name, model='opt-13b', capacity_gib=12.0, max_seq_len=0)");
  c.def(nb::init<const std::string&, const std::string&, double, std::int64_t>(), nb::arg("name"),
        nb::arg("model") = "opt-13b", nb::arg("capacity_gib") = 12.0, nb::arg("max_seq_len") = 0)
      .def_prop_ro("name", [](const PyBackend& b) { return b.get().name(); })
      .def_prop_ro("max_seq_len", [](const PyBackend& b) { return b.get().max_seq_len(); })
      .def_prop_ro("supports_swap", [](const PyBackend& b) { return b.get().supports_swap(); })
      .def_prop_ro("num_sequences", [](const PyBackend& b) { return b.get().num_sequences(); })
      .def(
          "can_admit",
          [](const PyBackend& b, std::int64_t prompt, Final final_tokens, std::optional<std::int64_t> initial, Ids ids,
             Keys keys) {
            const auto s = PyBackend::spec(prompt, final_tokens, std::move(ids), std::move(keys));
            return b.get().can_admit(s.spec, initial.value_or(prompt));
          },
          nb::arg("prompt_tokens"), nb::arg("final_tokens") = nb::none(), nb::arg("initial_tokens") = nb::none(),
          nb::arg("token_ids") = nb::none(), nb::arg("extra_keys") = nb::none())
      .def(
          "admit",
          [](PyBackend& b, SeqId id, std::int64_t prompt, Final final_tokens, std::optional<std::int64_t> initial,
             Ids ids, Keys keys) {
            const auto s = PyBackend::spec(prompt, final_tokens, std::move(ids), std::move(keys));
            b.get().admit(id, s.spec, initial.value_or(prompt));
          },
          nb::arg("seq_id"), nb::arg("prompt_tokens"), nb::arg("final_tokens") = nb::none(),
          nb::arg("initial_tokens") = nb::none(), nb::arg("token_ids") = nb::none(), nb::arg("extra_keys") = nb::none(),
          "Starts a sequence holding initial_tokens (default: the prompt) tokens; OutOfMemory leaves nothing changed.")
      .def(
          "can_grow", [](const PyBackend& b, SeqId id, std::int64_t n) { return b.get().can_grow(id, n); },
          nb::arg("seq_id"), nb::arg("n") = 1)
      .def(
          "grow", [](PyBackend& b, SeqId id, std::int64_t n) { b.get().grow(id, n); }, nb::arg("seq_id"),
          nb::arg("n") = 1)
      .def(
          "fork", [](PyBackend& b, SeqId parent, SeqId child) { b.get().fork(parent, child); }, nb::arg("parent"),
          nb::arg("child"))
      .def(
          "release", [](PyBackend& b, SeqId id) { b.get().release(id); }, nb::arg("seq_id"))
      .def(
          "swap_out", [](PyBackend& b, SeqId id) { b.get().swap_out(id); }, nb::arg("seq_id"))
      .def(
          "can_swap_in", [](const PyBackend& b, SeqId id) { return b.get().can_swap_in(id); }, nb::arg("seq_id"))
      .def(
          "swap_in", [](PyBackend& b, SeqId id) { b.get().swap_in(id); }, nb::arg("seq_id"))
      .def(
          "is_swapped", [](const PyBackend& b, SeqId id) { return b.get().is_swapped(id); }, nb::arg("seq_id"));
  bind_inspection(c);
}

}  // namespace kvlab::python
