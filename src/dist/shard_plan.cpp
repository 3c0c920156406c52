#include "dist/shard_plan.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "dtrain/error.h"

namespace dtrain {

int64_t ShardPlan::largest() const {
  return elements.empty() ? 0 : *std::max_element(elements.begin(), elements.end());
}

ShardPlan plan_shards(const std::vector<int64_t>& numels, int world) {
  if (world < 1) throw Error("plan_shards: world must be at least 1, got " + std::to_string(world));
  for (int64_t n : numels)
    if (n < 0) throw Error("plan_shards: a parameter has a negative size");
  std::vector<size_t> order(numels.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return numels[a] > numels[b]; });
  ShardPlan plan;
  plan.owner.assign(numels.size(), 0);
  plan.shards.resize(static_cast<size_t>(world));
  plan.elements.assign(static_cast<size_t>(world), 0);
  for (size_t i : order) {
    const auto least = std::min_element(plan.elements.begin(), plan.elements.end());
    const int rank = static_cast<int>(least - plan.elements.begin());
    plan.owner[i] = rank;
    *least += numels[i];
  }
  for (size_t i = 0; i < numels.size(); ++i)
    plan.shards[static_cast<size_t>(plan.owner[i])].push_back(i);
  return plan;
}

}  // namespace dtrain
