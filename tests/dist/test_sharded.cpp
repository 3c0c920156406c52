// The sharded optimizer (dist.shard_optimizer, Note [sharded optimizer]): N ranks, each keeping the
// optimizer state of its shard of the parameters, reach the parameters of one rank whose one
// optimizer holds every parameter's state, for every optimizer and option (no-decay groups,
// clipping, loss scaling and skipped steps, accumulation, small buckets); the state gathered from
// the shards is the unsharded optimizer's; one rank warns and shards nothing; fewer tensors than
// ranks still shard (flat pieces); parameters that cannot be sharded are an Error naming the key;
// the gradients travel as one reduce-scatter volume, no all-reduce, each rank receiving its
// shard's averages. Under --backend=nccl (gpu.nccl.npN) the runs train on the GPU and gather the
// parameters through NCCL, also inside CUDA graphs.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "dist/optimizer_shard.h"
#include "dist/reducer.h"
#include "dist/shard_plan.h"
#include "dist_support.h"
#include "dtrain/comm.h"
#include "dtrain/error.h"
#include "dtrain/optim.h"
#include "equivalence.h"

namespace dtrain {
namespace {

using test::expect_equivalent;
using test::max_relative_difference;
using test::Result;
using test::train_with;
using test::world_size;

const std::string kShard = "dist.shard_optimizer=true";

std::vector<std::string> sharded(std::vector<std::string> o) {
  o.push_back(kShard);
  return o;
}

// The data plane of a Reducer, counting the bytes each kind of collective is given.
class CountingComm : public Communicator {
 public:
  explicit CountingComm(Communicator& inner) : inner_(inner) {}
  std::string backend() const override { return inner_.backend(); }
  int rank() const override { return inner_.rank(); }
  int world() const override { return inner_.world(); }
  void all_reduce(at::Tensor& t, ReduceOp op) override { all_reduce_async(t, op)->wait(); }
  std::unique_ptr<Work> all_reduce_async(at::Tensor& t, ReduceOp op) override {
    all_reduced += t.numel() * static_cast<int64_t>(t.element_size());
    return inner_.all_reduce_async(t, op);
  }
  std::unique_ptr<Work> reduce_scatter_async(const at::Tensor& input,
                                             const std::vector<int64_t>& counts, at::Tensor& output,
                                             ReduceOp op) override {
    reduce_scattered += input.numel() * static_cast<int64_t>(input.element_size());
    if (on_reduce_scatter) on_reduce_scatter();
    return inner_.reduce_scatter_async(input, counts, output, op);
  }
  void broadcast(at::Tensor& t, int root) override { inner_.broadcast(t, root); }
  at::Tensor all_gather(const at::Tensor& t) override { return inner_.all_gather(t); }
  void barrier() override { inner_.barrier(); }
  int64_t all_reduced = 0, reduce_scattered = 0;
  std::function<void()> on_reduce_scatter;

 private:
  Communicator& inner_;
};

// Rank r's gradient of parameter values v is (r + 1) v (small integers), so the average is
// (N + 1) / 2 v exactly: each rank's gradient shard holds that for its values of the flat
// sequence, over buckets of one to several parameters that cross the shards' edges; the wire
// carries the gradients once, as reduce-scatters, and no all-reduce; the local gradients are
// released: by the step's end (dist.shard_optimizer=true), or each bucket's as it is sent
// (=gradients, ReducerOptions::release_buckets), so that when the last bucket goes no local
// gradient is left.
TEST(Sharded, GradientsAreReduceScatteredIntoEachRanksShard) {
  for (const bool release : {false, true}) {
    SCOPED_TRACE(release ? "release_buckets" : "buckets kept");
    auto control = make_mpi_communicator(MPI_COMM_WORLD);
    CountingComm data(*control);
    const int world = control->world(), rank = control->rank();
    const std::vector<std::vector<int64_t>> shapes = {{5, 3}, {7}, {2, 2, 3}, {11}, {1}, {4, 6}};
    std::vector<at::Tensor> params, values;
    std::vector<std::string> names;
    std::vector<int64_t> numels;
    for (size_t i = 0; i < shapes.size(); ++i) {
      const int64_t n = at::empty(shapes[i]).numel();
      values.push_back(at::arange(n, at::kFloat).reshape(shapes[i]) + static_cast<double>(10 * i));
      params.push_back(at::zeros(shapes[i]).set_requires_grad(true));
      names.push_back("p" + std::to_string(i));
      numels.push_back(n);
    }
    const detail::ShardPlan plan = detail::plan_shards(numels, world);
    detail::ReducerOptions o;
    o.shard_values = plan.shard;
    o.first_bucket_cap_bytes =
        4 * 10;  // buckets of about ten values: several, of one to three parameters
    o.bucket_cap_bytes = 4 * 20;
    o.release_buckets = release;
    detail::Reducer reducer(params, names, data, *control, o);
    EXPECT_EQ(reducer.releases_buckets(), release);
    int64_t live = -1;               // local gradients when the last reduce-scatter is sent
    std::set<const void*> storages;  // the memory they are in then
    data.on_reduce_scatter = [&] {
      live = 0;
      storages.clear();
      for (const auto& p : params) {
        if (!p.grad().defined()) continue;
        ++live;
        storages.insert(p.grad().storage().data());
      }
    };
    EXPECT_GT(reducer.buckets().size(), size_t{2});
    std::vector<at::Tensor> flat;
    for (const auto& v : values) flat.push_back(v.flatten());
    const at::Tensor expected_all = at::cat(flat) * ((world + 1) / 2.0);
    for (int step = 0; step < 2; ++step) {
      data.all_reduced = data.reduce_scattered = 0;
      reducer.prepare(true);
      at::Tensor loss = at::zeros({});
      for (size_t i = 0; i < params.size(); ++i)
        loss = loss + (params[i] * values[i] * (rank + 1.0)).sum();
      loss.backward();
      reducer.finish();
      EXPECT_EQ(data.all_reduced, 0);
      EXPECT_EQ(data.reduce_scattered, plan.total * 4);
      EXPECT_EQ(live, release ? 0 : static_cast<int64_t>(params.size()));
      // Kept buckets: each filled bucket's gradients are its spans, autograd's own already gone,
      // all in the one buffer that holds the gradient shard too (Note [gradient shard in the
      // buckets]).
      if (!release) {
        EXPECT_EQ(storages.size(), size_t{1});
        EXPECT_EQ(*storages.begin(), reducer.gradient_shard().storage().data());
      }
      for (const auto& p : params) EXPECT_FALSE(p.grad().defined());
      const int64_t mine = plan.elements(rank);
      const at::Tensor shard = reducer.gradient_shard();
      ASSERT_EQ(shard.numel(), plan.shard);
      EXPECT_TRUE(
          at::equal(shard.narrow(0, 0, mine), expected_all.narrow(0, rank * plan.shard, mine)))
          << shard;
      EXPECT_TRUE(
          at::equal(shard.narrow(0, mine, plan.shard - mine), at::zeros({plan.shard - mine})));
    }
    // The parameters' gather goes through the buckets' memory outside this rank's shard (kept
    // buckets, more than one rank), or through a buffer of its own (released buckets).
    const at::Tensor spare = reducer.spare(plan.largest());
    EXPECT_EQ(spare.defined(), !release && world > 1);
    if (spare.defined()) {
      const at::Tensor shard = reducer.gradient_shard();
      EXPECT_TRUE(spare.is_alias_of(shard));
      EXPECT_EQ(spare.numel(), plan.largest());
      const auto* s0 = static_cast<const char*>(shard.data_ptr());
      const auto* b0 = static_cast<const char*>(spare.data_ptr());
      const int64_t es = shard.element_size();
      EXPECT_TRUE(b0 + spare.numel() * es <= s0 || s0 + shard.numel() * es <= b0)
          << "the spare overlaps the shard";
      EXPECT_FALSE(reducer.spare(plan.shard + 1).defined());
    }
  }
}

// ZeRO-2 (dist.shard_optimizer=gradients): the same parameters as one rank unsharded, with
// accumulation over micro-batches and one-parameter buckets, and with clipping; its steps are
// not captured in CUDA graphs (GraphStep's blocker says why).
TEST(Sharded, GradientShardingSameParametersAsOneRankUnsharded) {
  auto stage2 = [](std::vector<std::string> o) {
    o.push_back("dist.shard_optimizer=gradients");
    return o;
  };
  const std::vector<std::string> adamw = {"train.optimizer=adamw", "train.lr=0.01",
                                          "train.weight_decay=0.1"};
  expect_equivalent(stage2(adamw), adamw);
  const std::vector<std::string> accumulation = {
      "train.micro_batch=4", "dist.bucket_cap_mb=0.000001", "dist.first_bucket_mb=0.000001"};
  expect_equivalent(stage2(accumulation), accumulation);
  const std::vector<std::string> clipped = {"train.clip_grad_norm=0.5",
                                            "data.synthetic_task=regression", "train.loss=mse",
                                            "train.optimizer=adam", "train.lr=0.01"};
  const Result dist = train_with(MPI_COMM_WORLD, stage2(clipped));
  const Result ref = train_with(MPI_COMM_SELF, clipped);
  EXPECT_LT(max_relative_difference(dist, ref), 1e-5);
}

TEST(Sharded, SgdMomentumSameParametersAsOneRankUnsharded) { expect_equivalent({kShard}, {}); }

TEST(Sharded, SgdNesterovAndDampeningSameParametersAsOneRankUnsharded) {
  // Nesterov with L2 decay; dampening (the optimizer counts steps: its first step differs).
  const std::vector<std::vector<std::string>> cases = {
      {"train.nesterov=true", "train.weight_decay=0.01"},
      {"train.dampening=0.1", "train.weight_decay=0.01"}};
  for (const auto& o : cases) expect_equivalent(sharded(o), o);
}

TEST(Sharded, AdamWNoDecayGroupsSameParametersAsOneRankUnsharded) {
  // Biases (fewer than 2 dimensions) are in the undecayed group on whichever rank holds them.
  const std::vector<std::string> o = {"train.optimizer=adamw",  "train.lr=0.01",
                                      "train.weight_decay=0.1", "train.no_decay_norm_bias=true",
                                      "train.schedule=cosine",  "train.warmup_steps=3"};
  expect_equivalent(sharded(o), o);
}

TEST(Sharded, AdamClippingRegressionSameParametersAsOneRankUnsharded) {
  // Clipping by the global norm of the whole averaged gradient: each rank holds its shard of it,
  // and the ranks sum their squares.
  const std::vector<std::string> o = {"train.clip_grad_norm=0.5", "data.synthetic_task=regression",
                                      "train.loss=mse", "train.optimizer=adam", "train.lr=0.01"};
  const Result dist = train_with(MPI_COMM_WORLD, sharded(o));
  const Result ref = train_with(MPI_COMM_SELF, o);
  const Result init = train_with(MPI_COMM_SELF, {"train.max_steps=1", "train.lr=1e-12"});
  ASSERT_GT(max_relative_difference(ref, init), 1e-2);
  EXPECT_LT(max_relative_difference(dist, ref), 1e-5);
}

TEST(Sharded, AccumulationAndOneParameterBucketsSameParametersAsOneRankUnsharded) {
  expect_equivalent({kShard, "train.micro_batch=4", "dist.bucket_cap_mb=0.000001",
                     "dist.first_bucket_mb=0.000001"},
                    {});
}

TEST(Sharded, LossScalingAndSkippedStepsSameParametersAsUnsharded) {
  // fp16 loss scaling (on a CPU rank the compute stays fp32, the scaling applies) and
  // train.skip_nonfinite: the non-finite check reads the whole gradient, so every rank skips the
  // same step, sharded or not.
  const std::vector<std::vector<std::string>> cases = {
      {"train.precision=fp16", "train.optimizer=adamw", "train.lr=0.01"},
      {"train.skip_nonfinite=true", "train.momentum=0.9"}};
  for (const auto& o : cases) {
    auto run = [&](MPI_Comm comm, const std::vector<std::string>& v) {
      return train_with(comm, v, -1, test::test_device(), std::make_shared<test::NanAt>(5));
    };
    const Result dist = run(MPI_COMM_WORLD, sharded(o));
    const Result plain = run(MPI_COMM_WORLD, o);
    EXPECT_EQ(dist.skipped_steps, 1) << o[0];
    EXPECT_EQ(plain.skipped_steps, 1) << o[0];
    for (const auto& p : dist.params) EXPECT_TRUE(at::isfinite(p).all().item<bool>()) << o[0];
    // The same world, the same gradients: sharding changes nothing.
    EXPECT_LT(max_relative_difference(dist, plain), 1e-6) << o[0];
    // One rank over the whole batch (fp16 on a GPU computes in half precision: another
    // split of the batch rounds otherwise, so that comparison is CPU-only).
    if (!test::nccl_mode() || o[0] != "train.precision=fp16") {
      EXPECT_LT(max_relative_difference(dist, run(MPI_COMM_SELF, o)), 1e-5) << o[0];
    }
  }
}

TEST(Sharded, GraphStepsWithTheGatherInsideSameParametersAsEagerSteps) {
  // The CUDA graph holds the bucketed reduce-scatter and the shards' NCCL broadcasts; with the
  // gradients sharded too (ZeRO-2), also the buckets made and released during backward.
  if (!test::nccl_mode()) GTEST_SKIP() << "needs the GPU and NCCL: runs in gpu.nccl.npN";
  const Result one = train_with(MPI_COMM_SELF, {});
  for (const std::string& stage : {kShard, std::string("dist.shard_optimizer=gradients")}) {
    const std::vector<std::string> o = {stage, "dist.bucket_cap_mb=0.0005",
                                        "dist.first_bucket_mb=0.0005"};
    auto with = [&](const char* graph) {
      std::vector<std::string> v = o;
      v.push_back(graph);
      return v;
    };
    const Result graph = train_with(MPI_COMM_WORLD, with("train.cuda_graph=on"));
    const Result eager = train_with(MPI_COMM_WORLD, with("train.cuda_graph=off"));
    EXPECT_LT(max_relative_difference(graph, eager), 1e-6) << stage;
    EXPECT_LT(max_relative_difference(graph, one), 1e-5) << stage;
  }
}

// The summary's bytes on the wire per step, per stage: the base MLP's 389 values (Linear 12x16,
// 16x8, 8x5 with biases) in fp32, as NCCL's rings move them on N ranks: unsharded, 2(N-1)/N of
// them all-reduced; sharded (either stage), (N-1)/N reduce-scattered and (N-1)/N of the
// parameters broadcast back, the gradients once and the parameters once; nothing on one rank.
TEST(Sharded, TheSummaryCountsTheBytesOnTheWirePerStep) {
  const int n = world_size();
  const double share = (n - 1.0) / n, bytes = 4.0 * (12 * 16 + 16 + 16 * 8 + 8 + 8 * 5 + 5);
  for (const std::string stage : {"false", "true", "gradients"}) {
    const TrainSummary s =
        train_with(MPI_COMM_WORLD, {"dist.shard_optimizer=" + stage, "train.max_steps=2"}).summary;
    const bool sharded = stage != "false";
    EXPECT_NEAR(static_cast<double>(s.wire_all_reduce_bytes), sharded ? 0.0 : 2 * share * bytes,
                1.0)
        << stage;
    EXPECT_NEAR(static_cast<double>(s.wire_reduce_scatter_bytes), sharded ? share * bytes : 0.0,
                1.0)
        << stage;
    EXPECT_NEAR(static_cast<double>(s.wire_broadcast_bytes), sharded ? share * bytes : 0.0, 1.0)
        << stage;
  }
}

TEST(Sharded, OneRankWarnsNamingTheKeyAndShardsNothing) {
  testing::internal::CaptureStderr();
  const Result one = train_with(MPI_COMM_SELF, {kShard, "train.max_steps=4"});
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("warning: dist.shard_optimizer: this run has one rank, so there is nothing "
                     "to shard"),
            std::string::npos)
      << err;
  const Result plain = train_with(MPI_COMM_SELF, {"train.max_steps=4"});
  ASSERT_EQ(one.params.size(), plain.params.size());
  for (size_t i = 0; i < one.params.size(); ++i)
    EXPECT_TRUE(at::equal(one.params[i], plain.params[i])) << "parameter " << i;
}

TEST(Sharded, ParametersThatCannotBeShardedAreAnErrorNamingTheKey) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks: runs under mpirun -np 2 and -np 4";
  auto comm = make_mpi_communicator(MPI_COMM_WORLD);
  auto error_of = [&](const std::vector<at::Tensor>& params) -> std::string {
    std::vector<std::string> names;
    for (size_t i = 0; i < params.size(); ++i) names.push_back("p" + std::to_string(i));
    try {
      detail::OptimizerShard shard(params, names, *comm);
    } catch (const Error& e) {
      EXPECT_EQ(e.where(), "dist.shard_optimizer");
      return e.what();
    }
    return "(no error)";
  };
  // Fewer values than ranks: a rank would hold none.
  std::string m = error_of({at::zeros({world_size() - 1})});
  EXPECT_NE(m.find("leave rank " + std::to_string(world_size() - 1) + " none (use at most " +
                   std::to_string(world_size() - 1) + " ranks"),
            std::string::npos)
      << m;
  // Parameters of two dtypes cannot travel as one buffer.
  std::vector<at::Tensor> mixed(static_cast<size_t>(world_size()), at::zeros({8}));
  mixed.back() = at::zeros({8}, at::kDouble);
  m = error_of(mixed);
  EXPECT_NE(
      m.find("'p0' (Float, cpu) and 'p" + std::to_string(world_size() - 1) + "' (Double, cpu)"),
      std::string::npos)
      << m;
}

// The linear model has 2 parameter tensors (weight, bias): on 4 ranks every rank holds a piece of
// them, where whole tensors left two ranks without state, and the run is the unsharded one.
TEST(Sharded, FewerTensorsThanRanksStillShardEveryValue) {
  const std::vector<std::string> o = {"model.name=linear", "train.optimizer=adamw",
                                      "train.lr=0.01"};
  const Result dist = train_with(MPI_COMM_WORLD, sharded(o));
  const Result ref = train_with(MPI_COMM_SELF, o);
  const Result init =
      train_with(MPI_COMM_SELF, {"model.name=linear", "train.max_steps=1", "train.lr=1e-12"});
  ASSERT_GT(max_relative_difference(ref, init), 1e-2);
  EXPECT_LT(max_relative_difference(dist, ref), 1e-5);
}

TEST(Sharded, GatheredStateIsTheUnshardedOptimizersAndEveryRankEndsWithItsParameters) {
  // Optimizer shards over the world and one optimizer over every parameter, on the same values
  // and gradients: after the gather every rank holds the whole optimizer's parameters, and rank
  // 0 the whole optimizer's state, entry by entry.
  auto comm = make_mpi_communicator(MPI_COMM_WORLD);
  at::manual_seed(11);
  std::vector<at::Tensor> init, grads;
  std::vector<std::string> names;
  for (int64_t i = 0; i < 7; ++i) {
    init.push_back(i % 2 ? at::randn({3 + i}) : at::randn({3 + i, 4}));
    grads.push_back(at::randn(init.back().sizes()));
    names.push_back("p" + std::to_string(i));
  }
  auto fresh = [&] {
    std::vector<at::Tensor> out;
    for (size_t i = 0; i < init.size(); ++i) {
      out.push_back(init[i].clone().set_requires_grad(true));
      out.back().mutable_grad() = grads[i].clone();
    }
    return out;
  };
  OptimizerOptions o;
  o.kind = OptimizerKind::kAdamW;
  o.weight_decay = 0.1;
  o.no_decay_norm_bias = true;
  std::vector<at::Tensor> whole_params = fresh(), params = fresh();
  Optimizer whole(whole_params, o);
  detail::OptimizerShard shard(params, names, *comm);
  const auto mine = shard.make_optimizer(o);
  // Each rank keeps the state of its flat shard: 1/N of the values, rounded up.
  const int64_t values = shard.plan().total;
  EXPECT_LE(shard.plan().elements(comm->rank()), (values + world_size() - 1) / world_size());
  for (int step = 0; step < 2; ++step) {
    whole.step(0.01);
    shard.attach_gradients();
    mine->step(0.01);
    shard.gather_parameters();
  }
  for (size_t i = 0; i < init.size(); ++i)
    EXPECT_TRUE(at::equal(params[i], whole_params[i])) << names[i];
  const detail::OptimizerState gathered = detail::gather_optimizer_state(*mine, params, *comm);
  if (comm->rank() != 0) {
    EXPECT_TRUE(gathered.empty());
    return;
  }
  std::map<std::string, at::Tensor> by_name(gathered.begin(), gathered.end());
  const auto expected = whole.state();
  ASSERT_EQ(gathered.size(), expected.size());
  for (size_t k = 0; k < expected.size(); ++k) {
    const auto& [name, t] = expected[k];
    EXPECT_EQ(gathered[k].first, name);  // in the order one optimizer lists them
    ASSERT_TRUE(by_name.count(name)) << name;
    EXPECT_EQ(by_name.at(name).scalar_type(), t.scalar_type()) << name;
    EXPECT_EQ(by_name.at(name).sizes(), t.sizes()) << name;
    EXPECT_TRUE(at::equal(by_name.at(name), t)) << name;
  }
}

}  // namespace
}  // namespace dtrain
