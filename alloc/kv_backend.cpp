#include "alloc/kv_backend.hpp"

#include "alloc/error.hpp"

namespace kvlab {

void KvBackend::swap_out(SeqId) { KVLAB_THROW(InvalidArgument, "backend " + name() + " cannot swap"); }
bool KvBackend::can_swap_in(SeqId) const { KVLAB_THROW(InvalidArgument, "backend " + name() + " cannot swap"); }
void KvBackend::swap_in(SeqId) { KVLAB_THROW(InvalidArgument, "backend " + name() + " cannot swap"); }
bool KvBackend::is_swapped(SeqId) const { return false; }

}  // namespace kvlab
