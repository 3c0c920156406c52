// train.ema_decay (train/weight_average.h) against its formulas: torchvision's reference rule for
// the decay per update; every ema_every steps the first update a copy, later ones d avg + (1 - d)
// model, computed here in double; the warmup's resets; integer buffers copied; swap() exchanging
// the model's values and the average's in place (the same tensors); the average under the
// model's names for checkpoints.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "dtrain/config.h"
#include "dtrain/models.h"
#include "train/weight_average.h"

namespace dtrain::detail {
namespace {

std::shared_ptr<Model> ema_model() {
  ModelConfig c;
  c.name = "cnn";
  c.channels = {4};
  c.fc = 8;
  c.batch_norm = true;
  DataSpec spec;
  spec.input_shape = {1, 8, 8};
  spec.num_classes = 3;
  at::manual_seed(3);
  return make_model("cnn", c, spec);
}

std::vector<at::Tensor> ema_values(Model& m) {
  std::vector<at::Tensor> out;
  for (const auto& p : m.named_parameters()) out.push_back(p.value().detach().to(at::kDouble));
  for (const auto& b : m.named_buffers()) out.push_back(b.value().detach().to(at::kDouble));
  return out;
}

TEST(WeightAverage, TorchvisionsDecayRule) {
  TrainConfig t;
  t.global_batch = 1024, t.ema_every = 32, t.epochs = 600, t.ema_decay = 0.99998;
  // torchvision: alpha = (1 - 0.99998) * (8 * 128 * 32 / 600), decay = 1 - alpha.
  EXPECT_NEAR(ema_decay_per_update(t), 1.0 - 2e-5 * (1024.0 * 32.0 / 600.0), 1e-12);
  t.ema_decay = 0.9;  // alpha capped at 1: every update copies
  EXPECT_EQ(ema_decay_per_update(t), 0.0);
}

TEST(WeightAverage, UpdatesCopiesAndWarmupAsTheFormulas) {
  auto model = ema_model();
  TrainConfig t;
  t.global_batch = 8, t.ema_every = 2, t.epochs = 4, t.ema_decay = 0.99, t.ema_warmup_steps = 3;
  WeightAverage ema(*model, t);
  const double d = 1.0 - 0.01 * 8 * 2 / 4;  // 0.96
  EXPECT_NEAR(ema.decay(), d, 1e-15);
  std::vector<at::Tensor> want = ema_values(*model);  // the copy at construction
  int64_t n = 0;
  for (int64_t step = 1; step <= 11; ++step) {
    {
      at::NoGradGuard no_grad;
      for (const auto& p : model->parameters()) p.add_(at::randn_like(p) * 0.1);
      for (const auto& b : model->named_buffers())
        if (b.value().is_floating_point())
          b.value().add_(at::rand_like(b.value()));
        else
          b.value().add_(1);
    }
    ema.after_step(step);
    if (step % 2 == 0) {
      const std::vector<at::Tensor> now = ema_values(*model);
      for (size_t i = 0; i < want.size(); ++i) {
        const bool integral = !model->named_buffers().is_empty() &&
                              i >= model->named_parameters().size() &&
                              !model->named_buffers()[i - model->named_parameters().size()]
                                   .value()
                                   .is_floating_point();
        want[i] = n == 0 || integral ? now[i].clone() : d * want[i] + (1 - d) * now[i];
      }
      ++n;
      if (step <= 3) n = 0;  // the warmup: the next update copies again
    }
    const auto got = ema.named();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_TRUE(at::allclose(got[i].second.to(at::kDouble), want[i], 1e-6, 1e-7))
          << got[i].first << " step " << step;
    EXPECT_EQ(ema.updates(), n) << step;
  }
  // Names as a checkpoint's: named_parameters() then named_buffers().
  const auto named = ema.named();
  EXPECT_EQ(named.front().first, model->named_parameters()[0].key());
  EXPECT_EQ(named.back().first, model->named_buffers()[model->named_buffers().size() - 1].key());
}

TEST(WeightAverage, SwapExchangesInPlace) {
  auto model = ema_model();
  TrainConfig t;
  t.ema_decay = 0.5, t.ema_every = 1, t.ema_warmup_steps = 0;
  WeightAverage ema(*model, t);
  const at::Tensor w = model->parameters()[0];
  const void* memory = w.data_ptr();
  {
    at::NoGradGuard no_grad;
    w.add_(1.0);
  }
  const at::Tensor trained = w.detach().clone(), averaged = ema.named()[0].second.clone();
  EXPECT_FALSE(at::equal(trained, averaged));
  ema.swap();
  EXPECT_TRUE(ema.swapped());
  EXPECT_TRUE(at::equal(w, averaged));
  EXPECT_EQ(w.data_ptr(), memory);  // a captured graph's tensor keeps its memory
  EXPECT_TRUE(at::equal(ema.named()[0].second, averaged));  // named() is the average either way
  ema.after_step(1);  // an update while swapped averages the model's values all the same
  ema.swap();
  EXPECT_TRUE(at::equal(w, trained));
  EXPECT_TRUE(at::allclose(ema.named()[0].second, trained));  // the first update copied the model
  ema.restart();
  EXPECT_EQ(ema.updates(), 0);
}

}  // namespace
}  // namespace dtrain::detail
