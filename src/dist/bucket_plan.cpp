#include "dist/bucket_plan.h"

#include "dtrain/error.h"

namespace dtrain::detail {

std::vector<std::vector<size_t>> plan_buckets(const std::vector<int64_t>& bytes,
                                              const std::vector<at::ScalarType>& dtypes,
                                              const std::vector<size_t>& order, int64_t first_cap,
                                              int64_t cap) {
  if (bytes.size() != dtypes.size()) throw Error("plan_buckets: sizes and dtypes differ in length");
  std::vector<char> seen(bytes.size(), 0);
  for (size_t i : order) {
    if (i >= bytes.size() || seen[i]) throw Error("plan_buckets: order is not a permutation");
    seen[i] = 1;
  }
  if (order.size() != bytes.size()) throw Error("plan_buckets: order is not a permutation");
  if (first_cap <= 0 || cap <= 0) throw Error("plan_buckets: caps must be positive");

  std::vector<std::vector<size_t>> buckets;
  std::vector<size_t> current;
  int64_t current_bytes = 0;
  auto close = [&] {
    if (!current.empty()) buckets.push_back(std::move(current));
    current.clear();
    current_bytes = 0;
  };
  for (size_t i : order) {
    if (!current.empty() && dtypes[i] != dtypes[current.front()]) close();
    current.push_back(i);
    current_bytes += bytes[i];
    if (current_bytes >= (buckets.empty() ? first_cap : cap)) close();
  }
  close();
  return buckets;
}

}  // namespace dtrain::detail
