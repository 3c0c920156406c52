// DataParallel (Note [data-parallel seam]) on one rank, over a communicator in process: with
// neither a reducer nor a shard the step is the rank's own (its calls do nothing, the update reads
// every parameter, nothing is agreed); with a reducer the gradients are averaged in place and the
// buckets' bytes are an all-reduce's; with a shard the update reads the pieces, agreed over the
// data plane, steps like one optimizer over every parameter, loads its entries of a whole state,
// and the parameters' broadcast is counted. The collectives over several ranks: tests/dist.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <vector>

#include "dist/data_parallel.h"
#include "dtrain/optim.h"
#include "local_comm.h"

namespace dtrain::detail {
namespace {

// Two parameters (10 and 3 values) and a loss whose gradients are known: sum(w * c).
struct TwoParameters {
  std::vector<at::Tensor> params{at::randn({2, 5}).requires_grad_(),
                                 at::randn({3}).requires_grad_()};
  std::vector<at::Tensor> coefficients{at::randn({2, 5}), at::randn({3})};
  std::vector<std::string> names{"w", "b"};
  int64_t bytes() const { return (10 + 3) * 4; }
  void backward() const {
    ((params[0] * coefficients[0]).sum() + (params[1] * coefficients[1]).sum()).backward();
  }
  std::vector<at::Tensor> clones() const {
    std::vector<at::Tensor> c;
    for (const auto& p : params) c.push_back(p.detach().clone().requires_grad_());
    return c;
  }
};

OptimizerOptions adamw() {
  OptimizerOptions o;
  o.kind = OptimizerKind::kAdamW;
  o.weight_decay = 0.1;
  o.fused = false;
  return o;
}

TEST(DataParallel, AloneTheStepIsTheRanksOwn) {
  at::manual_seed(1);
  TwoParameters m;
  test::LocalCommunicator comm;
  DataParallel dp(m.params, m.names, comm, comm);
  EXPECT_FALSE(dp.reduces());
  EXPECT_FALSE(dp.sharded());
  EXPECT_EQ(dp.optimizer_shards(), 1);
  EXPECT_TRUE(dp.capturable());
  EXPECT_FALSE(dp.gathers_parameters());
  dp.before_backward(/*last=*/true);
  m.backward();
  dp.after_backward(/*abandon=*/false);
  const std::vector<at::Tensor>& g = dp.update_gradients();
  ASSERT_EQ(g.size(), 2u);
  EXPECT_TRUE(g[0].is_same(m.params[0]) && g[1].is_same(m.params[1]));
  EXPECT_TRUE(at::equal(g[0].grad(), m.coefficients[0]));
  EXPECT_EQ(dp.agreed_over(), nullptr);
  dp.after_optimizer_step();  // nothing to gather
  const StepBytes b = dp.bytes_per_step();
  EXPECT_EQ(b.all_reduce + b.reduce_scatter + b.broadcast, 0);
  EXPECT_EQ(dp.bucket_bytes(), 0);
  EXPECT_FALSE(dp.releases_buckets());
  EXPECT_TRUE(dp.last_timeline().empty());
  EXPECT_EQ(dp.last_backward_end(), 0.0);
  const std::unique_ptr<Optimizer> opt = dp.make_optimizer(adamw());
  EXPECT_EQ(opt->num_params(), 2u);
  EXPECT_EQ(dp.describe(*opt), "");
  const OptimizerState whole{{"exp_avg.0", at::ones({2, 5})}};
  const OptimizerState own = dp.own_state(whole);
  ASSERT_EQ(own.size(), 1u);
  EXPECT_TRUE(own[0].second.is_same(whole[0].second));  // the whole state, untouched
}

TEST(DataParallel, AReducerAveragesInPlaceAndCountsAnAllReduce) {
  at::manual_seed(2);
  TwoParameters m;
  test::LocalCommunicator comm;
  DataParallel dp(m.params, m.names, comm, comm);
  dp.reduce(ReducerOptions{});
  EXPECT_TRUE(dp.reduces());
  EXPECT_FALSE(dp.sharded());
  EXPECT_FALSE(dp.capturable());  // not NCCL's collectives
  dp.before_backward(/*last=*/true);
  m.backward();
  dp.after_backward(/*abandon=*/false);
  const std::vector<at::Tensor>& g = dp.update_gradients();
  ASSERT_EQ(g.size(), 2u);
  EXPECT_TRUE(at::allclose(g[0].grad(), m.coefficients[0]));  // the mean of one rank's
  EXPECT_TRUE(at::allclose(g[1].grad(), m.coefficients[1]));
  const StepBytes b = dp.bytes_per_step();
  EXPECT_EQ(b.all_reduce, m.bytes());
  EXPECT_EQ(b.reduce_scatter, 0);
  EXPECT_EQ(b.broadcast, 0);
  EXPECT_EQ(dp.bucket_bytes(), 0);  // the buckets hold the gradients (Note [bucket views])
  EXPECT_FALSE(dp.last_timeline().empty());
  dp.captured();
  EXPECT_TRUE(dp.last_timeline().empty());
}

// A shard over one rank holds every value: its optimizer over the pieces steps like one over the
// whole parameters, from the reduce-scattered gradient shard or (no reducer) the whole gradients,
// and from its entries of a whole state.
void shard_steps_like_one_optimizer(bool with_reducer) {
  at::manual_seed(3);
  TwoParameters m;
  const std::vector<at::Tensor> plain_params = m.clones();
  Optimizer plain(plain_params, adamw());
  test::LocalCommunicator comm;
  DataParallel dp(m.params, m.names, comm, comm);
  dp.shard_optimizer();
  if (with_reducer) dp.reduce(ReducerOptions{});
  EXPECT_TRUE(dp.sharded());
  EXPECT_TRUE(dp.gathers_parameters());
  EXPECT_EQ(dp.optimizer_shards(), 1);
  EXPECT_EQ(dp.agreed_over(), &comm);
  const StepBytes b = dp.bytes_per_step();
  EXPECT_EQ(b.broadcast, m.bytes());
  EXPECT_EQ(b.reduce_scatter, with_reducer ? m.bytes() : 0);
  EXPECT_EQ(b.all_reduce, 0);
  const std::unique_ptr<Optimizer> shard = dp.make_optimizer(adamw());
  EXPECT_NE(dp.describe(*shard).find("optimizer state sharded over 1 rank"), std::string::npos)
      << dp.describe(*shard);
  for (int step = 0; step < 3; ++step) {
    if (step == 1) shard->load_state(dp.own_state(plain.state()));  // a resume: the same state
    for (const auto& p : m.params) p.mutable_grad() = at::Tensor();
    dp.before_backward(/*last=*/true);
    m.backward();
    dp.after_backward(/*abandon=*/false);
    const std::vector<at::Tensor>& pieces = dp.update_gradients();
    ASSERT_EQ(pieces.size(), 2u);
    EXPECT_TRUE(at::allclose(pieces[0].grad(), m.coefficients[0].flatten()));
    shard->step(0.01);
    dp.after_optimizer_step();
    for (size_t i = 0; i < plain_params.size(); ++i)
      plain_params[i].mutable_grad() = m.coefficients[i].clone();
    plain.step(0.01);
    for (size_t i = 0; i < plain_params.size(); ++i)
      EXPECT_TRUE(at::allclose(m.params[i], plain_params[i])) << "step " << step;
  }
}

TEST(DataParallel, AShardFromWholeGradientsStepsLikeOneOptimizer) {
  shard_steps_like_one_optimizer(/*with_reducer=*/false);
}

TEST(DataParallel, AShardFromTheGradientShardStepsLikeOneOptimizer) {
  shard_steps_like_one_optimizer(/*with_reducer=*/true);
}

}  // namespace
}  // namespace dtrain::detail
