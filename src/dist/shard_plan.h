// The shard plan of a sharded optimizer (dist.shard_optimizer, ZeRO-1): which rank holds the
// optimizer state of which parameter, as a pure function of the parameters' sizes and the world
// size (like the bucket plan, it is made alike on every rank and never exchanged).
// Invariants (tests/unit/test_shard_plan.cpp): every parameter has one owner; whole tensors, never
// pieces; the same inputs give the same plan; the rule is greedy by size, as PyTorch's
// ZeroRedundancyOptimizer's: parameters from the largest to the smallest (equal sizes in index
// order), each to the rank holding the fewest elements so far (the lowest such rank).
#pragma once

#include <cstdint>
#include <vector>

namespace dtrain {

struct ShardPlan {
  std::vector<int> owner;                   // per parameter: the rank that holds its state
  std::vector<std::vector<size_t>> shards;  // per rank: its parameters, in increasing index
  std::vector<int64_t> elements;            // per rank: its parameters' elements in all
  int64_t largest() const;                  // the most elements any rank holds
};

// `numels[i]`: the elements of parameter i. A rank may get no parameter when there are fewer
// parameters than ranks (the caller decides whether that is allowed). Throws dtrain::Error when
// world < 1 or a size is negative.
ShardPlan plan_shards(const std::vector<int64_t>& numels, int world);

}  // namespace dtrain
