#include "paged/radix_cache.hpp"

#include <algorithm>
#include <map>
#include <queue>
#include <set>
#include <tuple>
#include <unordered_map>

#include "alloc/core/error.hpp"
#include "alloc/backend/block_hash.hpp"

namespace kvlab {

RadixCache::RadixCache(std::int32_t block_size, BlockPool& pool) : block_size_(block_size), pool_(&pool) {
  KVLAB_EXPECTS(block_size >= 1, "block size must be positive");
  nodes_.emplace_back();
  nodes_[0].live = true;  // the root for no extra keys; never in roots_
}

std::uint64_t RadixCache::edge_key(std::int32_t parent, std::span<const std::int32_t> first_block) const noexcept {
  return hash_block(static_cast<std::uint64_t>(parent) * 0x9e3779b97f4a7c15ULL + 1, first_block);
}

std::int32_t RadixCache::find_root(std::span<const std::int64_t> extra) const {
  if (extra.empty()) return 0;
  const auto [lo, hi] = roots_.equal_range(hash_block(0, {}, extra));
  for (auto it = lo; it != hi; ++it)
    if (std::ranges::equal(nodes_[static_cast<std::size_t>(it->second)].extra, extra)) return it->second;
  return -1;
}

std::int32_t RadixCache::find_child(std::int32_t node, std::span<const std::int32_t> first_block) const {
  const auto [lo, hi] = edges_.equal_range(edge_key(node, first_block));
  for (auto it = lo; it != hi; ++it) {
    const Node& c = nodes_[static_cast<std::size_t>(it->second)];
    if (c.parent == node && std::equal(first_block.begin(), first_block.end(), c.key.begin())) return it->second;
  }
  return -1;
}

void RadixCache::add_edge(std::int32_t child) {
  const Node& c = nodes_[static_cast<std::size_t>(child)];
  edges_.emplace(edge_key(c.parent, std::span(c.key).first(static_cast<std::size_t>(block_size_))), child);
}

void RadixCache::remove_edge(std::int32_t child) {
  const Node& c = nodes_[static_cast<std::size_t>(child)];
  auto [lo, hi] = edges_.equal_range(edge_key(c.parent, std::span(c.key).first(static_cast<std::size_t>(block_size_))));
  for (auto it = lo; it != hi; ++it)
    if (it->second == child) {
      edges_.erase(it);
      return;
    }
  KVLAB_ASSERT(false && "edge not found");
}

std::int32_t RadixCache::new_node() {
  std::int32_t id;
  if (!free_nodes_.empty()) {
    id = free_nodes_.back();
    free_nodes_.pop_back();
    nodes_[static_cast<std::size_t>(id)] = Node{};
  } else {
    id = static_cast<std::int32_t>(nodes_.size());
    nodes_.emplace_back();
  }
  nodes_[static_cast<std::size_t>(id)].live = true;
  return id;
}

RadixCache::Match RadixCache::match(std::span<const std::int32_t> tokens, std::span<const std::int64_t> extra,
                                    std::int64_t max_blocks) const {
  Match m;
  std::int32_t x = find_root(extra);
  m.node = x;
  if (x < 0) return m;
  const auto bs = static_cast<std::size_t>(block_size_);
  std::int64_t i = 0;
  m.node_blocks = 0;
  while (i < max_blocks) {
    const std::int32_t c = find_child(x, tokens.subspan(static_cast<std::size_t>(i) * bs, bs));
    if (c < 0) break;
    const Node& n = nodes_[static_cast<std::size_t>(c)];
    const auto size = static_cast<std::int64_t>(n.blocks.size());
    std::int64_t k = 1;  // find_child matched the first block
    while (k < size && i + k < max_blocks &&
           std::equal(n.key.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(k) * bs),
                      n.key.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(k + 1) * bs),
                      tokens.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(i + k) * bs)))
      ++k;
    m.blocks.insert(m.blocks.end(), n.blocks.begin(), n.blocks.begin() + k);
    if (n.lock == 0) m.revived += k;
    i += k;
    m.node = c;
    m.node_blocks = k;
    if (k < size) return m;  // ends inside c
    x = c;
  }
  if (m.node >= 0 && m.node_blocks == 0)
    m.node_blocks = static_cast<std::int64_t>(nodes_[static_cast<std::size_t>(m.node)].blocks.size());
  return m;
}

std::int32_t RadixCache::split(std::int32_t node, std::int64_t keep_blocks) {
  // node = [prefix | rest] becomes new = [prefix] with child node = [rest].
  const auto bs = static_cast<std::size_t>(block_size_);
  const std::int32_t p = new_node();  // may reallocate nodes_: index afresh below
  Node& n = nodes_[static_cast<std::size_t>(node)];
  Node& pre = nodes_[static_cast<std::size_t>(p)];
  remove_edge(node);
  const auto kb = static_cast<std::ptrdiff_t>(keep_blocks);
  pre.key.assign(n.key.begin(), n.key.begin() + kb * static_cast<std::ptrdiff_t>(bs));
  pre.blocks.assign(n.blocks.begin(), n.blocks.begin() + kb);
  pre.parent = n.parent;
  pre.children = 1;
  pre.lock = n.lock;
  pre.last_access = n.last_access;
  n.key.erase(n.key.begin(), n.key.begin() + kb * static_cast<std::ptrdiff_t>(bs));
  n.blocks.erase(n.blocks.begin(), n.blocks.begin() + kb);
  n.parent = p;
  add_edge(p);
  add_edge(node);
  return p;
}

std::int32_t RadixCache::commit(const Match& m, std::span<const std::int64_t> extra) {
  std::int32_t node = m.node;
  if (node < 0) {
    node = new_node();
    nodes_[static_cast<std::size_t>(node)].extra.assign(extra.begin(), extra.end());
    roots_.emplace(hash_block(0, {}, extra), node);
    return node;
  }
  if (nodes_[static_cast<std::size_t>(node)].parent >= 0 &&
      m.node_blocks < static_cast<std::int64_t>(nodes_[static_cast<std::size_t>(node)].blocks.size()))
    node = split(node, m.node_blocks);
  touch(node);
  return node;
}

std::int32_t RadixCache::insert(std::int32_t node, std::span<const std::int32_t> tokens,
                                std::span<const BlockId> blocks) {
  if (blocks.empty()) return node;
  const auto bs = static_cast<std::size_t>(block_size_);
  KVLAB_ASSERT(tokens.size() == blocks.size() * bs);
  if (find_child(node, tokens.first(bs)) >= 0) return node;  // already cached: ours stay private
  const std::int32_t leaf = new_node();
  Node& n = nodes_[static_cast<std::size_t>(leaf)];
  n.key.assign(tokens.begin(), tokens.end());
  n.blocks.assign(blocks.begin(), blocks.end());
  n.parent = node;
  n.last_access = ++clock_;
  ++nodes_[static_cast<std::size_t>(node)].children;
  add_edge(leaf);
  for (const BlockId b : blocks) pool_->add_ref(b);
  evictable_ += static_cast<std::int64_t>(blocks.size());
  cached_ += static_cast<std::int64_t>(blocks.size());
  return leaf;
}

std::int32_t RadixCache::acquire_hit(const PrefixHit& hit, std::span<const std::int64_t> extra) {
  const std::int32_t node = commit(hit, extra);
  lock(node);  // the hit blocks are the sequence's now: not evictable
  for (const BlockId b : hit.blocks) pool_->add_ref(b);
  return node;
}

std::int64_t RadixCache::enter_blocks(std::span<const std::int32_t> tokens, std::span<const std::int64_t>,
                                      std::span<const BlockId> blocks, std::int64_t from, std::int64_t to,
                                      std::int32_t& hold) {
  const auto bs = static_cast<std::size_t>(block_size_);
  const std::int32_t leaf =
      insert(hold, tokens.subspan(static_cast<std::size_t>(from) * bs, static_cast<std::size_t>(to - from) * bs),
             blocks.subspan(static_cast<std::size_t>(from), static_cast<std::size_t>(to - from)));
  if (leaf == hold) return 0;
  lock(leaf);
  unlock(hold);
  hold = leaf;
  return to - from;
}

void RadixCache::release_hold(std::int32_t hold) {
  unlock(hold);
  touch(hold);
}

void RadixCache::lock(std::int32_t node) {
  for (std::int32_t x = node; x >= 0 && nodes_[static_cast<std::size_t>(x)].parent >= 0;
       x = nodes_[static_cast<std::size_t>(x)].parent) {
    Node& n = nodes_[static_cast<std::size_t>(x)];
    if (n.lock++ == 0) evictable_ -= static_cast<std::int64_t>(n.blocks.size());
  }
}

void RadixCache::unlock(std::int32_t node) {
  for (std::int32_t x = node; x >= 0 && nodes_[static_cast<std::size_t>(x)].parent >= 0;
       x = nodes_[static_cast<std::size_t>(x)].parent) {
    Node& n = nodes_[static_cast<std::size_t>(x)];
    KVLAB_ASSERT(n.lock > 0);
    if (--n.lock == 0) evictable_ += static_cast<std::int64_t>(n.blocks.size());
  }
}

void RadixCache::touch(std::int32_t node) {
  const std::uint64_t t = ++clock_;
  for (std::int32_t x = node; x >= 0; x = nodes_[static_cast<std::size_t>(x)].parent)
    nodes_[static_cast<std::size_t>(x)].last_access = t;
}

void RadixCache::drop_block(BlockId b) {
  const bool now_free = pool_->release(b);
  KVLAB_ASSERT(now_free);  // an unlocked node's blocks are held by the tree alone
  --evictable_;
  --cached_;
  ++evicted_;
}

void RadixCache::remove_node(std::int32_t x) {
  remove_edge(x);
  const std::int32_t p = nodes_[static_cast<std::size_t>(x)].parent;
  nodes_[static_cast<std::size_t>(x)] = Node{};
  free_nodes_.push_back(x);
  --nodes_[static_cast<std::size_t>(p)].children;
}

std::int64_t RadixCache::evict(std::int64_t blocks) { return evict_lru(blocks, true); }

std::int64_t RadixCache::evict_lru(std::int64_t blocks, bool whole_nodes) {
  using Entry = std::pair<std::uint64_t, std::int32_t>;  // (last access, node): oldest first
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> leaves;
  const auto evictable_leaf = [](const Node& n) { return n.live && n.parent >= 0 && n.children == 0 && n.lock == 0; };
  for (std::size_t i = 0; i < nodes_.size(); ++i)
    if (evictable_leaf(nodes_[i])) leaves.emplace(nodes_[i].last_access, static_cast<std::int32_t>(i));
  std::int64_t freed = 0;
  while (freed < blocks && !leaves.empty()) {
    const std::int32_t x = leaves.top().second;
    leaves.pop();
    Node& n = nodes_[static_cast<std::size_t>(x)];
    if (!whole_nodes && freed + static_cast<std::int64_t>(n.blocks.size()) > blocks) {
      // The last leaf gives only what is still asked, from its end.
      const auto keep = n.blocks.size() - static_cast<std::size_t>(blocks - freed);
      for (std::size_t k = keep; k < n.blocks.size(); ++k) drop_block(n.blocks[k]);
      freed = blocks;
      n.blocks.resize(keep);
      n.key.resize(keep * static_cast<std::size_t>(block_size_));
      break;
    }
    for (const BlockId b : n.blocks) drop_block(b);
    freed += static_cast<std::int64_t>(n.blocks.size());
    const std::int32_t p = n.parent;
    remove_node(x);
    if (evictable_leaf(nodes_[static_cast<std::size_t>(p)]))
      leaves.emplace(nodes_[static_cast<std::size_t>(p)].last_access, p);
  }
  return freed;
}

std::int64_t RadixCache::trim(std::int64_t keep, bool by_pages) {
  const std::int64_t excess = evictable_ - keep;
  if (excess <= 0) return 0;
  std::int64_t freed = by_pages && pool_->page_order() ? evict_regions(excess) : 0;
  if (freed < excess) freed += evict_lru(excess - freed, false);
  return freed;
}

// evict_regions' view of the tree: child lists, each node's subtree size (its blocks and all below
// it), where every evictable block sits, and each region's evictable blocks.
struct RadixCache::TrimIndex {
  struct Spot {
    std::int32_t region, node, index;
    BlockId block;
  };
  std::vector<std::int32_t> first_child, next_sibling;
  std::vector<std::int64_t> subtree;
  std::vector<Spot> spots;              // by (region, node, index)
  std::vector<std::size_t> start;       // region r's spots: [start[r], start[r + 1])
  std::vector<std::int32_t> evictable;  // [region] evictable blocks

  [[nodiscard]] std::int32_t used(const BlockPool& pool, std::int32_t r) const {
    return pool.region_blocks() - pool.region_free(r);
  }
};

void RadixCache::index_for_trim(TrimIndex& t) const {
  const std::size_t n = nodes_.size();
  t.first_child.assign(n, -1);
  t.next_sibling.assign(n, -1);
  t.subtree.assign(n, 0);
  t.evictable.assign(static_cast<std::size_t>(pool_->num_regions()), 0);
  std::vector<std::int32_t> order;  // nodes, parents before children
  for (std::size_t i = 0; i < n; ++i) {
    const Node& x = nodes_[i];
    if (!x.live) continue;
    if (x.parent < 0) {
      order.push_back(static_cast<std::int32_t>(i));
      continue;
    }
    t.next_sibling[i] = t.first_child[static_cast<std::size_t>(x.parent)];
    t.first_child[static_cast<std::size_t>(x.parent)] = static_cast<std::int32_t>(i);
    if (x.lock != 0) continue;
    for (std::size_t k = 0; k < x.blocks.size(); ++k) {
      const std::int32_t r = pool_->region_of(x.blocks[k]);
      t.spots.push_back({r, static_cast<std::int32_t>(i), static_cast<std::int32_t>(k), x.blocks[k]});
      ++t.evictable[static_cast<std::size_t>(r)];
    }
  }
  for (std::size_t k = 0; k < order.size(); ++k)
    for (std::int32_t c = t.first_child[static_cast<std::size_t>(order[k])]; c >= 0;
         c = t.next_sibling[static_cast<std::size_t>(c)])
      order.push_back(c);
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const Node& x = nodes_[static_cast<std::size_t>(*it)];
    t.subtree[static_cast<std::size_t>(*it)] += static_cast<std::int64_t>(x.blocks.size());
    if (x.parent >= 0) t.subtree[static_cast<std::size_t>(x.parent)] += t.subtree[static_cast<std::size_t>(*it)];
  }
  std::ranges::sort(t.spots, {}, [](const TrimIndex::Spot& s) { return std::tuple(s.region, s.node, s.index); });
  t.start.assign(t.evictable.size() + 1, 0);
  for (const TrimIndex::Spot& s : t.spots) ++t.start[static_cast<std::size_t>(s.region) + 1];
  for (std::size_t r = 0; r < t.evictable.size(); ++r) t.start[r + 1] += t.start[r];
}

std::int64_t RadixCache::region_cost(const TrimIndex& t, std::int32_t r) const {
  std::int64_t c = 0;
  std::int32_t counted = -1;  // a node's later blocks go with its first one here
  for (std::size_t k = t.start[static_cast<std::size_t>(r)]; k < t.start[static_cast<std::size_t>(r) + 1]; ++k) {
    const TrimIndex::Spot& s = t.spots[k];
    const Node& x = nodes_[static_cast<std::size_t>(s.node)];
    const bool present = x.live && static_cast<std::size_t>(s.index) < x.blocks.size() &&
                         x.blocks[static_cast<std::size_t>(s.index)] == s.block;
    if (s.node != counted && present) {
      c += t.subtree[static_cast<std::size_t>(s.node)] - s.index;
      counted = s.node;
    }
  }
  return c;
}

std::int64_t RadixCache::cut(TrimIndex& t, std::int32_t x, std::int32_t index) {
  const auto drop = [&](BlockId b) {
    drop_block(b);
    --t.evictable[static_cast<std::size_t>(pool_->region_of(b))];
  };
  std::vector<std::int32_t> below;
  const auto push_children = [&](std::int32_t y) {
    for (std::int32_t c = t.first_child[static_cast<std::size_t>(y)]; c >= 0;
         c = t.next_sibling[static_cast<std::size_t>(c)])
      if (nodes_[static_cast<std::size_t>(c)].live) below.push_back(c);
  };
  push_children(x);
  while (!below.empty()) {
    const std::int32_t y = below.back();
    below.pop_back();
    push_children(y);
    for (const BlockId b : nodes_[static_cast<std::size_t>(y)].blocks) drop(b);
    remove_node(y);
  }
  Node& nx = nodes_[static_cast<std::size_t>(x)];
  const std::int64_t removed = t.subtree[static_cast<std::size_t>(x)] - index;
  for (std::size_t k = static_cast<std::size_t>(index); k < nx.blocks.size(); ++k) drop(nx.blocks[k]);
  std::int32_t a = x;
  if (index == 0) {
    a = nx.parent;
    remove_node(x);
  } else {
    nx.blocks.resize(static_cast<std::size_t>(index));
    nx.key.resize(static_cast<std::size_t>(index) * static_cast<std::size_t>(block_size_));
  }
  for (; a >= 0; a = nodes_[static_cast<std::size_t>(a)].parent) t.subtree[static_cast<std::size_t>(a)] -= removed;
  return removed;
}

std::int64_t RadixCache::evict_regions(std::int64_t blocks) {
  TrimIndex t;
  index_for_trim(t);
  std::int64_t freed = evict_whole_regions(t, blocks);
  if (freed < blocks) freed += evict_ends_by_region(t, blocks - freed);
  return freed;
}

std::int64_t RadixCache::evict_whole_regions(TrimIndex& t, std::int64_t blocks) {
  // A region may take up to a quarter of its blocks more than asked: emptying it returns a whole
  // page group, where stopping short leaves the group mapped for a few cached blocks.
  const std::int64_t slack = pool_->region_blocks() / 4;
  using Entry = std::pair<std::int64_t, std::int32_t>;  // (cost when queued, region): cheapest first
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> queue;
  for (std::int32_t r = 0; r < static_cast<std::int32_t>(t.evictable.size()); ++r)
    if (t.evictable[static_cast<std::size_t>(r)] > 0 && t.evictable[static_cast<std::size_t>(r)] == t.used(*pool_, r))
      queue.emplace(region_cost(t, r), r);  // every used block of r is evictable: r can empty
  std::int64_t freed = 0;
  while (!queue.empty()) {
    const auto [queued, r] = queue.top();
    queue.pop();
    if (t.evictable[static_cast<std::size_t>(r)] == 0) continue;  // emptied by another region's cuts
    const std::int64_t now = region_cost(t, r);                   // costs only fall: requeue when lower
    if (now < queued) {
      queue.emplace(now, r);
      continue;
    }
    if (now > blocks - freed + slack) break;  // the cheapest region left does not fit whole
    for (std::size_t k = t.start[static_cast<std::size_t>(r)]; k < t.start[static_cast<std::size_t>(r) + 1]; ++k) {
      const TrimIndex::Spot& s = t.spots[k];
      const Node& x = nodes_[static_cast<std::size_t>(s.node)];
      if (x.live && static_cast<std::size_t>(s.index) < x.blocks.size() &&
          x.blocks[static_cast<std::size_t>(s.index)] == s.block)
        freed += cut(t, s.node, s.index);
    }
    KVLAB_ASSERT(t.used(*pool_, r) == 0);
  }
  return freed;
}

std::int64_t RadixCache::evict_ends_by_region(TrimIndex& t, std::int64_t blocks) {
  // Block by block from the leaves' ends: the end block on the region with the fewest used blocks
  // first (regions no sequence pins before those one does), least recently used first within a
  // region. A region being drained only gets emptier, so it goes on until it empties or none of its
  // blocks ends a leaf.
  std::unordered_map<std::int32_t, std::vector<std::int32_t>> ends;  // region -> leaves ending there
  using Key = std::tuple<bool, std::int32_t, std::int32_t>;          // (pinned, used, region)
  std::set<Key> regions;                                             // those with leaves ending there
  std::unordered_map<std::int32_t, Key> listed;                      // region -> its key in `regions`
  const auto relist = [&](std::int32_t r) {                          // after r's blocks or leaves changed
    if (const auto it = listed.find(r); it != listed.end()) {
      regions.erase(it->second);
      listed.erase(it);
    }
    if (!ends[r].empty()) {
      const Key k{t.evictable[static_cast<std::size_t>(r)] < t.used(*pool_, r), t.used(*pool_, r), r};
      regions.insert(k);
      listed.emplace(r, k);
    }
  };
  const auto add_leaf = [&](std::int32_t x) {
    const std::int32_t r = pool_->region_of(nodes_[static_cast<std::size_t>(x)].blocks.back());
    ends[r].push_back(x);
    relist(r);
  };
  const auto evictable_leaf = [&](std::int32_t x) {
    const Node& n = nodes_[static_cast<std::size_t>(x)];
    return n.live && n.parent >= 0 && n.children == 0 && n.lock == 0;
  };
  for (std::int32_t x = 0; x < static_cast<std::int32_t>(nodes_.size()); ++x)
    if (evictable_leaf(x)) add_leaf(x);
  std::int64_t freed = 0;
  while (freed < blocks && !regions.empty()) {
    const std::int32_t r = std::get<2>(*regions.begin());
    auto& leaves = ends[r];
    const auto oldest = std::ranges::min_element(
        leaves, {}, [&](std::int32_t x) { return nodes_[static_cast<std::size_t>(x)].last_access; });
    const std::int32_t x = *oldest;
    *oldest = leaves.back();
    leaves.pop_back();
    Node& n = nodes_[static_cast<std::size_t>(x)];
    drop_block(n.blocks.back());
    --t.evictable[static_cast<std::size_t>(r)];
    ++freed;
    n.blocks.pop_back();
    n.key.resize(n.key.size() - static_cast<std::size_t>(block_size_));
    relist(r);
    if (!n.blocks.empty()) {
      add_leaf(x);
    } else {
      const std::int32_t p = n.parent;
      remove_node(x);
      if (evictable_leaf(p)) add_leaf(p);
    }
  }
  return freed;
}

std::vector<BlockId> RadixCache::movable_blocks() const {
  std::vector<BlockId> out;
  for (const Node& n : nodes_)
    if (n.live && n.parent >= 0 && n.lock == 0) out.insert(out.end(), n.blocks.begin(), n.blocks.end());
  return out;
}

void RadixCache::relocate(const std::vector<std::pair<BlockId, BlockId>>& moves) {
  std::unordered_map<BlockId, std::pair<std::int32_t, std::size_t>> at;  // block -> (node, index)
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    const Node& n = nodes_[i];
    if (n.live && n.parent >= 0 && n.lock == 0)
      for (std::size_t k = 0; k < n.blocks.size(); ++k)
        at.emplace(n.blocks[k], std::pair(static_cast<std::int32_t>(i), k));
  }
  for (const auto& [from, to] : moves) {
    const auto it = at.find(from);
    KVLAB_EXPECTS(it != at.end(), "block " + std::to_string(from) + " is not a movable cached block");
    nodes_[static_cast<std::size_t>(it->second.first)].blocks[it->second.second] = to;
    const bool now_free = pool_->release(from);
    KVLAB_ASSERT(now_free);  // the tree held it alone
  }
}

void RadixCache::check_invariants() const {
  std::vector<std::int32_t> locks(nodes_.size(), 0), children(nodes_.size(), 0);
  std::int64_t cached = 0, evictable = 0;
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    const Node& n = nodes_[i];
    if (!n.live || n.parent < 0) continue;
    KVLAB_ASSERT(n.key.size() == n.blocks.size() * static_cast<std::size_t>(block_size_) && !n.blocks.empty());
    KVLAB_ASSERT(nodes_[static_cast<std::size_t>(n.parent)].live);
    ++children[static_cast<std::size_t>(n.parent)];
    KVLAB_ASSERT(find_child(n.parent, std::span(n.key).first(static_cast<std::size_t>(block_size_))) ==
                 static_cast<std::int32_t>(i));
    cached += static_cast<std::int64_t>(n.blocks.size());
    if (n.lock == 0) evictable += static_cast<std::int64_t>(n.blocks.size());
    KVLAB_ASSERT(n.lock <= nodes_[static_cast<std::size_t>(n.parent)].lock ||
                 nodes_[static_cast<std::size_t>(n.parent)].parent < 0);
    for (const BlockId b : n.blocks) KVLAB_ASSERT(pool_->ref_count(b) >= 1 + (n.lock > 0 ? 1 : 0));
  }
  for (std::size_t i = 0; i < nodes_.size(); ++i)
    if (nodes_[i].live) KVLAB_ASSERT(children[i] == nodes_[i].children);
  KVLAB_ASSERT(cached == cached_ && evictable == evictable_);
}

void RadixCache::dump_node(std::int32_t node, std::int64_t start, std::string& out) const {
  const Node& n = nodes_[static_cast<std::size_t>(node)];
  const std::int64_t end = start + static_cast<std::int64_t>(n.key.size());
  if (n.parent >= 0) {
    out += '(';
    out += std::to_string(start);
    out += "..";
    out += std::to_string(end);
    out += " [";
    for (std::size_t i = 0; i < n.blocks.size(); ++i) {
      if (i > 0) out += ',';
      out += std::to_string(n.blocks[i]);
    }
    out += "] L";
    out += std::to_string(n.lock);
  }
  std::map<std::vector<std::int32_t>, std::int32_t> kids;  // key order: deterministic text
  for (std::size_t i = 0; i < nodes_.size(); ++i)
    if (nodes_[i].live && nodes_[i].parent == node) kids.emplace(nodes_[i].key, static_cast<std::int32_t>(i));
  for (const auto& [key, c] : kids) dump_node(c, end, out);
  if (n.parent >= 0) out += ")";
}

std::string RadixCache::dump() const {
  std::string out;
  dump_node(0, 0, out);
  return out;
}

}  // namespace kvlab
