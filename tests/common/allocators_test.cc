#include "common/allocators.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <vector>

namespace fullband {
namespace {

bool AlignedToHugePage(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % kHugePageBytes == 0;
}

TEST(HugePageAllocator, LargeBlocksAreWholeAlignedHugePages) {
  std::vector<uint64_t, HugePageAllocator<uint64_t>> table(3 << 17, 7);  // 3 MB
  EXPECT_TRUE(AlignedToHugePage(table.data()));
  EXPECT_EQ(table.front(), 7u);
  EXPECT_EQ(table.back(), 7u);
  std::iota(table.begin(), table.end(), 0);
  EXPECT_EQ(std::accumulate(table.begin(), table.end(), uint64_t{0}),
            uint64_t{table.size()} * (table.size() - 1) / 2);
}

TEST(HugePageAllocator, SmallBlocksComeFromOperatorNew) {
  EXPECT_FALSE(HugePageAllocator<char>::Huge(kHugePageBytes / 2 - 1));
  EXPECT_TRUE(HugePageAllocator<char>::Huge(kHugePageBytes / 2));
  EXPECT_TRUE(HugePageAllocator<uint32_t>::Huge(kHugePageBytes / 8));
  std::vector<int, HugePageAllocator<int>> v;
  for (int i = 0; i < 1000; ++i) v.push_back(i);     // small reallocations, freed as they grow
  for (int i = 0; i < 1 << 20; ++i) v.push_back(i);  // on into huge blocks, and copied there
  EXPECT_EQ(v[999], 999);
  EXPECT_EQ(v[1000], 0);
  EXPECT_EQ(v.back(), (1 << 20) - 1);
  EXPECT_TRUE(AlignedToHugePage(v.data()));
}

TEST(DefaultInit, ResizeKeepsValuesAndCopiesConstruct) {
  std::vector<uint32_t, UninitializedHugePageAllocator<uint32_t>> v(4, 9);
  v.resize(1 << 20);  // the new elements are unwritten: only the old ones are checked
  EXPECT_EQ(v[3], 9u);
  v.assign(5, 2);
  EXPECT_EQ(v, (std::vector<uint32_t, UninitializedHugePageAllocator<uint32_t>>(5, 2)));
  std::vector<char, UninitializedAllocator<char>> s;
  s.resize(3);
  s[0] = 'a';
  s.push_back('b');
  EXPECT_EQ(s.size(), 4u);
  EXPECT_EQ(s[3], 'b');
}

}  // namespace
}  // namespace fullband
