// plan_buckets: a pure function, checked against hand-computed plans.
#include <gtest/gtest.h>

#include "dist/bucket_plan.h"
#include "dtrain/error.h"

namespace dtrain {
namespace {

using Plan = std::vector<std::vector<size_t>>;

TEST(BucketPlan, FirstBucketSmallThenCap) {
  // 6 parameters of 400 bytes, ready in reverse order; first cap 500, cap 1000.
  std::vector<int64_t> bytes(6, 400);
  std::vector<at::ScalarType> types(6, at::kFloat);
  Plan p = detail::plan_buckets(bytes, types, {5, 4, 3, 2, 1, 0}, 500, 1000);
  // first: 400 < 500, +400 = 800 >= 500 -> close; then 400, 800, 1200 >= 1000 -> close; rest.
  EXPECT_EQ(p, (Plan{{5, 4}, {3, 2, 1}, {0}}));
}

TEST(BucketPlan, OneLargeParameterGetsItsOwnBucket) {
  Plan p = detail::plan_buckets({10, 5000, 10, 10}, std::vector<at::ScalarType>(4, at::kFloat),
                                {0, 1, 2, 3}, 100, 100);
  EXPECT_EQ(p, (Plan{{0, 1}, {2, 3}}));
}

TEST(BucketPlan, DtypeChangeClosesBucket) {
  Plan p = detail::plan_buckets({4, 4, 4, 4}, {at::kFloat, at::kFloat, at::kHalf, at::kFloat},
                                {0, 1, 2, 3}, 1 << 20, 1 << 20);
  EXPECT_EQ(p, (Plan{{0, 1}, {2}, {3}}));
}

TEST(BucketPlan, EveryParameterExactlyOnceInOrder) {
  std::vector<int64_t> bytes;
  std::vector<size_t> order;
  for (size_t i = 0; i < 50; ++i)
    bytes.push_back(static_cast<int64_t>(37 * (i % 7) + 1)), order.push_back((i * 17) % 50);
  Plan p = detail::plan_buckets(bytes, std::vector<at::ScalarType>(50, at::kFloat), order, 64, 256);
  std::vector<size_t> flat;
  for (auto& b : p) {
    int64_t total = 0;
    for (size_t i : b) flat.push_back(i), total += bytes[i];
    EXPECT_FALSE(b.empty());
  }
  EXPECT_EQ(flat, order);  // buckets follow the ready order, nothing lost or repeated
  // Every bucket but the last reached its cap; none exceeds it by more than its last tensor.
  for (size_t k = 0; k + 1 < p.size(); ++k) {
    int64_t total = 0;
    for (size_t i : p[k]) total += bytes[i];
    const int64_t cap = k == 0 ? 64 : 256;
    EXPECT_GE(total, cap);
    EXPECT_LT(total - bytes[p[k].back()], cap);
  }
}

TEST(BucketPlan, SamePlanForSameInputs) {
  std::vector<int64_t> bytes = {100, 200, 300, 400, 500};
  std::vector<at::ScalarType> types(5, at::kFloat);
  EXPECT_EQ(detail::plan_buckets(bytes, types, {4, 3, 2, 1, 0}, 150, 600),
            detail::plan_buckets(bytes, types, {4, 3, 2, 1, 0}, 150, 600));
}

TEST(BucketPlan, RejectsBadOrder) {
  std::vector<at::ScalarType> types(3, at::kFloat);
  EXPECT_THROW(detail::plan_buckets({1, 1, 1}, types, {0, 1}, 1, 1), Error);
  EXPECT_THROW(detail::plan_buckets({1, 1, 1}, types, {0, 1, 1}, 1, 1), Error);
  EXPECT_THROW(detail::plan_buckets({1, 1, 1}, types, {0, 1, 3}, 1, 1), Error);
  EXPECT_THROW(detail::plan_buckets({1, 1, 1}, types, {0, 1, 2}, 0, 1), Error);
}

}  // namespace
}  // namespace dtrain
