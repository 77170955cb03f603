#include "alloc/contiguous/first_fit_arena.hpp"

#include <algorithm>
#include <bit>
#include <iterator>
#include <string>

#include "alloc/core/error.hpp"

namespace kvlab {

namespace {
std::size_t checked_alignment(std::size_t alignment) {
  KVLAB_EXPECTS(std::has_single_bit(alignment), "arena alignment must be a power of two");
  return alignment;
}
}  // namespace

FirstFitArena::FirstFitArena(std::size_t capacity, std::size_t alignment)
    : capacity_(capacity / checked_alignment(alignment) * alignment), alignment_(alignment), free_bytes_(capacity_) {
  if (capacity_ > 0) holes_.emplace(0, capacity_);
}

std::optional<std::size_t> FirstFitArena::allocate(std::size_t bytes) {
  const std::size_t need = rounded(std::max<std::size_t>(bytes, 1));
  for (auto it = holes_.begin(); it != holes_.end(); ++it) {
    if (it->second < need) continue;
    const std::size_t offset = it->first, size = it->second;
    holes_.erase(it);
    if (size > need) holes_.emplace(offset + need, size - need);
    used_.emplace(offset, need);
    free_bytes_ -= need;
    return offset;
  }
  return std::nullopt;
}

bool FirstFitArena::can_allocate(std::size_t bytes) const {
  return largest_hole() >= rounded(std::max<std::size_t>(bytes, 1));
}

void FirstFitArena::deallocate(std::size_t offset) {
  const auto u = used_.find(offset);
  KVLAB_EXPECTS(u != used_.end(), "arena offset " + std::to_string(offset) + " is not allocated");
  std::size_t start = offset, size = u->second;
  used_.erase(u);
  free_bytes_ += size;
  // Coalesce with the following and the preceding hole.
  auto next = holes_.lower_bound(offset);
  if (next != holes_.end() && next->first == start + size) {
    size += next->second;
    next = holes_.erase(next);
  }
  if (next != holes_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      size += prev->second;
      holes_.erase(prev);
    }
  }
  holes_.emplace(start, size);
}

std::size_t FirstFitArena::block_size(std::size_t offset) const {
  const auto u = used_.find(offset);
  KVLAB_EXPECTS(u != used_.end(), "arena offset " + std::to_string(offset) + " is not allocated");
  return u->second;
}

std::size_t FirstFitArena::largest_hole() const noexcept {
  std::size_t best = 0;
  for (const auto& [offset, size] : holes_) best = std::max(best, size);
  return best;
}

std::size_t FirstFitArena::free_bytes_in_holes_smaller_than(std::size_t bytes) const noexcept {
  const std::size_t need = rounded(std::max<std::size_t>(bytes, 1));
  std::size_t sum = 0;
  for (const auto& [offset, size] : holes_)
    if (size < need) sum += size;
  return sum;
}

std::vector<std::pair<std::size_t, std::size_t>> FirstFitArena::holes() const { return {holes_.begin(), holes_.end()}; }

}  // namespace kvlab
