// libFuzzer target: bytes decode into a sequence of KvBackend operations (admit, grow, fork,
// release, swap_out, swap_in, the can_* questions, prepare_batch, misuse) on a backend chosen by
// the first byte from backend_forms() (and a few vmm option variants), with a tiny model, a small capacity and no
// memory resource (accounting only). Every operation is checked against a reference model of the contract in
// alloc/backend/kv_backend.hpp:
//   * sequences, their lengths and swap state match the model after every call;
//   * the breakdown is consistent: used() <= capacity, the five fractions sum to 1,
//     allocated() <= capacity; token_states == sum of resident lengths x bytes/token where no
//     memory is shared (contiguous, vmm, paged before any fork or prefix-cache admit), and
//     between max and sum of them where it may be (paged after a fork, prefix caching);
//   * all-or-nothing: a call that throws OutOfMemory or InvalidArgument leaves the breakdown,
//     the sequences and their lengths exactly as they were;
//   * ask before you commit: can_admit / can_grow / can_swap_in true => the call succeeds,
//     false => it throws OutOfMemory; the questions change nothing;
//   * misuse (duplicate or unknown ids, negative growth, swap calls on backends that cannot
//     swap, growing or forking a swapped-out sequence) throws InvalidArgument;
//   * releasing everything returns allocated() to 0 (cached blocks and pages count as free).
// Any other exception, or a failed check, aborts: libFuzzer records the input.
//
// KVLAB_FUZZ_SKIP_SWAPPED_MISUSE=1 in the environment leaves out the "grow/fork/can_grow a
// swapped-out sequence" misuse calls (to fuzz past a known defect there).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "alloc/core/error.hpp"
#include "serving/replay/backend_factory.hpp"

namespace {

using namespace kvlab;

[[noreturn]] void fail(const std::string& backend, const std::string& what) {
  std::fprintf(stderr, "backend_ops_fuzz [%s]: %s\n", backend.c_str(), what.c_str());
  std::fflush(stderr);
  std::abort();
}

/// 2 layers, 2 KV heads of 32, fp16: 512 KV bytes per token (tests/support/tiny_model.hpp).
ModelGeometry tiny_model() {
  ModelGeometry m;
  m.name = "tiny";
  m.num_layers = 2;
  m.num_q_heads = 4;
  m.num_kv_heads = 2;
  m.head_dim = 32;
  m.kv_dtype = DType::f16;
  m.num_parameters = 1'000'000;
  m.max_context = 128;
  return m;
}

constexpr std::int64_t kMaxSeqLen = 128;

class Bytes {
 public:
  Bytes(const std::uint8_t* d, std::size_t n) : d_(d), n_(n) {}
  [[nodiscard]] bool empty() const { return i_ >= n_; }
  std::uint8_t u8() { return i_ < n_ ? d_[i_++] : 0; }
  std::uint16_t u16() { return static_cast<std::uint16_t>(u8() | (u8() << 8)); }

 private:
  const std::uint8_t* d_;
  std::size_t n_;
  std::size_t i_ = 0;
};

struct Ref {
  std::int64_t length = 0;
  std::int64_t final_tokens = 0;
  std::int64_t prompt = 0;
  bool swapped = false;
};

bool same(const MemoryBreakdown& a, const MemoryBreakdown& b) {
  return a.capacity == b.capacity && a.token_states == b.token_states && a.reserved == b.reserved &&
         a.internal_fragmentation == b.internal_fragmentation && a.external_fragmentation == b.external_fragmentation &&
         a.cached == b.cached && a.shared_savings == b.shared_savings;
}

std::string describe(const MemoryBreakdown& m) {
  return "capacity " + std::to_string(m.capacity) + " token_states " + std::to_string(m.token_states) + " reserved " +
         std::to_string(m.reserved) + " internal " + std::to_string(m.internal_fragmentation) + " external " +
         std::to_string(m.external_fragmentation) + " cached " + std::to_string(m.cached) + " shared_savings " +
         std::to_string(m.shared_savings);
}

class Harness {
 public:
  Harness(std::string name, std::unique_ptr<KvBackend> b, bool paged, bool prefix_cache)
      : name_(std::move(name)),
        b_(std::move(b)),
        paged_(paged),
        prefix_cache_(prefix_cache),
        bpt_(b_->model().kv_bytes_per_token()) {
    skip_swapped_misuse_ = std::getenv("KVLAB_FUZZ_SKIP_SWAPPED_MISUSE") != nullptr;
  }

  void check(const char* after) {
    const MemoryBreakdown m = b_->breakdown();
    const std::string at = std::string(" after ") + after + ": " + describe(m);
    if (m.used() > m.capacity) fail(name_, "used() > capacity" + at);
    if (m.allocated() > m.capacity) fail(name_, "allocated() > capacity" + at);
    if (m.capacity > capacity_bytes_) fail(name_, "capacity above the configured bytes" + at);
    if (m.capacity != capacity0_) fail(name_, "capacity changed" + at);
    const double sum = MemoryFractions::of(m).sum();
    if (m.capacity > 0 && !(sum > 1.0 - 1e-9 && sum < 1.0 + 1e-9))
      fail(name_, "fractions sum to " + std::to_string(sum) + at);
    if (b_->num_sequences() != seqs_.size()) {
      fail(name_,
           "num_sequences " + std::to_string(b_->num_sequences()) + " != model " + std::to_string(seqs_.size()) + at);
    }
    std::size_t sum_tokens = 0, max_tokens = 0;
    for (const auto& [id, r] : seqs_) {
      if (!b_->contains(id)) fail(name_, "sequence " + std::to_string(id) + " lost" + at);
      if (b_->length(id) != r.length) {
        fail(name_, "sequence " + std::to_string(id) + " length " + std::to_string(b_->length(id)) + " != model " +
                        std::to_string(r.length) + at);
      }
      if (b_->is_swapped(id) != r.swapped) fail(name_, "sequence " + std::to_string(id) + " swap state differs" + at);
      const std::int64_t cached = b_->cached_tokens(id);
      if (cached < 0 || (cached > 0 && cached >= std::max<std::int64_t>(r.prompt, 1))) {
        fail(name_, "sequence " + std::to_string(id) + " cached_tokens " + std::to_string(cached) + " of prompt " +
                        std::to_string(r.prompt) + at);
      }
      if (!prefix_cache_ && cached != 0) fail(name_, "cached_tokens without a prefix cache" + at);
      if (r.swapped) continue;
      sum_tokens += static_cast<std::size_t>(r.length);
      max_tokens = std::max(max_tokens, static_cast<std::size_t>(r.length));
    }
    for (SeqId id = 0; id < kIds; ++id) {
      if (seqs_.count(id) == 0 && b_->contains(id))
        fail(name_, "unknown sequence " + std::to_string(id) + " present" + at);
    }
    if (shared_) {
      if (m.token_states > sum_tokens * bpt_ || m.token_states < max_tokens * bpt_) {
        fail(name_, "token_states outside [max, sum] of resident lengths (" + std::to_string(max_tokens) + ", " +
                        std::to_string(sum_tokens) + " tokens)" + at);
      }
    } else if (m.token_states != sum_tokens * bpt_) {
      fail(name_, "token_states != sum of resident lengths (" + std::to_string(sum_tokens) + " tokens)" + at);
    }
    const PrefixCacheStats st = b_->prefix_cache_stats();
    if (st.hits < 0 || st.hits > st.queries || st.evictions < 0 || st.inserted_blocks < 0) {
      fail(name_, "prefix cache stats out of range" + at);
    }
    if (!prefix_cache_ && (st.hits != 0 || st.queries != 0 || st.inserted_blocks != 0)) {
      fail(name_, "prefix cache stats without a prefix cache" + at);
    }
  }

  void start() {
    const MemoryBreakdown m = b_->breakdown();
    capacity0_ = m.capacity;
    if (m.allocated() != 0) fail(name_, "fresh backend holds memory: " + describe(m));
    check("construction");
  }
  void set_capacity_bytes(std::size_t c) { capacity_bytes_ = c; }

  /// Runs `op`; OutOfMemory/InvalidArgument must leave everything as before. Returns what it threw.
  enum class Outcome { ok, oom, invalid };
  template <class F>
  Outcome attempt(const char* what, F&& op) {
    const MemoryBreakdown before = b_->breakdown();
    std::map<SeqId, std::int64_t> lengths;
    for (const auto& [id, r] : seqs_) lengths[id] = b_->length(id);
    const std::size_t n = b_->num_sequences();
    Outcome out = Outcome::ok;
    try {
      op();
      return Outcome::ok;
    } catch (const OutOfMemory&) {
      out = Outcome::oom;
    } catch (const InvalidArgument&) {
      out = Outcome::invalid;
    } catch (const std::exception& e) {
      fail(name_, std::string(what) + " threw an unexpected exception: " + e.what());
    } catch (...) {
      fail(name_, std::string(what) + " threw a non-std exception");
    }
    const MemoryBreakdown after = b_->breakdown();
    if (!same(before, after)) {
      fail(name_, std::string(what) + " failed but changed the breakdown: before " + describe(before) + ", after " +
                      describe(after));
    }
    if (b_->num_sequences() != n) fail(name_, std::string(what) + " failed but changed the number of sequences");
    for (const auto& [id, len] : lengths) {
      if (!b_->contains(id) || b_->length(id) != len) fail(name_, std::string(what) + " failed but changed a sequence");
    }
    return out;
  }

  /// A question that must not throw anything but `allowed` and must change nothing.
  template <class F>
  std::optional<bool> ask(const char* what, F&& q) {
    const MemoryBreakdown before = b_->breakdown();
    std::optional<bool> r;
    try {
      r = q();
    } catch (const InvalidArgument&) {
      r.reset();
    } catch (const std::exception& e) {
      fail(name_, std::string(what) + " threw an unexpected exception: " + e.what());
    }
    if (!same(before, b_->breakdown())) fail(name_, std::string(what) + " (a question) changed the breakdown");
    return r;
  }

  void run(Bytes& in) {
    for (int step = 0; step < 400 && !in.empty(); ++step) {
      const std::uint8_t op = in.u8();
      const SeqId id = in.u8() % kIds;
      switch (op % 10) {
        case 0:
        case 1:
          admit(id, in);
          break;
        case 2:
        case 3:
          grow(id, in.u8() % 40);
          break;
        case 4:
          fork(id, in.u8() % kIds);
          break;
        case 5:
          release(id);
          break;
        case 6:
          swap_out(id);
          break;
        case 7:
          swap_in(id);
          break;
        case 8:
          prepare(in.u8());
          break;
        case 9:
          misuse(id, in.u8());
          break;
      }
      check(kOpNames[op % 10]);
    }
    release_all();
  }

  void release_all() {
    std::vector<SeqId> ids;
    for (const auto& [id, r] : seqs_) ids.push_back(id);
    for (SeqId id : ids) release(id);
    check("releasing everything");
    const MemoryBreakdown m = b_->breakdown();
    if (b_->num_sequences() != 0 || m.allocated() != 0) {
      fail(name_, "memory left after releasing every sequence: " + describe(m));
    }
  }

 private:
  static constexpr SeqId kIds = 12;
  static constexpr const char* kOpNames[10] = {"admit",   "admit",    "grow",    "grow",          "fork",
                                               "release", "swap_out", "swap_in", "prepare_batch", "misuse"};

  void admit(SeqId id, Bytes& in) {
    const std::uint8_t a = in.u8(), b = in.u8(), c = in.u8();
    const std::int64_t prompt = a % 144;  // past max_seq_len (128) now and then
    std::int64_t initial = prompt;
    if (c & 1) initial = prompt == 0 ? 0 : (b % (prompt + 1));  // chunked prefill: part of the prompt
    const std::int64_t final_tokens = prompt + (b % 48);
    // Token ids: a shared system prompt per group (prefix-cache hits), then unique ids.
    ids_.clear();
    const int group = (c >> 1) % 4;
    const std::int64_t shared = (c >> 3) % 2 ? prompt : prompt / 2;
    for (std::int64_t i = 0; i < prompt; ++i) {
      ids_.push_back(i < shared ? group * 1000 + static_cast<std::int32_t>(i)
                                : static_cast<std::int32_t>(next_token_++));
    }
    SequenceSpec spec;
    spec.prompt_tokens = prompt;
    spec.final_tokens = final_tokens;
    if (c & 0x40) spec.prompt_token_ids = ids_;
    const bool valid_lengths = initial >= 0 && initial <= final_tokens && final_tokens <= kMaxSeqLen;
    const bool exists = seqs_.count(id) != 0;
    const std::optional<bool> can = ask("can_admit", [&] { return b_->can_admit(spec, initial); });
    if (valid_lengths && !can) fail(name_, "can_admit threw InvalidArgument for a valid spec");
    const Outcome o = attempt("admit", [&] { b_->admit(id, spec, initial); });
    if (exists) {
      if (o != Outcome::invalid) fail(name_, "admit of an existing id did not throw InvalidArgument");
      return;
    }
    if (o == Outcome::invalid) {
      if (valid_lengths) fail(name_, "admit threw InvalidArgument for a valid spec");
      if (can) fail(name_, "can_admit answered but admit threw InvalidArgument");
      return;
    }
    if (can && *can && o != Outcome::ok) fail(name_, "can_admit said yes but admit threw OutOfMemory");
    if (can && !*can && o != Outcome::oom) fail(name_, "can_admit said no but admit succeeded");
    if (!can && o == Outcome::ok) {
      // can_admit rejected the spec as invalid, admit took it: the two must agree.
      fail(name_, "can_admit threw InvalidArgument but admit succeeded");
    }
    if (o == Outcome::ok) {
      seqs_[id] = Ref{initial, final_tokens, prompt, false};
      if (prefix_cache_ && !spec.prompt_token_ids.empty()) shared_ = true;
    }
  }

  void grow(SeqId id, std::int64_t n) {
    const auto it = seqs_.find(id);
    if (it == seqs_.end() || it->second.swapped) return;  // misuse() covers those
    const std::optional<bool> can = ask("can_grow", [&] { return b_->can_grow(id, n); });
    if (!can) fail(name_, "can_grow threw InvalidArgument for a live sequence");
    const Outcome o = attempt("grow", [&] { b_->grow(id, n); });
    if (o == Outcome::invalid) fail(name_, "grow threw InvalidArgument for a live sequence");
    if (*can && o != Outcome::ok) fail(name_, "can_grow said yes but grow threw OutOfMemory");
    if (!*can && o != Outcome::oom) fail(name_, "can_grow said no but grow succeeded");
    if (o == Outcome::ok) it->second.length += n;
  }

  void fork(SeqId parent, SeqId child) {
    const auto it = seqs_.find(parent);
    if (it == seqs_.end() || it->second.swapped) return;
    const bool exists = seqs_.count(child) != 0;
    const Outcome o = attempt("fork", [&] { b_->fork(parent, child); });
    if (exists) {
      if (o != Outcome::invalid) fail(name_, "fork onto an existing id did not throw InvalidArgument");
      return;
    }
    if (o == Outcome::invalid) fail(name_, "fork of a live sequence threw InvalidArgument");
    if (o == Outcome::ok) {
      Ref r = it->second;
      r.prompt = 0;  // forks hold no cached tokens
      seqs_[child] = r;
      if (paged_) shared_ = true;
    }
  }

  void release(SeqId id) {
    const bool exists = seqs_.count(id) != 0;
    const Outcome o = attempt("release", [&] { b_->release(id); });
    if (!exists) {
      if (o != Outcome::invalid) fail(name_, "release of an unknown id did not throw InvalidArgument");
      return;
    }
    if (o != Outcome::ok) fail(name_, "release of a live sequence threw");
    seqs_.erase(id);
  }

  void swap_out(SeqId id) {
    const auto it = seqs_.find(id);
    if (!b_->supports_swap()) {
      if (attempt("swap_out", [&] { b_->swap_out(id); }) != Outcome::invalid) {
        fail(name_, "swap_out on a backend that cannot swap did not throw InvalidArgument");
      }
      return;
    }
    if (it == seqs_.end() || it->second.swapped) return;
    const Outcome o = attempt("swap_out", [&] { b_->swap_out(id); });
    if (o == Outcome::invalid) fail(name_, "swap_out of a resident sequence threw InvalidArgument");
    if (o == Outcome::ok) it->second.swapped = it->second.length > 0;  // nothing to swap: stays resident
  }

  void swap_in(SeqId id) {
    const auto it = seqs_.find(id);
    if (!b_->supports_swap()) {
      if (ask("can_swap_in", [&] { return b_->can_swap_in(id); })) {
        fail(name_, "can_swap_in on a backend that cannot swap did not throw InvalidArgument");
      }
      if (attempt("swap_in", [&] { b_->swap_in(id); }) != Outcome::invalid) {
        fail(name_, "swap_in on a backend that cannot swap did not throw InvalidArgument");
      }
      return;
    }
    if (it == seqs_.end() || !it->second.swapped) return;
    const std::optional<bool> can = ask("can_swap_in", [&] { return b_->can_swap_in(id); });
    if (!can) fail(name_, "can_swap_in threw InvalidArgument for a swapped-out sequence");
    const Outcome o = attempt("swap_in", [&] { b_->swap_in(id); });
    if (o == Outcome::invalid) fail(name_, "swap_in of a swapped-out sequence threw InvalidArgument");
    if (*can && o != Outcome::ok) fail(name_, "can_swap_in said yes but swap_in threw OutOfMemory");
    if (!*can && o != Outcome::oom) fail(name_, "can_swap_in said no but swap_in succeeded");
    if (o == Outcome::ok) it->second.swapped = false;
  }

  void prepare(std::uint8_t mask) {
    std::vector<SeqId> ids;
    for (const auto& [id, r] : seqs_)
      if (!r.swapped && ((mask >> (id % 8)) & 1)) ids.push_back(id);
    PreparedBatch p;
    try {
      p = b_->prepare_batch(ids);
    } catch (const std::exception& e) {
      fail(name_, std::string("prepare_batch of resident sequences threw: ") + e.what());
    }
    if (p.batch != static_cast<int>(ids.size())) fail(name_, "prepare_batch: wrong batch size");
    if (b_->device() == Device::host && !ids.empty()) {
      if (p.seq_lens == nullptr) fail(name_, "prepare_batch: no seq_lens");
      for (std::size_t i = 0; i < ids.size(); ++i) {
        if (p.seq_lens[i] != seqs_.at(ids[i]).length) fail(name_, "prepare_batch: seq_lens differ from the lengths");
      }
    }
  }

  void misuse(SeqId id, std::uint8_t kind) {
    const auto it = seqs_.find(id);
    const bool exists = it != seqs_.end();
    switch (kind % 6) {
      case 0:  // unknown id
        if (!exists) {
          if (attempt("grow(unknown)", [&] { b_->grow(id, 1); }) != Outcome::invalid) {
            fail(name_, "grow of an unknown id did not throw InvalidArgument");
          }
          if (ask("can_grow(unknown)", [&] { return b_->can_grow(id, 1); })) {
            fail(name_, "can_grow of an unknown id did not throw InvalidArgument");
          }
          if (attempt("fork(unknown)", [&] { b_->fork(id, kIds + 1); }) != Outcome::invalid) {
            fail(name_, "fork of an unknown parent did not throw InvalidArgument");
          }
        }
        break;
      case 1:  // negative growth
        if (exists && !it->second.swapped) {
          if (attempt("grow(-1)", [&] { b_->grow(id, -1); }) != Outcome::invalid) {
            fail(name_, "grow by -1 did not throw InvalidArgument");
          }
          if (ask("can_grow(-1)", [&] { return b_->can_grow(id, -1); })) fail(name_, "can_grow(-1) answered");
        }
        break;
      case 2:  // negative or inverted lengths
        if (!exists) {
          SequenceSpec spec;
          spec.prompt_tokens = 4;
          spec.final_tokens = 2;
          if (ask("can_admit(final < initial)", [&] { return b_->can_admit(spec, 4); })) {
            fail(name_, "can_admit with final < initial answered");
          }
          if (attempt("admit(final < initial)", [&] { b_->admit(id, spec, 4); }) != Outcome::invalid) {
            fail(name_, "admit with final < initial did not throw InvalidArgument");
          }
          spec.final_tokens = 4;
          if (attempt("admit(initial -1)", [&] { b_->admit(id, spec, -1); }) != Outcome::invalid) {
            fail(name_, "admit with -1 initial tokens did not throw InvalidArgument");
          }
        }
        break;
      case 3:  // ids shorter than the prompt
        if (!exists) {
          SequenceSpec spec;
          spec.prompt_tokens = 8;
          spec.final_tokens = 8;
          ids_.assign(3, 7);
          spec.prompt_token_ids = ids_;
          const Outcome o = attempt("admit(short ids)", [&] { b_->admit(id, spec, 8); });
          if (prefix_cache_ && o != Outcome::invalid) fail(name_, "admit with 3 ids for 8 prompt tokens did not throw");
          if (o == Outcome::ok) seqs_[id] = Ref{8, 8, 8, false};
        }
        break;
      default:  // swapped-out sequences cannot grow or fork
        if (exists && it->second.swapped && !skip_swapped_misuse_) {
          if (ask("can_grow(swapped)", [&] { return b_->can_grow(id, 1); })) {
            fail(name_, "can_grow of a swapped-out sequence did not throw InvalidArgument");
          }
          if (attempt("grow(swapped)", [&] { b_->grow(id, 1); }) != Outcome::invalid) {
            fail(name_, "grow of a swapped-out sequence did not throw InvalidArgument");
          }
          const SeqId child = (id + 1) % kIds;
          if (seqs_.count(child) == 0 && attempt("fork(swapped)", [&] { b_->fork(id, child); }) != Outcome::invalid) {
            fail(name_, "fork of a swapped-out sequence did not throw InvalidArgument");
          }
        }
        break;
    }
  }

  std::string name_;
  std::unique_ptr<KvBackend> b_;
  bool paged_;
  bool prefix_cache_;
  std::size_t bpt_;
  bool shared_ = false;  // paged: some block may be held by two sequences
  bool skip_swapped_misuse_ = false;
  std::size_t capacity_bytes_ = 0;
  std::size_t capacity0_ = 0;
  std::map<SeqId, Ref> seqs_;
  std::vector<std::int32_t> ids_;
  std::int32_t next_token_ = 100'000;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // backend_forms() plus vmm option variants (eager mapping, no deferred reclamation); -overlap
  // is left out: its background thread makes runs irreproducible.
  static const std::vector<std::string> forms = [] {
    std::vector<std::string> f = backend_forms();
    for (const char* extra : {"vmm-4k-eager16", "vmm-4k-nodefer", "vmm-16k-mega-eager8-nodefer"}) f.emplace_back(extra);
    return f;
  }();
  Bytes in(data, size);
  const std::string name = forms[in.u8() % forms.size()];
  BackendOptions o;
  o.model = tiny_model();
  const std::size_t capacity_tokens = 1 + in.u16() % 2048;
  o.capacity_bytes = capacity_tokens * o.model.kv_bytes_per_token();
  o.max_seq_len = kMaxSeqLen;
  o.memory = nullptr;
  std::unique_ptr<KvBackend> b;
  try {
    b = make_backend(name, o);
  } catch (const InvalidArgument&) {
    return 0;  // capacity below one block / page per tensor: a documented refusal
  } catch (const std::exception& e) {
    fail(name, std::string("make_backend threw an unexpected exception: ") + e.what());
  }
  // Backends with a paged view (paged-B, elastic-B) share blocks on fork; a prefix cache shares them
  // at admission too.
  const bool paged = b->view_shape().layout == KvLayout::paged;
  const bool cache = paged && (name.find("-hash") != std::string::npos || name.find("-radix") != std::string::npos);
  Harness h(name, std::move(b), paged, cache);
  h.set_capacity_bytes(o.capacity_bytes);
  h.start();
  h.run(in);
  return 0;
}
