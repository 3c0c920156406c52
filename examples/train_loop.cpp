// The training loop written out against the library, as a plain PyTorch DDP script writes it:
// config, communicator, data, model, optimizer, then for each epoch the rank's shard of the
// samples, forward, backward, gradients averaged over the ranks, step; at the end an evaluation
// that counts every test sample once. The Trainer (build_session) does the same and more:
// gradients bucketed and averaged while backward runs, micro-batches, mixed precision,
// checkpoints, hooks.
//
//   mpirun -np 2 build-examples/example_train_loop [section.key=value ...]
#include <ATen/ATen.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dtrain/comm.h"
#include "dtrain/config.h"
#include "dtrain/data/dataset.h"
#include "dtrain/data/loader.h"
#include "dtrain/data/sampler.h"
#include "dtrain/error.h"
#include "dtrain/log.h"
#include "dtrain/models.h"
#include "dtrain/optim.h"
#include "dtrain/runtime.h"
#include "dtrain/session.h"

int main(int argc, char** argv) {
  const std::vector<std::string> overrides(argv + 1, argv + argc);
  return dtrain::run_guarded(&argc, &argv, [&](dtrain::Runtime& rt) {
    dtrain::Config cfg = dtrain::Config::from_string(R"(
model: {name: mlp, hidden: [64]}
data: {format: synthetic, synthetic_task: classification, synthetic_features: 16,
       synthetic_classes: 4, synthetic_size: 8192, synthetic_test_size: 2048}
train: {epochs: 3, global_batch: 128, optimizer: adamw, lr: 0.003}
)",
                                                     "train_loop example", overrides);
    cfg.resolve(rt.world());  // this rank's share of the global batch: cfg.resolved.rank_batch
    dtrain::log::configure(rt.rank(), cfg.run.quiet);
    rt.setup(cfg.run, cfg.dist);  // the device (a GPU by local rank, or the CPU), communicators
    dtrain::Communicator& comm = rt.comm();
    const at::TensorOptions on_device = at::TensorOptions().device(rt.device()).dtype(at::kDouble);

    at::manual_seed(static_cast<uint64_t>(cfg.run.seed));
    const dtrain::Splits data = dtrain::make_datasets(cfg.data, cfg.run.seed);
    std::shared_ptr<dtrain::Model> model =
        dtrain::make_model(cfg.model.name, cfg.model, data.train->spec());
    model->to(rt.device());
    std::vector<at::Tensor> params = model->parameters();
    {
      at::NoGradGuard no_grad;
      for (at::Tensor& p : params) comm.broadcast(p, /*root=*/0);  // every rank starts alike
    }
    dtrain::OptimizerOptions adamw;
    adamw.kind = cfg.train.optimizer;
    adamw.weight_decay = cfg.train.weight_decay;
    dtrain::Optimizer optimizer(params, adamw);
    const dtrain::LoaderOptions loading{cfg.data.workers, cfg.data.prefetch, false, rt.device()};

    const int64_t batch = cfg.resolved.rank_batch;
    dtrain::DistributedSampler sampler(data.train->size(), rt.world(), rt.rank(), /*shuffle=*/true,
                                       static_cast<uint64_t>(cfg.run.seed), /*drop_last=*/true);
    for (int64_t epoch = 0; epoch < cfg.train.epochs; ++epoch) {
      sampler.set_epoch(epoch);  // a new permutation every epoch, the same on every rank
      const std::vector<int64_t> mine = sampler.indices();
      std::vector<std::vector<int64_t>> plan;
      for (size_t i = 0; i + batch <= mine.size(); i += batch)
        plan.emplace_back(mine.begin() + i, mine.begin() + i + batch);
      dtrain::Loader loader(data.train, plan, loading);
      at::Tensor loss_sum = at::zeros({}, on_device);
      while (std::optional<dtrain::Batch> b = loader.next()) {
        for (at::Tensor& p : params) p.mutable_grad() = at::Tensor();
        at::Tensor loss = at::cross_entropy_loss(model->forward(b->inputs), b->targets);
        loss.backward();
        for (at::Tensor& p : params) comm.all_reduce(p.mutable_grad(), dtrain::ReduceOp::kAvg);
        optimizer.step(cfg.train.lr);
        loss_sum += loss.detach();
      }
      comm.all_reduce(loss_sum, dtrain::ReduceOp::kAvg);
      dtrain::log::info("epoch " + std::to_string(epoch + 1) + ": mean training loss " +
                        std::to_string(loss_sum.item<double>() / static_cast<double>(plan.size())));
    }

    model->eval();
    at::NoGradGuard no_grad;
    at::Tensor counts = at::zeros({2}, on_device);  // (right, seen) over all ranks
    dtrain::Loader test(data.test, {dtrain::eval_shard(data.test->size(), rt.world(), rt.rank())},
                        loading);
    while (std::optional<dtrain::Batch> b = test.next()) {
      counts[0] += (model->forward(b->inputs).argmax(1) == b->targets).sum();
      counts[1] += b->size();
    }
    comm.all_reduce(counts, dtrain::ReduceOp::kSum);
    // The replicas stayed in step: every rank holds the same parameters.
    at::Tensor sum = at::zeros({}, on_device);
    for (const at::Tensor& p : params) sum += p.sum();
    const at::Tensor sums = comm.all_gather(sum);  // (world,)
    if (!at::equal(sums, sums[0].expand_as(sums))) throw dtrain::Error("the replicas differ");
    dtrain::log::info("train loop: test accuracy " +
                      std::to_string(100 * counts[0].item<double>() / counts[1].item<double>()) +
                      "% of " + std::to_string(counts[1].item<int64_t>()) + " samples, " +
                      std::to_string(rt.world()) + " rank(s) in step");
    return 0;
  });
}
