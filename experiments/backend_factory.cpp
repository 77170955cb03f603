#include "experiments/backend_factory.hpp"

#include "alloc/contiguous_backend.hpp"
#include "alloc/error.hpp"

namespace kvlab {

std::vector<std::string> backend_forms() { return {"contiguous-max", "contiguous-pow2", "contiguous-oracle"}; }

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
  std::string known;
  for (const auto& f : backend_forms()) known += (known.empty() ? "" : ", ") + f;
  KVLAB_THROW(InvalidArgument, "unknown backend '" + std::string(name) + "' (known: " + known + ")");
}

}  // namespace kvlab
