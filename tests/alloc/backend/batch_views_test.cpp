// BatchViews' common-base form (alloc/core/kv_view.hpp): found where K and V sit at one offset from a
// K base and a V base, with the largest granule that divides every offset and the token stride;
// absent where they do not.
#include <gtest/gtest.h>

#include <vector>

#include "alloc/backend/batch_views.hpp"
#include "tests/support/tiny_model.hpp"

namespace kvlab {
namespace {

TEST(BatchViews, FindsOneKBaseAndOneVBaseWithTheLargestGranule) {
  const ModelGeometry m = testing::tiny_model();  // row = 2 heads x 32 = 64 elements, fp16
  BatchViews views(m);
  std::vector<std::uint16_t> k(4096), v(4096);
  views.begin_contiguous(3);
  const std::size_t at[3] = {320, 64, 1600};  // element offsets: gcd with the row (64) is 64, with each other 32
  for (int layer = 0; layer < 2; ++layer)
    for (int s = 0; s < 3; ++s) {
      const std::size_t off = at[s] + 32 * static_cast<std::size_t>(layer == 1 && s == 2) + 128 * layer;
      views.set_bases(s, layer, k.data() + off, v.data() + off);
    }
  for (int s = 0; s < 3; ++s) views.set_length(s, 3);
  const PreparedBatch pb = views.finish(Device::host, nullptr);
  EXPECT_EQ(pb.host_seq_lens, pb.seq_lens);
  for (int layer = 0; layer < 2; ++layer) {
    const KvView view = views.view(layer);
    ASSERT_NE(view.seq_base_index, nullptr);
    EXPECT_EQ(view.base_granule, 32);  // layer 1 sequence 2 sits 32 elements off the row grid
    EXPECT_EQ(view.k_base, static_cast<void*>(k.data() + 64 + 128 * layer));
    EXPECT_EQ(view.v_base, static_cast<void*>(v.data() + 64 + 128 * layer));
    for (int s = 0; s < 3; ++s) {
      EXPECT_EQ(view.k_seq[s], static_cast<std::uint16_t*>(view.k_base) + view.seq_base_index[s] * 32);
      EXPECT_EQ(view.v_seq[s], static_cast<std::uint16_t*>(view.v_base) + view.seq_base_index[s] * 32);
    }
  }
}

TEST(BatchViews, HasNoCommonBaseWhereVIsNotWhereKIs) {
  const ModelGeometry m = testing::tiny_model();
  BatchViews views(m);
  std::vector<std::uint16_t> region(1 << 14);
  views.begin_contiguous(2);
  // [layer][K|V][capacity] per sequence, capacities 10 and 20 tokens: V lies 10 rows after K in
  // one sequence and 20 in the other (the contiguous backend's layout before issue 27).
  const std::size_t row = 64, start[2] = {0, 4 * 10 * row}, cap[2] = {10, 20};
  for (int layer = 0; layer < 2; ++layer)
    for (int s = 0; s < 2; ++s) {
      auto* k = region.data() + start[s] + 2 * layer * cap[s] * row;
      views.set_bases(s, layer, k, k + cap[s] * row);
    }
  views.finish(Device::host, nullptr);
  EXPECT_EQ(views.view(0).seq_base_index, nullptr);
  EXPECT_EQ(views.view(0).k_base, nullptr);
  EXPECT_EQ(views.view(0).base_granule, 0);
}

TEST(BatchViews, PagedViewsCarryNoCommonBase) {
  const ModelGeometry m = testing::tiny_model();
  BatchViews views(m);
  std::vector<std::uint16_t> pool(1 << 12);
  PagedPools pools{reinterpret_cast<std::byte*>(pool.data()), 4096, 16, 16 * 64};
  auto table = views.begin_paged(1, 2, pools);
  table[0] = 0;
  views.set_length(0, 5);
  views.finish(Device::host, nullptr);
  EXPECT_EQ(views.view(1).seq_base_index, nullptr);
}

}  // namespace
}  // namespace kvlab
