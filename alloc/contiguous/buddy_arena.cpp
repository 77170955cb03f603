#include "alloc/contiguous/buddy_arena.hpp"

#include <algorithm>
#include <bit>
#include <string>

#include "alloc/core/error.hpp"

namespace kvlab {

namespace {
constexpr std::size_t one(int order) noexcept { return std::size_t{1} << order; }
}  // namespace

BuddyArena::BuddyArena(std::size_t capacity, std::size_t unit) : unit_(unit) {
  KVLAB_EXPECTS(unit > 0, "buddy arena unit must be positive");
  capacity_units_ = capacity / unit;
  free_units_ = capacity_units_;
  free_.resize(capacity_units_ == 0 ? 1 : static_cast<std::size_t>(std::bit_width(capacity_units_)));
  // Roots: the binary decomposition of the capacity, largest first (lowest address).
  std::size_t start = 0;
  for (int order = static_cast<int>(free_.size()) - 1; order >= 0; --order) {
    if ((capacity_units_ & one(order)) == 0) continue;
    roots_.emplace(start, order);
    free_[order].insert(start);
    start += one(order);
  }
}

std::size_t BuddyArena::units_for(std::size_t bytes) const noexcept {
  return std::max<std::size_t>(bytes / unit_ + (bytes % unit_ != 0), 1);  // no overflow near SIZE_MAX
}

int BuddyArena::order_for(std::size_t bytes) const noexcept {
  const int order = static_cast<int>(std::bit_width(units_for(bytes) - 1));  // ceil(log2(units))
  return order < static_cast<int>(free_.size()) ? order : -1;
}

std::size_t BuddyArena::rounded(std::size_t bytes) const noexcept {
  const int order = order_for(bytes);
  return order < 0 ? 0 : one(order) * unit_;
}

std::pair<std::size_t, int> BuddyArena::root_of(std::size_t u) const {
  auto it = roots_.upper_bound(u);
  KVLAB_EXPECTS(it != roots_.begin(), "buddy arena unit " + std::to_string(u) + " lies in no root");
  --it;
  return {it->first, it->second};
}

std::optional<std::size_t> BuddyArena::allocate(std::size_t bytes) {
  const int order = order_for(bytes);
  if (order < 0) return std::nullopt;
  int from = order;
  while (from < static_cast<int>(free_.size()) && free_[from].empty()) ++from;
  if (from == static_cast<int>(free_.size())) return std::nullopt;
  const std::size_t start = *free_[from].begin();
  free_[from].erase(free_[from].begin());
  // Split down to the order asked for; the upper halves become free buddies.
  while (from > order) {
    --from;
    free_[from].insert(start + one(from));
  }
  used_.emplace(start, order);
  free_units_ -= one(order);
  return start * unit_;
}

bool BuddyArena::can_allocate(std::size_t bytes) const {
  const int order = order_for(bytes);
  if (order < 0) return false;
  for (int o = order; o < static_cast<int>(free_.size()); ++o)
    if (!free_[o].empty()) return true;
  return false;
}

void BuddyArena::deallocate(std::size_t offset) {
  const auto u = offset % unit_ == 0 ? used_.find(offset / unit_) : used_.end();
  KVLAB_EXPECTS(u != used_.end(), "arena offset " + std::to_string(offset) + " is not allocated");
  std::size_t start = u->first;
  int order = u->second;
  used_.erase(u);
  free_units_ += one(order);
  const auto [root, root_order] = root_of(start);
  while (order < root_order) {
    const std::size_t buddy = root + ((start - root) ^ one(order));
    const auto b = free_[order].find(buddy);
    if (b == free_[order].end()) break;
    free_[order].erase(b);
    start = std::min(start, buddy);
    ++order;
  }
  free_[order].insert(start);
}

std::size_t BuddyArena::block_size(std::size_t offset) const {
  const auto u = offset % unit_ == 0 ? used_.find(offset / unit_) : used_.end();
  KVLAB_EXPECTS(u != used_.end(), "arena offset " + std::to_string(offset) + " is not allocated");
  return one(u->second) * unit_;
}

std::size_t BuddyArena::largest_hole() const noexcept {
  for (int o = static_cast<int>(free_.size()) - 1; o >= 0; --o)
    if (!free_[o].empty()) return one(o) * unit_;
  return 0;
}

std::size_t BuddyArena::free_bytes_in_holes_smaller_than(std::size_t bytes) const noexcept {
  int order = order_for(bytes);
  if (order < 0) order = static_cast<int>(free_.size());
  std::size_t units = 0;
  for (int o = 0; o < order; ++o) units += free_[o].size() * one(o);
  return units * unit_;
}

std::vector<std::pair<std::size_t, std::size_t>> BuddyArena::holes() const {
  std::vector<std::pair<std::size_t, std::size_t>> h;
  for (int o = 0; o < static_cast<int>(free_.size()); ++o)
    for (const std::size_t start : free_[o]) h.emplace_back(start * unit_, one(o) * unit_);
  std::sort(h.begin(), h.end());
  return h;
}

}  // namespace kvlab
