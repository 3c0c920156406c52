// plan_shards: a pure function, checked against hand-computed plans.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <map>
#include <memory>

#include "dist/optimizer_shard.h"
#include "dist/shard_plan.h"
#include "dtrain/error.h"
#include "dtrain/optim.h"

namespace dtrain {
namespace {

using Shards = std::vector<std::vector<size_t>>;

TEST(ShardPlan, LargestFirstEachToTheLeastLoadedRank) {
  // Sizes 10, 40, 30, 20, 5 on 2 ranks: 40 -> 0, 30 -> 1, 20 -> 1 (30 < 40), 10 -> 0 (40 < 50),
  // 5 -> 0 (50 = 50: the lower rank).
  const ShardPlan p = plan_shards({10, 40, 30, 20, 5}, 2);
  EXPECT_EQ(p.owner, (std::vector<int>{0, 0, 1, 1, 0}));
  EXPECT_EQ(p.shards, (Shards{{0, 1, 4}, {2, 3}}));
  EXPECT_EQ(p.elements, (std::vector<int64_t>{55, 50}));
  EXPECT_EQ(p.largest(), 55);
}

TEST(ShardPlan, EqualSizesGoInIndexOrderRoundRobin) {
  const ShardPlan p = plan_shards({8, 8, 8, 8, 8, 8}, 4);
  EXPECT_EQ(p.owner, (std::vector<int>{0, 1, 2, 3, 0, 1}));
  EXPECT_EQ(p.shards, (Shards{{0, 4}, {1, 5}, {2}, {3}}));
}

TEST(ShardPlan, AnMlpsWeightsAndBiasesBalance) {
  // mlp 12 -> 16 -> 8 -> 5: weights 192, 128, 40 and biases 16, 8, 5.
  const std::vector<int64_t> sizes = {192, 16, 128, 8, 40, 5};
  const ShardPlan two = plan_shards(sizes, 2);
  EXPECT_EQ(two.shards, (Shards{{0, 5}, {1, 2, 3, 4}}));
  EXPECT_EQ(two.elements, (std::vector<int64_t>{197, 192}));
  const ShardPlan four = plan_shards(sizes, 4);
  // 192 -> 0, 128 -> 1, 40 -> 2, 16 -> 3, 8 -> 3 (0 < 40), 5 -> 3 (24 < 40).
  EXPECT_EQ(four.shards, (Shards{{0}, {2}, {4}, {1, 3, 5}}));
}

TEST(ShardPlan, EveryParameterOnceAndTheSamePlanEachTime) {
  std::vector<int64_t> sizes;
  for (int i = 0; i < 37; ++i) sizes.push_back((i * 7919) % 101 + 1);
  const ShardPlan a = plan_shards(sizes, 5), b = plan_shards(sizes, 5);
  EXPECT_EQ(a.owner, b.owner);
  std::vector<int> seen(sizes.size(), 0);
  int64_t total = 0;
  for (size_t r = 0; r < a.shards.size(); ++r) {
    int64_t n = 0;
    for (size_t i : a.shards[r]) {
      ++seen[i];
      n += sizes[i];
      EXPECT_EQ(a.owner[i], static_cast<int>(r));
    }
    EXPECT_EQ(n, a.elements[r]);
    total += n;
  }
  for (int s : seen) EXPECT_EQ(s, 1);
  int64_t sum = 0;
  for (int64_t s : sizes) sum += s;
  EXPECT_EQ(total, sum);
  // Greedy by size: no rank holds more than the mean plus the largest parameter.
  EXPECT_LE(a.largest(), sum / 5 + 101);
}

TEST(ShardPlan, FewerParametersThanRanksLeavesRanksEmptyAndBadInputThrows) {
  const ShardPlan p = plan_shards({3, 4}, 3);
  EXPECT_EQ(p.shards, (Shards{{1}, {0}, {}}));
  EXPECT_THROW(plan_shards({1}, 0), Error);
  EXPECT_THROW(plan_shards({1, -1}, 2), Error);
}

// Optimizers over the shards of a plan, numbering their state as the model does, step like one
// optimizer over every parameter; their states together are its state, and each shard loads
// its entries of that whole state (detail::state_of_shard) and continues identically.
TEST(ShardState, ShardsTogetherAreTheWholeOptimizer) {
  for (const char* kind : {"adamw", "sgd"}) {
    OptimizerOptions o;
    o.kind = std::string(kind) == "sgd" ? OptimizerKind::kSgd : OptimizerKind::kAdamW;
    o.momentum = o.kind == OptimizerKind::kSgd ? 0.9 : 0;
    o.dampening = o.kind == OptimizerKind::kSgd ? 0.1 : 0;  // SGD with step counts
    o.weight_decay = 0.1;
    o.no_decay_norm_bias = true;
    at::manual_seed(1);
    const std::vector<at::Tensor> init = {at::randn({4, 3}), at::randn({4}), at::randn({2, 4}),
                                          at::randn({2})};
    auto copy = [&] {
      std::vector<at::Tensor> out;
      for (const auto& t : init) out.push_back(t.clone().set_requires_grad(true));
      return out;
    };
    std::vector<at::Tensor> whole_params = copy(), shard_params = copy();
    Optimizer whole(whole_params, o);
    std::vector<int64_t> sizes;
    for (const auto& t : init) sizes.push_back(t.numel());
    const ShardPlan plan = plan_shards(sizes, 2);
    std::vector<std::unique_ptr<Optimizer>> shards;
    for (const auto& mine : plan.shards) {
      std::vector<at::Tensor> ps;
      for (size_t i : mine) ps.push_back(shard_params[i]);
      shards.push_back(std::make_unique<Optimizer>(ps, o, mine));
    }
    for (int step = 0; step < 3; ++step) {
      for (size_t i = 0; i < init.size(); ++i) {
        const at::Tensor g = at::randn(init[i].sizes());
        whole_params[i].mutable_grad() = g;
        shard_params[i].mutable_grad() = g.clone();
      }
      whole.step(0.05);
      for (auto& s : shards) s->step(0.05);
    }
    for (size_t i = 0; i < init.size(); ++i)
      EXPECT_TRUE(at::equal(whole_params[i], shard_params[i])) << kind << " parameter " << i;
    std::map<std::string, at::Tensor> together;
    for (const auto& s : shards)
      for (const auto& [name, t] : s->state()) EXPECT_TRUE(together.emplace(name, t).second) << name;
    const auto state = whole.state();
    ASSERT_EQ(together.size(), state.size()) << kind;
    for (const auto& [name, t] : state) {
      ASSERT_TRUE(together.count(name)) << kind << " " << name;
      EXPECT_TRUE(at::equal(together.at(name), t)) << kind << " " << name;
    }
    // Each shard of a fresh plan loads its entries of the whole state, and nothing else.
    std::vector<at::Tensor> resumed = copy();
    for (int r = 0; r < 2; ++r) {
      std::vector<at::Tensor> ps;
      for (size_t i : plan.shards[static_cast<size_t>(r)]) ps.push_back(resumed[i]);
      Optimizer fresh(ps, o, plan.shards[static_cast<size_t>(r)]);
      const auto mine = detail::state_of_shard(state, plan, r);
      EXPECT_EQ(mine.size(), shards[static_cast<size_t>(r)]->state().size());
      fresh.load_state(mine);
      for (const auto& [name, t] : fresh.state()) EXPECT_TRUE(at::equal(t, together.at(name))) << name;
    }
  }
}

TEST(ShardState, EntriesOfNoPlannedParameterAreKeptForLoadStateToRefuse) {
  const ShardPlan plan = plan_shards({4, 4}, 2);
  const detail::OptimizerState whole = {{"exp_avg.0", at::zeros({4})}, {"exp_avg.1", at::zeros({4})},
                                        {"exp_avg.9", at::zeros({4})}, {"other", at::zeros({1})}};
  std::vector<std::string> names;
  for (const auto& kv : detail::state_of_shard(whole, plan, 1)) names.push_back(kv.first);
  EXPECT_EQ(names, (std::vector<std::string>{"exp_avg.1", "exp_avg.9", "other"}));
  OptimizerOptions o;
  o.kind = OptimizerKind::kAdam;
  EXPECT_THROW(Optimizer({at::zeros({4}, at::requires_grad())}, o, {0, 0}), Error);
}

}  // namespace
}  // namespace dtrain
