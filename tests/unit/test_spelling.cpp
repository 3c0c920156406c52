// Did-you-mean (src/util/spelling.h): edit distances by the textbook definition, and the closest
// candidate only when it is near enough to be a slip.
#include <gtest/gtest.h>

#include "util/spelling.h"

namespace {

using dtrain::detail::closest;
using dtrain::detail::edit_distance;

TEST(Spelling, EditDistanceCountsInsertionsDeletionsAndSubstitutions) {
  EXPECT_EQ(edit_distance("", ""), 0u);
  EXPECT_EQ(edit_distance("eval", "eval"), 0u);
  EXPECT_EQ(edit_distance("evaal", "eval"), 1u);  // one insertion
  EXPECT_EQ(edit_distance("resnet5", "resnet50"), 1u);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(edit_distance("", "bench"), 5u);
}

TEST(Spelling, ClosestIsTheNearestSlipOrNothing) {
  const std::vector<std::string> subcommands = {"env", "bench", "eval", "predict"};
  EXPECT_EQ(closest("evaal", subcommands, 3), "eval");
  EXPECT_EQ(closest("prdict", subcommands, 3), "predict");
  EXPECT_EQ(closest("benhc", subcommands, 3), "bench");
  EXPECT_EQ(closest("train", subcommands, 3), "");  // 4 or more edits from every one
  EXPECT_EQ(closest("anything", {}, 3), "");
}

}  // namespace
