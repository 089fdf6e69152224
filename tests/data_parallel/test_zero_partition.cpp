// ZeRO partitions of a flat layout: they cover it exactly, inner boundaries are aligned, and sizes
// are balanced to within one alignment unit.
#include <gtest/gtest.h>

#include "data_parallel/zero_partition.hpp"

namespace trident {
namespace {

void expect_valid(int64_t total, int parts, int64_t align) {
  const auto b = partition_flat(total, parts, align);
  ASSERT_EQ(b.size(), size_t(parts) + 1);
  EXPECT_EQ(b.front(), 0);
  EXPECT_EQ(b.back(), total);
  int64_t smallest = total, largest = 0;
  for (int r = 0; r < parts; ++r) {
    EXPECT_LE(b[r], b[r + 1]) << "range " << r;
    if (r > 0 && b[r] < total) {
      EXPECT_EQ(b[r] % align, 0) << "boundary " << r;
    }
    // The last non-empty range may be cut short by total.
    if (b[r + 1] < total) smallest = std::min(smallest, b[r + 1] - b[r]);
    largest = std::max(largest, b[r + 1] - b[r]);
  }
  if (total >= int64_t(parts) * align) {
    EXPECT_LE(largest - smallest, align) << total << " / " << parts;
  }
}

TEST(ZeroPartition, CoversAlignsAndBalances) {
  for (int64_t total : {0, 1, 63, 64, 65, 1000, 124439808, 124439809})
    for (int parts : {1, 2, 3, 4, 7, 8, 64})
      for (int64_t align : {1, 64}) expect_valid(total, parts, align);
}

TEST(ZeroPartition, EvenSplitIsExact) {
  EXPECT_EQ(partition_flat(1024, 4, 64), (std::vector<int64_t>{0, 256, 512, 768, 1024}));
  // 10 units of 64 over 4 ranks: 2, 3, 2, 3 units (integer division of the unit count).
  EXPECT_EQ(partition_flat(640, 4, 64), (std::vector<int64_t>{0, 128, 320, 448, 640}));
}

TEST(ZeroPartition, MoreRanksThanUnitsLeavesEmptyRanges) {
  EXPECT_EQ(partition_flat(100, 4, 64), (std::vector<int64_t>{0, 0, 64, 64, 100}));
}

TEST(ZeroPartition, RejectsNonsense) {
  EXPECT_ANY_THROW(partition_flat(10, 0, 64));
  EXPECT_ANY_THROW(partition_flat(-1, 2, 64));
}

}  // namespace
}  // namespace trident
