// plan_shards: a pure function, checked against hand-computed plans; and optimizers over the
// flat pieces of a plan (OptimizerShard, one per simulated rank over the same parameters) step
// like one optimizer over every parameter and load their entries of its state.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "dist/optimizer_shard.h"
#include "dist/shard_plan.h"
#include "dtrain/comm.h"
#include "dtrain/error.h"
#include "dtrain/optim.h"
#include "test_support.h"

namespace dtrain {
namespace {

using Pieces = std::vector<std::vector<detail::ShardPiece>>;

TEST(ShardPlan, FlatValuesCutIntoEqualContiguousShards) {
  // 105 values on 2 ranks: shards of 53; parameter 2 (30 values) is cut after its third.
  const detail::ShardPlan p = detail::plan_shards({10, 40, 30, 20, 5}, 2);
  EXPECT_EQ(p.total, 105);
  EXPECT_EQ(p.shard, 53);
  EXPECT_EQ(p.pieces,
            (Pieces{{{0, 0, 10}, {1, 0, 40}, {2, 0, 3}}, {{2, 3, 27}, {3, 0, 20}, {4, 0, 5}}}));
  EXPECT_EQ(p.elements(0), 53);
  EXPECT_EQ(p.elements(1), 52);
  EXPECT_EQ(p.largest(), 53);
}

TEST(ShardPlan, OneLargeTensorIsSharedByEveryRank) {
  // A token embedding of 1000 values and two small tensors on 4 ranks: 253 values each (the last
  // 251), the embedding in four pieces, where whole tensors left it on one rank.
  const detail::ShardPlan p = detail::plan_shards({1000, 10, 2}, 4);
  EXPECT_EQ(p.shard, 253);
  EXPECT_EQ(p.pieces, (Pieces{{{0, 0, 253}},
                              {{0, 253, 253}},
                              {{0, 506, 253}},
                              {{0, 759, 241}, {1, 0, 10}, {2, 0, 2}}}));
  for (int r = 0; r < 4; ++r) EXPECT_LE(p.elements(r), 253);
}

TEST(ShardPlan, EveryValueOnceInOrderAndTheSamePlanEachTime) {
  std::vector<int64_t> sizes;
  for (int i = 0; i < 37; ++i) sizes.push_back((i * 7919) % 101 + 1);
  const detail::ShardPlan a = detail::plan_shards(sizes, 5), b = detail::plan_shards(sizes, 5);
  EXPECT_EQ(a.pieces, b.pieces);
  // The pieces, rank after rank, walk the parameters' values without a gap or an overlap.
  size_t param = 0;
  int64_t offset = 0, total = 0;
  for (int r = 0; r < 5; ++r) {
    for (const detail::ShardPiece& p : a.pieces[static_cast<size_t>(r)]) {
      EXPECT_GT(p.length, 0);
      if (offset == sizes[param]) ++param, offset = 0;
      EXPECT_EQ(p.param, param);
      EXPECT_EQ(p.offset, offset);
      EXPECT_LE(p.offset + p.length, sizes[p.param]);
      offset += p.length;
      total += p.length;
    }
    EXPECT_LE(a.elements(r), a.shard);
  }
  EXPECT_EQ(param, sizes.size() - 1);
  EXPECT_EQ(offset, sizes.back());
  EXPECT_EQ(total, a.total);
}

TEST(ShardPlan, FewerValuesThanRanksLeavesRanksEmptyAndBadInputThrows) {
  const detail::ShardPlan p = detail::plan_shards({1, 2}, 4);
  EXPECT_EQ(p.pieces, (Pieces{{{0, 0, 1}}, {{1, 0, 1}}, {{1, 1, 1}}, {}}));
  EXPECT_THROW(detail::plan_shards({1}, 0), Error);
  EXPECT_THROW(detail::plan_shards({1, -1}, 2), Error);
}

// Rank `rank` of `world` for building an OptimizerShard in one process: no collective runs.
class SimulatedRank : public Communicator {
 public:
  SimulatedRank(int rank, int world) : rank_(rank), world_(world) {}
  std::string backend() const override { return "simulated"; }
  int rank() const override { return rank_; }
  int world() const override { return world_; }
  void all_reduce(at::Tensor&, ReduceOp) override { fail(); }
  std::unique_ptr<Work> all_reduce_async(at::Tensor&, ReduceOp) override { fail(); }
  void broadcast(at::Tensor&, int) override { fail(); }
  at::Tensor all_gather(const at::Tensor&) override { fail(); }
  void barrier() override { fail(); }

 private:
  [[noreturn]] static void fail() { throw std::logic_error("a simulated rank runs no collective"); }
  int rank_, world_;
};

// A plan that leaves a rank no values is refused, naming the key, the rank and the ranks that
// fit: fewer values than ranks, and also 5 values on 4 ranks (shards of 2: 2, 2, 1, 0).
TEST(ShardPlan, AShardOptimizerThatWouldLeaveARankEmptyIsAnError) {
  EXPECT_EQ(detail::plan_shards({5}, 4).elements(3), 0);
  for (const auto& [numels, world, fits] :
       std::vector<std::tuple<std::vector<int64_t>, int, int>>{{{5}, 4, 3}, {{2, 1}, 4, 3}}) {
    std::vector<at::Tensor> params;
    std::vector<std::string> names;
    for (int64_t n : numels) params.push_back(at::zeros({n})), names.push_back("p");
    SimulatedRank me(0, world);
    dtrain::test::expect_all(
        dtrain::test::message_of([&] { detail::OptimizerShard(params, names, me); }),
        {"dist.shard_optimizer", "leave rank " + std::to_string(world - 1) + " none",
         "use at most " + std::to_string(fits) + " ranks"});
  }
  SimulatedRank me(0, 3);
  EXPECT_NO_THROW(detail::OptimizerShard({at::zeros({5})}, {"p"}, me));  // 2, 2, 1
}

// Three simulated ranks' shard optimizers over the same parameters (each updates its pieces in
// place, so together they update every value without a gather) against one optimizer over all of
// them: the same parameters and, entry by entry, the same state; and a fresh shard loads its
// entries of the whole state (detail::state_of_shard) and continues identically. The parameters
// include a channels-last one (its pieces follow its memory order) and tensors cut across ranks.
TEST(ShardState, ShardsTogetherAreTheWholeOptimizer) {
  for (const char* kind : {"adamw", "sgd"}) {
    OptimizerOptions o;
    o.kind = std::string(kind) == "sgd" ? OptimizerKind::kSgd : OptimizerKind::kAdamW;
    o.momentum = o.kind == OptimizerKind::kSgd ? 0.9 : 0;
    o.dampening = o.kind == OptimizerKind::kSgd ? 0.1 : 0;  // SGD with step counts
    o.weight_decay = 0.1;
    o.no_decay_norm_bias = true;
    at::manual_seed(1);
    const std::vector<at::Tensor> init = {
        at::randn({4, 3}), at::randn({4}),
        at::randn({2, 3, 2, 2}).contiguous(at::MemoryFormat::ChannelsLast), at::randn({2})};
    const std::vector<std::string> names = {"w0", "b0", "conv", "b1"};
    auto copy = [&] {
      std::vector<at::Tensor> out;
      for (const auto& t : init) out.push_back(t.clone().set_requires_grad(true));
      return out;
    };
    std::vector<at::Tensor> whole_params = copy(), shard_params = copy();
    Optimizer whole(whole_params, o);
    // 42 values in shards of 14: w0 and half of b0 | the rest of b0 and half of conv | the rest
    // of conv and b1.
    constexpr int kWorld = 3;
    std::vector<std::unique_ptr<SimulatedRank>> ranks;
    std::vector<std::unique_ptr<detail::OptimizerShard>> shards;
    std::vector<std::unique_ptr<Optimizer>> optimizers;
    for (int r = 0; r < kWorld; ++r) {
      ranks.push_back(std::make_unique<SimulatedRank>(r, kWorld));
      shards.push_back(
          std::make_unique<detail::OptimizerShard>(shard_params, names, *ranks.back()));
      optimizers.push_back(shards.back()->make_optimizer(o));
    }
    EXPECT_EQ(shards[0]->plan().pieces[1],
              (std::vector<detail::ShardPiece>{{1, 2, 2}, {2, 0, 12}}));
    for (int step = 0; step < 3; ++step) {
      for (size_t i = 0; i < init.size(); ++i) {
        const at::Tensor g = at::randn(init[i].sizes()).contiguous(init[i].suggest_memory_format());
        whole_params[i].mutable_grad() = g;
        shard_params[i].mutable_grad() = g.clone();
      }
      whole.step(0.05);
      for (int r = 0; r < kWorld; ++r) {
        shards[static_cast<size_t>(r)]->attach_gradients();
        optimizers[static_cast<size_t>(r)]->step(0.05);
      }
    }
    for (size_t i = 0; i < init.size(); ++i)
      EXPECT_TRUE(at::equal(whole_params[i], shard_params[i])) << kind << " parameter " << i;
    const auto state = whole.state();
    // Each fresh shard loads its entries of the whole state: the stepped shard's state.
    std::vector<at::Tensor> resumed = copy();
    for (int r = 0; r < kWorld; ++r) {
      SimulatedRank rank(r, kWorld);
      detail::OptimizerShard fresh_shard(resumed, names, rank);
      const auto fresh = fresh_shard.make_optimizer(o);
      const auto mine = detail::state_of_shard(state, resumed, fresh_shard.plan(), r);
      const auto stepped = optimizers[static_cast<size_t>(r)]->state();
      EXPECT_EQ(mine.size(), stepped.size()) << kind << " rank " << r;
      fresh->load_state(mine);
      std::map<std::string, at::Tensor> by_name(stepped.begin(), stepped.end());
      for (const auto& [name, t] : fresh->state()) {
        ASSERT_TRUE(by_name.count(name)) << name;
        EXPECT_TRUE(at::equal(t, by_name.at(name))) << kind << " rank " << r << " " << name;
      }
    }
  }
}

TEST(ShardState, EntriesOfNoPlannedParameterAreKeptForLoadStateToRefuse) {
  const std::vector<at::Tensor> params = {at::zeros({4}), at::zeros({4})};
  const detail::ShardPlan plan = detail::plan_shards({4, 4}, 2);
  const detail::OptimizerState whole = {{"exp_avg.0", at::zeros({4})},
                                        {"exp_avg.1", at::ones({4})},
                                        {"exp_avg.9", at::zeros({4})},
                                        {"other", at::zeros({1})}};
  std::vector<std::string> names;
  for (const auto& kv : detail::state_of_shard(whole, params, plan, 1)) names.push_back(kv.first);
  EXPECT_EQ(names, (std::vector<std::string>{"exp_avg.1", "exp_avg.9", "other"}));
  // An entry shaped otherwise than its parameter is an Error naming it.
  const detail::OptimizerState wrong = {{"exp_avg.1", at::zeros({5})}};
  try {
    detail::state_of_shard(wrong, params, plan, 1);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'exp_avg.1' has shape [5], its parameter [4]"),
              std::string::npos)
        << e.what();
  }
  OptimizerOptions o;
  o.kind = OptimizerKind::kAdam;
  EXPECT_THROW(Optimizer({at::zeros({4}, at::requires_grad())}, o, {0, 0}), Error);
  EXPECT_THROW(Optimizer({at::zeros({4}, at::requires_grad())}, o, {}, {true, false}), Error);
}

}  // namespace
}  // namespace dtrain
