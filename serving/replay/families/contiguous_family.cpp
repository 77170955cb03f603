// contiguous-max|pow2|oracle[-buddy]: Orca-style reservations (alloc/contiguous/).
#include "alloc/contiguous/contiguous_backend.hpp"
#include "serving/replay/families/families.hpp"

namespace kvlab {

namespace {
std::unique_ptr<KvBackend> make_contiguous_backend(std::string_view name, const BackendOptions& options) {
  ContiguousConfig c;
  c.model = options.model;
  c.capacity_bytes = options.capacity_bytes;
  c.max_seq_len = options.max_seq_len;
  c.memory = options.memory;
  std::string_view rest = name.substr(std::string_view("contiguous-").size());
  if (rest.ends_with("-buddy")) {
    c.arena = ArenaKind::buddy;
    rest.remove_suffix(std::string_view("-buddy").size());
  }
  c.policy = parse_reservation_policy(rest);
  return std::make_unique<ContiguousBackend>(std::move(c));
}

}  // namespace

BackendFamily contiguous_backend_family() {
  return {
      "contiguous-",
      "contiguous-max|pow2|oracle[-buddy]",
      {"contiguous-max", "contiguous-pow2", "contiguous-oracle", "contiguous-pow2-buddy", "contiguous-oracle-buddy"},
      make_contiguous_backend};
}

}  // namespace kvlab
