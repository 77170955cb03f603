#include "alloc/backend/sequence_table.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace kvlab {
namespace {

TEST(SequenceTable, EntriesStayPutAndLookupsFollowInsertAndErase) {
  SequenceTable<SequenceState> table;
  std::vector<const SequenceState*> where;
  for (SeqId id = 0; id < 1000; ++id) where.push_back(&table.insert(id * 3, SequenceState{id, id + 1, 0}));
  for (SeqId id = 0; id < 1000; ++id) {  // no entry moved while the table and its index grew
    ASSERT_EQ(table.find(id * 3), where[static_cast<std::size_t>(id)]);
    ASSERT_EQ(table.at(id * 3).length, id);
  }
  EXPECT_EQ(table.find(1), nullptr);
  ASSERT_TRUE(table.contains(30));  // remembered as the last found; erase must forget it
  table.erase(30);
  EXPECT_FALSE(table.contains(30));
  EXPECT_THROW((void)table.at(30), InvalidArgument);
  EXPECT_EQ(table.size(), 999U);
  table.insert(30, SequenceState{7, 8, 0});
  EXPECT_EQ(table.at(30).length, 7);
}

TEST(SequenceTable, RejectsADuplicateAndTheReservedId) {
  SequenceTable<SequenceState> table;
  table.insert(5, SequenceState{});
  EXPECT_THROW(table.insert(5, SequenceState{}), InvalidArgument);
  EXPECT_THROW(table.insert(IdIndex<SequenceState>::kEmpty, SequenceState{}), InvalidArgument);
  EXPECT_EQ(table.size(), 1U);
  EXPECT_FALSE(table.contains(IdIndex<SequenceState>::kEmpty));
}

}  // namespace
}  // namespace kvlab
