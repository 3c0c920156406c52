#include "dist/shard_plan.h"

#include <algorithm>
#include <string>

#include "dtrain/error.h"

namespace dtrain::detail {

int64_t ShardPlan::elements(int rank) const {
  int64_t n = 0;
  for (const ShardPiece& p : pieces[static_cast<size_t>(rank)]) n += p.length;
  return n;
}

int64_t ShardPlan::largest() const { return std::min(shard, total); }

ShardPlan plan_shards(const std::vector<int64_t>& numels, int world) {
  if (world < 1) throw Error("plan_shards: world must be at least 1, got " + std::to_string(world));
  ShardPlan plan;
  for (int64_t n : numels) {
    if (n < 0) throw Error("plan_shards: a parameter has a negative size");
    plan.total += n;
  }
  plan.shard = (plan.total + world - 1) / world;
  plan.pieces.resize(static_cast<size_t>(world));
  // Walk the flat sequence once: parameter i spans [start, start + numels[i]); each rank's range
  // [r * shard, (r + 1) * shard) takes the overlapping part of every parameter it crosses.
  int64_t start = 0;
  for (size_t i = 0; i < numels.size(); ++i) {
    const int64_t end = start + numels[i];
    for (int64_t at = start; at < end;) {
      const int64_t rank = at / plan.shard;
      const int64_t stop = std::min(end, (rank + 1) * plan.shard);
      plan.pieces[static_cast<size_t>(rank)].push_back({i, at - start, stop - at});
      at = stop;
    }
    start = end;
  }
  return plan;
}

}  // namespace dtrain::detail
