// data_differences (session/rank_data.h): every rank's data line against rank 0's.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "session/rank_data.h"

namespace {

using dtrain::detail::data_differences;

TEST(RankData, TheSameLineOnEveryRankSaysNothing) {
  EXPECT_TRUE(data_differences({}).empty());
  EXPECT_TRUE(data_differences({"a"}).empty());
  EXPECT_TRUE(data_differences({"a", "a", "a", "a"}).empty());
}

TEST(RankData, EachOtherLineNamesItsRanksAndBothLines) {
  const std::string gpu =
      "image folder /d/train: 4000 images; decoded on the GPU (data.decode auto: ...)";
  const std::string cpu =
      "image folder /d/train: 4000 images; decoded on the CPU (data.decode auto: ...)";
  const std::vector<std::string> w = data_differences({gpu, gpu, cpu, "x", cpu, cpu});
  ASSERT_EQ(w.size(), size_t{2});
  EXPECT_EQ(w[0], "the data of ranks 2, 4 and 5 differs from rank 0's: ranks 2, 4 and 5: " + cpu +
                      "; rank 0: " + gpu);
  EXPECT_EQ(w[1], "the data of rank 3 differs from rank 0's: rank 3: x; rank 0: " + gpu);
  const std::vector<std::string> two = data_differences({gpu, cpu, cpu});
  ASSERT_EQ(two.size(), size_t{1});
  EXPECT_EQ(two[0].rfind("the data of ranks 1 and 2 differs from rank 0's: ranks 1 and 2: ", 0),
            size_t{0})
      << two[0];
}

}  // namespace
