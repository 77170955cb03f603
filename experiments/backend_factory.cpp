#include "experiments/backend_factory.hpp"

#include "alloc/contiguous_backend.hpp"
#include "alloc/error.hpp"
#include "paged/paged_backend.hpp"

#include <charconv>

namespace kvlab {

std::vector<std::string> backend_forms() {
  return {"contiguous-max", "contiguous-pow2", "contiguous-oracle", "paged-1", "paged-7", "paged-16", "paged-256"};
}

namespace {
/// The integer after a prefix ("paged-16" -> 16), or -1 when the rest is not a plain number.
long long suffix_number(std::string_view name, std::string_view prefix) {
  const std::string_view rest = name.substr(prefix.size());
  long long v = -1;
  const auto [ptr, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), v);
  return ec == std::errc() && ptr == rest.data() + rest.size() && !rest.empty() ? v : -1;
}
}  // namespace

std::unique_ptr<KvBackend> make_backend(std::string_view name, const BackendOptions& options) {
  constexpr std::string_view contiguous = "contiguous-";
  if (name.starts_with(contiguous)) {
    ContiguousConfig c;
    c.model = options.model;
    c.capacity_bytes = options.capacity_bytes;
    c.max_seq_len = options.max_seq_len;
    c.memory = options.memory;
    c.policy = parse_reservation_policy(name.substr(contiguous.size()));
    return std::make_unique<ContiguousBackend>(std::move(c));
  }
  constexpr std::string_view paged = "paged-";
  if (name.starts_with(paged)) {
    const long long bs = suffix_number(name, paged);
    if (bs < 1 || bs > 1024)
      KVLAB_THROW(InvalidArgument, "backend '" + std::string(name) + "': block size must be 1..1024 tokens");
    PagedConfig c;
    c.model = options.model;
    c.capacity_bytes = options.capacity_bytes;
    c.max_seq_len = options.max_seq_len;
    c.memory = options.memory;
    c.block_size = static_cast<std::int32_t>(bs);
    return std::make_unique<PagedBackend>(std::move(c));
  }
  std::string known;
  for (const auto& f : backend_forms()) known += (known.empty() ? "" : ", ") + f;
  KVLAB_THROW(InvalidArgument, "unknown backend '" + std::string(name) + "' (known: " + known + ")");
}

}  // namespace kvlab
