#include "elastic/elastic_pages.hpp"

#include <algorithm>
#include <chrono>
#include <exception>
#include <numeric>
#include <string>

#include "alloc/core/error.hpp"

namespace kvlab {

namespace {
constexpr std::size_t kMaxSpan = 64;  // pages of a plane a group may need (64 x 2 MiB = 128 MiB)

struct Shape {
  std::size_t block_bytes = 0, unit = 0, group_bytes = 0, groups = 0;
  std::size_t span = 0;  // consecutive pages of a plane (or of the one tensor) in a group
  std::int32_t per_group = 0, pages_per_group = 0;
};
Shape shape_of(const ElasticConfig& c) {
  Shape s;
  const auto planes = static_cast<std::size_t>(2 * c.model.num_layers);
  const bool interleaved = c.layout == ElasticLayout::interleaved;
  s.block_bytes = static_cast<std::size_t>(c.block_size) * c.model.kv_bytes_per_token_per_layer() / 2;
  s.unit = interleaved ? s.block_bytes * planes : s.block_bytes;  // what a group holds whole numbers of
  if (s.unit == 0 || c.page_bytes == 0) return s;
  // The fewest consecutive pages that hold a whole number of blocks: lcm(page, unit) / page. One
  // for a block size that divides the page (Llama-3-8B's 32 KiB blocks in 2 MiB), 5 for OPT-13B's
  // 160 KiB blocks of 16 tokens (10 MiB hold 64). Blocks never straddle a group, so a block's
  // address stays base + b * stride and the view stays a plain PagedKv.
  s.span = s.unit / std::gcd(c.page_bytes, s.unit);
  if (s.span > kMaxSpan || c.page_bytes / s.unit * s.span > INT32_MAX) return s;
  s.per_group = static_cast<std::int32_t>(s.span * c.page_bytes / s.unit);
  s.pages_per_group = static_cast<std::int32_t>(s.span * (interleaved ? 1 : planes));
  s.group_bytes = c.page_bytes * static_cast<std::size_t>(s.pages_per_group);
  s.groups = c.capacity_bytes / s.group_bytes;
  return s;
}
}  // namespace

std::string elastic_config_problem(const ElasticConfig& c) {
  if (c.block_size < 1 || c.block_size > 1024)
    return "block size must be between 1 and 1024 tokens (got " + std::to_string(c.block_size) + ")";
  if (c.reserve_groups < 0) return "the reserve must be 0 or more page groups";
  if (c.retain_groups >= 0 && c.retain_groups < c.reserve_groups)
    return "-retainM keeps at most M empty page groups mapped: at least the reserve (" +
           std::to_string(c.reserve_groups) + ")";
  const Shape s = shape_of(c);
  if (s.per_group == 0)
    return "no run of up to " + std::to_string(kMaxSpan) + " " + page_size_name(c.page_bytes) +
           " pages holds a whole number of " + std::to_string(c.block_size) + "-token blocks (" +
           std::to_string(s.unit) + " bytes each" +
           (c.layout == ElasticLayout::interleaved ? ", every layer" : ", one layer's K or V") +
           "): pick a block size or page size with a larger common divisor";
  if (s.groups == 0 || s.groups > static_cast<std::size_t>(INT32_MAX / s.per_group))
    return "the capacity (" + std::to_string(c.capacity_bytes) + " bytes) holds " + std::to_string(s.groups) +
           " page groups of " + std::to_string(s.group_bytes) + " bytes (" + std::to_string(s.pages_per_group) +
           " pages of " + page_size_name(c.page_bytes) + "); it must hold 1 to " +
           std::to_string(INT32_MAX / s.per_group) + " groups";
  return {};
}

ElasticPages::ElasticPages(ElasticConfig config) : config_(std::move(config)) {
  config_.model.validate();
  if (const std::string problem = elastic_config_problem(config_); !problem.empty())
    KVLAB_THROW(InvalidArgument, problem);
  const Shape shape = shape_of(config_);
  block_bytes_ = shape.block_bytes;
  per_group_ = shape.per_group;
  pages_per_group_ = shape.pages_per_group;
  group_bytes_ = shape.group_bytes;
  const std::size_t groups = shape.groups;
  const bool interleaved = config_.layout == ElasticLayout::interleaved;
  const std::size_t unit = shape.unit;
  span_ = shape.span;
  groups_ = static_cast<std::int32_t>(groups);
  if (config_.budget == nullptr) config_.budget = std::make_shared<PhysicalBudget>(groups * group_bytes_);
  handles_.assign(groups * static_cast<std::size_t>(pages_per_group_), 0);
  state_.assign(handles_.size(), kNone);
  stuck_.reserve(groups);
  closed_.reserve(groups);  // never reallocates: settle() pushes without failing
  for (std::int32_t g = groups_ - 1; g >= 0; --g) closed_.push_back(g);
  if (config_.driver != nullptr) {
    KVLAB_EXPECTS(config_.page_bytes % config_.driver->granularity() == 0,
                  "the page size (" + page_size_name(config_.page_bytes) + ") must be a multiple of the " +
                      config_.driver->name() + " driver's granularity (" +
                      page_size_name(config_.driver->granularity()) + ")");
    reservation_bytes_ = groups * group_bytes_;
    reservation_ = config_.driver->reserve(reservation_bytes_, 0);
  }
  auto* base = static_cast<std::byte*>(reservation_);
  if (interleaved) {
    layout_ = {base, block_bytes_, unit};  // [block][plane]: planes a block apart, blocks all planes apart
  } else {
    layout_ = {base, groups * span_ * config_.page_bytes, block_bytes_};  // [plane][block]
  }
  if (config_.overlap && config_.driver != nullptr) {
    pending_.reserve(groups);
    mapped_by_thread_.reserve(groups);  // the thread's appends never allocate
    failed_by_thread_.reserve(groups);
    mapper_ = std::make_unique<BackgroundMapper>(mutex_, [this](const PrefetchJob& job) {
      try {
        const auto t0 = std::chrono::steady_clock::now();
        map_pages(job.slot);
        thread_map_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        mapped_by_thread_.push_back(job.slot);
      } catch (const OutOfMemory&) {  // the reserve waits for the next step, as without a thread
        failed_by_thread_.push_back(job.slot);
      } catch (...) {
        failed_by_thread_.push_back(job.slot);
        if (!thread_error_) thread_error_ = std::current_exception();
      }
      return false;  // a job is one group
    });
  }
}

ElasticPages::~ElasticPages() {
  mapper_.reset();  // stops the thread (between two groups) before anything it maps goes back
  // Teardown cannot report; the driver's books (the double's leak report) show what stayed.
  try {
    if (config_.driver != nullptr) {
      if (open_ > 0) config_.driver->synchronize();
      for (std::int32_t g = 0; g < groups_; ++g) {
        try {
          unmap_group(g);
        } catch (...) {  // the next group may still go back
        }
      }
      config_.driver->free_reservation(reservation_, reservation_bytes_);
    }
    config_.budget->give(static_cast<std::size_t>(open_) * group_bytes_);
  } catch (...) {
  }
}

FreeOrder ElasticPages::free_order() const noexcept {
  return config_.allocation == ElasticAllocation::first_free ? FreeOrder::pages_lifo : FreeOrder::pages;
}

PagePlacement ElasticPages::page_placement() const noexcept {
  switch (config_.allocation) {
    case ElasticAllocation::local:
      return PagePlacement::local;
    case ElasticAllocation::spread:
      return PagePlacement::spread;
    case ElasticAllocation::fullest:
    case ElasticAllocation::first_free:
      break;
  }
  return PagePlacement::fullest;
}

std::byte* ElasticPages::page_address(std::int32_t g, std::int32_t i) const noexcept {
  // Page i of group g: page i % span of the group's run in plane i / span (interleaved: one plane).
  const auto plane = static_cast<std::size_t>(i) / span_, j = static_cast<std::size_t>(i) % span_;
  return layout_.base + plane * layout_.plane_stride + (static_cast<std::size_t>(g) * span_ + j) * config_.page_bytes;
}

void ElasticPages::map_group(std::int32_t g, bool critical) {
  if (!config_.budget->take(group_bytes_))
    KVLAB_THROW(OutOfMemory, "mapping a page group of " + std::to_string(group_bytes_) +
                                 " bytes: the physical budget (" + std::to_string(config_.budget->limit()) +
                                 " bytes) is spent");
  // Accounting only (no driver) maps nothing, so there is nothing to time: two clock reads per group
  // were about a tenth of an interleaved replay's wall time, where a group opens with nearly every
  // block.
  const bool timed = config_.driver != nullptr;
  const auto t0 = timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  try {
    map_pages(g);
  } catch (...) {
    config_.budget->give(group_bytes_);
    throw;
  }
  const double s = timed ? std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() : 0.0;
  if (critical) {
    critical_.maps += pages_per_group_;
    critical_.mapping_s += s;
  } else {
    background_maps_ += pages_per_group_;
    reserve_map_s_ += s;
  }
}

void ElasticPages::map_pages(std::int32_t g) {
  // Pages an earlier attempt could not roll back (the driver refused an unmap or a release) go
  // first; if the driver still refuses, this attempt fails too and the group stays closed.
  const auto first = state_.begin() + static_cast<std::ptrdiff_t>(g) * pages_per_group_;
  if (std::any_of(first, first + pages_per_group_, [](std::uint8_t st) { return st != kNone; })) unmap_group(g);
  VmDriver* d = config_.driver.get();
  PhysHandle* handles = handles_.data() + static_cast<std::size_t>(g) * static_cast<std::size_t>(pages_per_group_);
  std::uint8_t* states = state_.data() + static_cast<std::size_t>(g) * static_cast<std::size_t>(pages_per_group_);
  std::int32_t made = 0, mapped = 0;
  try {
    while (d != nullptr && made < pages_per_group_) {
      const auto h = d->create(config_.page_bytes);
      if (!h) KVLAB_THROW(OutOfMemory, "the " + d->name() + " driver has no physical page left");
      handles[made] = *h;
      states[made++] = kCreated;
      if (!d->map(page_address(g, mapped), config_.page_bytes, *h))
        KVLAB_THROW(OutOfMemory, "the " + d->name() + " driver could not map a page");
      states[mapped] = kMapped;
      d->set_access(page_address(g, mapped++), config_.page_bytes);
    }
  } catch (...) {  // all or nothing: what this call mapped and created goes back
    try {
      if (mapped > 0) d->synchronize();
      unmap_group(g);
    } catch (...) {  // a second failure: the pages stay in state_, retried at the next map and at teardown
    }
    throw;
  }
}

void ElasticPages::unmap_group(std::int32_t g) {
  const std::size_t first = static_cast<std::size_t>(g) * static_cast<std::size_t>(pages_per_group_);
  for (std::int32_t i = 0; i < pages_per_group_; ++i) {  // each page as far as it got: resumable
    std::uint8_t& state = state_[first + static_cast<std::size_t>(i)];
    if (state == kMapped) {
      config_.driver->unmap(page_address(g, i), config_.page_bytes);
      state = kCreated;
    }
    if (state == kCreated) {
      config_.driver->release(handles_[first + static_cast<std::size_t>(i)]);
      state = kNone;
    }
  }
}

bool ElasticPages::open_one(BlockPool& pool, bool critical) {
  if (closed_.empty()) return false;
  const std::int32_t g = closed_.back();
  map_group(g, critical);
  closed_.pop_back();
  pool.open_region(g);
  ++open_;
  return true;
}

std::int64_t ElasticPages::usable(const BlockPool& pool) const {
  if (config_.budget->over_limit()) {
    // A lowered limit (a shrink request): no new group, and only as many blocks as the limit
    // leaves beside those in use, so the tenant comes down to its limit as its sequences end.
    const auto allowed = static_cast<std::int64_t>(config_.budget->limit() / group_bytes_) * per_group_;
    return std::clamp<std::int64_t>(allowed - pool.num_used(), 0, pool.num_open_free());
  }
  const std::int64_t closed = groups_ - pool.num_open();
  const auto affordable = static_cast<std::int64_t>(config_.budget->available() / group_bytes_);
  return pool.num_open_free() + std::min(closed, affordable) * per_group_;
}

void ElasticPages::open(BlockPool& pool, std::int64_t blocks) {
  drain(pool);  // no block of a group the mapper still maps is handed out
  while (pool.num_open_free() < blocks) {
    if (!open_one(pool, true))
      KVLAB_THROW(OutOfMemory, "every page group is mapped and " + std::to_string(pool.num_open_free()) +
                                   " blocks are free; " + std::to_string(blocks) + " needed");
  }
}

bool ElasticPages::wants_settle(const BlockPool& pool) const noexcept {
  // Empty groups beyond the reserve, or any empty group while the budget's limit was lowered
  // below what is held (a shrink request: the pool gives back what empties, lazily).
  return pool.num_open_empty() > (config_.budget->over_limit() ? 0 : retain());
}

void ElasticPages::close(std::int32_t g) {
  try {
    if (config_.driver != nullptr) unmap_group(g);
  } catch (const Error&) {
    // The driver refused (a fault, a device error): the group stays held, out of the pool, and
    // its unmapping is retried at the next settle and at teardown, so no release fails for it.
    stuck_.push_back(g);  // within the capacity reserved for every group
    ++refused_unmaps_;
    return;
  }
  closed_.push_back(g);
  --open_;
  config_.budget->give(group_bytes_);
  critical_.unmaps += pages_per_group_;
}

void ElasticPages::retry_refused() {
  if (stuck_.empty()) return;
  std::vector<std::int32_t> retry;
  retry.swap(stuck_);
  for (const std::int32_t g : retry) close(g);
}

void ElasticPages::settle(BlockPool& pool) {
  std::vector<std::int32_t> empty = pool.take_emptied();
  retry_refused();
  if (!wants_settle(pool)) return;
  const std::int32_t keep = config_.budget->over_limit() ? 0 : retain();
  if (static_cast<std::int64_t>(empty.size()) < pool.num_open_empty() - keep) {
    empty.clear();  // groups opened empty and never used: look at every open group
    for (std::int32_t g = 0; g < groups_; ++g)
      if (pool.is_open(g) && pool.region_free(g) == per_group_) empty.push_back(g);
  }
  std::erase_if(empty, [&](std::int32_t g) { return std::ranges::find(pending_, g) != pending_.end(); });
  if (config_.driver != nullptr) config_.driver->synchronize();  // no kernel may still read them
  // The groups emptied last are closed first; the reserve keeps the ones emptied earlier.
  while (wants_settle(pool) && !empty.empty()) {
    const std::int32_t g = empty.back();
    empty.pop_back();
    pool.close_region(g);  // no block comes from it any more, whatever the driver says
    close(g);
  }
}

void ElasticPages::begin_step(BlockPool& pool) {
  drain(pool);      // the refill prefetch() queued: mapped while the last step computed
  retry_refused();  // PagedBackend settled just before: only the refused unmaps are left to retry
  if (!config_.overlap) refill(pool, false);
}

void ElasticPages::prefetch(BlockPool& pool) {
  if (config_.overlap) refill(pool, true);
}

void ElasticPages::refill(BlockPool& pool, bool background) {
  bool queued = false;
  while (pool.num_open_empty() < config_.reserve_groups && config_.budget->available() >= group_bytes_ &&
         !closed_.empty()) {
    if (!background || mapper_ == nullptr) {
      try {
        open_one(pool, false);
      } catch (const OutOfMemory&) {
        break;  // the driver is out of memory: the reserve waits for the next step
      }
      continue;
    }
    const std::int32_t g = closed_.back();  // the group open_one() would map, in the same order
    if (!config_.budget->take(group_bytes_)) break;
    closed_.pop_back();
    pool.open_region(g);  // pending: drain() comes before any block of it is handed out
    ++open_;
    pending_.push_back(g);
    const std::lock_guard held(mutex_);
    mapper_->push(held, PrefetchJob{g, 0, 0});
    queued = true;
  }
  if (queued) mapper_->notify();
}

void ElasticPages::drain(BlockPool& pool) {
  if (pending_.empty()) return;
  // The whole wait counts, the time taken to get the mutex the thread holds while it maps included
  // (wait() only says whether jobs were left once it had the mutex). The step function catches
  // everything, so wait() never throws here.
  const auto t0 = std::chrono::steady_clock::now();
  (void)mapper_->wait();
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  critical_.mapping_s += waited;
  overlap_wait_s_ += waited;
  std::vector<std::int32_t> mapped, failed;
  std::exception_ptr error;
  {
    const std::lock_guard lock(mutex_);
    mapped = mapped_by_thread_;
    failed = failed_by_thread_;
    mapped_by_thread_.clear();  // keeps the capacity the thread appends into
    failed_by_thread_.clear();
    error = std::exchange(thread_error_, nullptr);
    reserve_map_s_ += std::exchange(thread_map_s_, 0.0);
  }
  pending_.clear();
  background_maps_ += static_cast<std::int64_t>(mapped.size()) * pages_per_group_;
  for (const std::int32_t g : failed) {  // back to closed, in the order they were queued
    pool.close_region(g);
    --open_;
    closed_.push_back(g);
    config_.budget->give(group_bytes_);
  }
  if (error) std::rethrow_exception(error);
}

void ElasticPages::add_counters(BackendCounters& out) const {
  out.emplace_back("mapped_groups", static_cast<double>(open_));
  out.emplace_back("critical_maps", static_cast<double>(critical_.maps));
  out.emplace_back("reserve_maps", static_cast<double>(background_maps_));
  out.emplace_back("unmaps", static_cast<double>(critical_.unmaps));
  out.emplace_back("refused_unmaps", static_cast<double>(refused_unmaps_));
  out.emplace_back("reserve_map_s", reserve_map_s_);
  if (config_.overlap) out.emplace_back("overlap_wait_s", overlap_wait_s_);
}

std::string ElasticPages::backend_name(std::int32_t block_size, PrefixCacheMode cache) const {
  std::string n = "elastic-" + std::to_string(block_size) + "-" + page_size_name(config_.page_bytes);
  if (config_.layout == ElasticLayout::interleaved) n += "-interleaved";
  if (config_.allocation == ElasticAllocation::first_free) n += "-firstfree";
  if (config_.allocation == ElasticAllocation::local) n += "-local";
  if (config_.allocation == ElasticAllocation::spread) n += "-spread";
  if (config_.reserve_groups != 1) n += "-reserve" + std::to_string(config_.reserve_groups);
  if (retain() != config_.reserve_groups) n += "-retain" + std::to_string(retain());
  if (config_.overlap) n += "-overlap";
  if (cache != PrefixCacheMode::none) n += "-" + std::string(to_string(cache));
  return n;
}

}  // namespace kvlab
