// PhysicalPagePool's row operations (allocate_pages, release_pages) against its page operations.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "vmm/page_pool.hpp"

namespace kvlab {
namespace {

/// Two pools of each free order, one driven a row at a time and one page by page, through the same
/// seeded random walk (rows of 1 to 7 pages, released in random order, some rows refused for lack
/// of pages): the same pages come out in the same order, and a refused row takes nothing.
TEST(PhysicalPagePool, RowOperationsHandOutWhatPageOperationsWould) {
  for (const PageFreeOrder order : {PageFreeOrder::lifo, PageFreeOrder::lru}) {
    constexpr std::int64_t kPages = 40;
    PhysicalPagePool rows(nullptr, 4096, kPages, order), pages(nullptr, 4096, kPages, order);
    std::mt19937 rng(order == PageFreeOrder::lifo ? 5u : 6u);
    std::vector<std::vector<PageId>> held;
    int refused = 0;
    for (int step = 0; step < 3000; ++step) {
      if (rng() % 2 == 0 || held.empty()) {
        std::vector<PageId> a(1 + rng() % 7, kNoPage), b;
        const std::int64_t before = rows.num_free();
        if (!rows.allocate_pages(a)) {
          ASSERT_LT(before, static_cast<std::int64_t>(a.size()));
          ASSERT_EQ(rows.num_free(), before) << "a refused row takes nothing";
          ++refused;
          continue;
        }
        for (std::size_t i = 0; i < a.size(); ++i) b.push_back(pages.allocate_page());
        ASSERT_EQ(a, b) << "step " << step;
        held.push_back(a);
      } else {
        const std::size_t k = rng() % held.size();
        std::vector<PageId> row = held[k];
        std::shuffle(row.begin(), row.end(), rng);
        rows.release_pages(row);
        for (const PageId p : row) pages.release(p);
        held.erase(held.begin() + static_cast<std::ptrdiff_t>(k));
      }
      ASSERT_EQ(rows.num_free(), pages.num_free()) << "step " << step;
      for (PageId p = 0; p < kPages; ++p) ASSERT_EQ(rows.in_use(p), pages.in_use(p)) << "step " << step;
    }
    EXPECT_GT(refused, 10) << "the walk never ran the pool dry";
  }
}

TEST(PhysicalPagePool, ReleasingAFreePageInARowIsAnError) {
  PhysicalPagePool pool(nullptr, 4096, 4);
  std::vector<PageId> row(2);
  ASSERT_TRUE(pool.allocate_pages(row));
  pool.release_pages(row);
  EXPECT_THROW(pool.release_pages(row), InvalidArgument);
}

}  // namespace
}  // namespace kvlab
