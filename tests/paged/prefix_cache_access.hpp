#pragma once
// The paged backend's prefix cache seen as the mode it is, for tests that check a mode's own books
// (the backend exposes only the PrefixCache policy interface).
#include "paged/hash_prefix_cache.hpp"
#include "paged/paged_backend.hpp"
#include "paged/radix_cache.hpp"

namespace kvlab::testing {

/// nullptr unless `b` runs the hash mode.
inline const HashPrefixCache* hash_cache(const PagedBackend& b) {
  return dynamic_cast<const HashPrefixCache*>(&b.prefix_cache());
}
/// nullptr unless `b` runs the radix mode.
inline const RadixCache* radix_cache(const PagedBackend& b) {
  return dynamic_cast<const RadixCache*>(&b.prefix_cache());
}

}  // namespace kvlab::testing
