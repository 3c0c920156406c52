// The shard plan of a sharded optimizer (dist.shard_optimizer, ZeRO-1, Note [sharded optimizer]):
// which rank holds the optimizer state of which values, as a pure function of the parameters'
// sizes and the world size (like the bucket plan, made alike on every rank and never exchanged).
// The values of the parameters, one parameter after another in the model's order and each in its
// memory order, are one flat sequence of `total` values, cut into `world` contiguous shards of
// `shard` = ceil(total / world) values (the last shards end at `total`: shorter, or empty). So
// every rank holds 1/N of the state whatever the tensors' sizes, as DeepSpeed's ZeRO, FSDP's
// flat parameters and llm.c's -z 1 partition it; a shard holds pieces of the tensors it crosses.
// Invariants (tests/unit/test_shard_plan.cpp): the ranks' pieces cover every value once, in
// order; a piece lies within one parameter and is not empty; the same inputs give the same plan.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dtrain::detail {

// Values [offset, offset + length) of parameter `param`, in its memory order.
struct ShardPiece {
  size_t param = 0;
  int64_t offset = 0;
  int64_t length = 0;
  bool operator==(const ShardPiece& o) const {
    return param == o.param && offset == o.offset && length == o.length;
  }
};

struct ShardPlan {
  int64_t total = 0;                            // every parameter's values
  int64_t shard = 0;                            // values of a full shard: ceil(total / world)
  std::vector<std::vector<ShardPiece>> pieces;  // per rank, in flat order
  int64_t elements(int rank) const;             // the values `rank` holds
  int64_t largest() const;                      // the most values any rank holds
};

// `numels[i]`: the values of parameter i. Throws dtrain::Error when world < 1 or a size is
// negative. A rank holds nothing when total <= rank * shard: with fewer values than ranks, and
// also with more where the shards' rounding up uses them all first (5 values on 4 ranks: 2, 2,
// 1, 0); OptimizerShard refuses such a plan.
ShardPlan plan_shards(const std::vector<int64_t>& numels, int world);

}  // namespace dtrain::detail
