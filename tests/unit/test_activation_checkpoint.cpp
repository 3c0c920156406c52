// Activation checkpointing (Note [activation checkpointing]): checkpointed() runs its function
// once in forward and once more in backward, passes through where autograd does not record,
// leaves the tensors it keeps as the forward left them and fires every parameter's
// gradient-ready hook once per backward; GPT's transformer blocks and ResNet's residual blocks
// give the gradients of the uncheckpointed model (fp32, dropout, CPU autocast to bf16). The
// reference is the same model without checkpointing, from the same seed and inputs.
#include <gtest/gtest.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "dtrain/amp.h"
#include "dtrain/config.h"
#include "dtrain/models.h"
#include "model_support.h"
#include "models/activation_checkpoint.h"

namespace dtrain {
namespace {

using detail::checkpointed;

// The largest |a - b| / |b| over the parameters' gradients (norms of each tensor).
double gradient_difference(Model& a, Model& b) {
  const auto pa = a.named_parameters(), pb = b.named_parameters();
  EXPECT_EQ(pa.size(), pb.size());
  double worst = 0;
  for (size_t i = 0; i < pa.size() && i < pb.size(); ++i) {
    const at::Tensor& ga = pa[i].value().grad();
    const at::Tensor& gb = pb[i].value().grad();
    EXPECT_TRUE(ga.defined()) << pa[i].key() << " got no gradient with checkpointing";
    EXPECT_TRUE(gb.defined()) << pb[i].key() << " got no gradient without checkpointing";
    if (!ga.defined() || !gb.defined()) continue;
    EXPECT_GT(gb.norm().item<double>(), 0) << pb[i].key();
    const double d = (ga - gb).norm().item<double>() / std::max(gb.norm().item<double>(), 1e-30);
    worst = std::max(worst, d);
  }
  return worst;
}

// Two models from one seed: `with` checkpoints its blocks, `without` keeps every activation.
struct Pair {
  std::shared_ptr<Model> with, without;
};

Pair make_pair(const std::string& name, const ModelConfig& cfg, const DataSpec& spec) {
  Pair p;
  at::manual_seed(11);
  p.with = test::build(name, cfg, spec);
  at::manual_seed(11);
  p.without = test::build(name, cfg, spec);
  EXPECT_TRUE(p.with->set_activation_checkpointing(ActivationCheckpointing::kBlocks));
  EXPECT_TRUE(p.without->set_activation_checkpointing(ActivationCheckpointing::kOff));
  return p;
}

// One forward and backward of the cross-entropy loss on `inputs`, with the RNG seeded alike.
at::Tensor loss_and_backward(Model& m, const at::Tensor& inputs, const at::Tensor& targets,
                             Precision precision = Precision::kFp32) {
  at::manual_seed(5);
  at::Tensor loss;
  {
    AutocastGuard autocast(at::kCPU, precision);
    at::Tensor out = m.forward(inputs);
    loss = at::cross_entropy_loss(out.reshape({-1, out.size(-1)}).to(at::kFloat),
                                  targets.reshape({-1}));
  }
  loss.backward();
  return loss.detach();
}

ModelConfig small_gpt(double dropout = 0) {
  ModelConfig c = test::gpt_config(3, 2, 16, 32, 8);
  c.dropout = dropout;
  return c;
}

TEST(ActivationCheckpoint, RunsTheFunctionAgainInBackwardWithTheSameGradients) {
  at::manual_seed(1);
  const at::Tensor w = at::randn({4, 4}).requires_grad_(true);
  const at::Tensor x0 = at::randn({3, 4}).requires_grad_(true);
  int calls = 0;
  const detail::CheckpointFn fn = [&](const std::vector<at::Tensor>& in) {
    ++calls;
    const at::Tensor h = at::tanh(at::matmul(in[0], w));
    return std::vector<at::Tensor>{h * in[1], h.sum(1)};
  };
  const at::Tensor scale = at::randn({3, 4}).requires_grad_(true);
  auto out = checkpointed(fn, {x0, scale});
  EXPECT_EQ(calls, 1);
  ASSERT_TRUE(out[0].requires_grad());
  (out[0].sum() + 2 * out[1].sum()).backward();
  EXPECT_EQ(calls, 2);
  const at::Tensor gw = w.grad().clone(), gx = x0.grad().clone(), gs = scale.grad().clone();
  for (const auto* t : {&w, &x0, &scale}) t->grad().zero_();
  auto ref = fn({x0, scale});
  (ref[0].sum() + 2 * ref[1].sum()).backward();
  EXPECT_TRUE(at::allclose(gw, w.grad(), 1e-6, 1e-7));
  EXPECT_TRUE(at::allclose(gx, x0.grad(), 1e-6, 1e-7));
  EXPECT_TRUE(at::allclose(gs, scale.grad(), 1e-6, 1e-7));
}

TEST(ActivationCheckpoint, WithoutAutogradTheFunctionIsSimplyCalled) {
  int calls = 0;
  const detail::CheckpointFn fn = [&](const std::vector<at::Tensor>& in) {
    ++calls;
    return std::vector<at::Tensor>{in[0] * 2};
  };
  const at::Tensor x = at::ones({2}).requires_grad_(true);
  {
    at::NoGradGuard no_grad;
    EXPECT_FALSE(checkpointed(fn, {x})[0].requires_grad());
  }
  EXPECT_FALSE(checkpointed(fn, {at::ones({2})})[0].requires_grad());  // no input needs a gradient
  EXPECT_EQ(calls, 2);
}

TEST(ActivationCheckpoint, KeptTensorsChangeOncePerForwardAndRandomDrawsRepeat) {
  // A function that counts its calls in a kept tensor and draws dropout masks: the count goes up
  // by one per forward pass (not again in the recompute), the recompute draws the same mask, and
  // the generator continues after backward exactly as if nothing had been recomputed.
  const at::Tensor counter = at::zeros({1});
  const detail::CheckpointFn fn = [&](const std::vector<at::Tensor>& in) {
    counter.add_(1);
    return std::vector<at::Tensor>{at::dropout(in[0], 0.5, /*train=*/true)};
  };
  const at::Tensor x = at::ones({64}).requires_grad_(true);
  at::manual_seed(3);
  auto out = checkpointed(fn, {x}, {/*random=*/true, {counter}});
  const at::Tensor mask = out[0].detach().ne(0);
  out[0].sum().backward();
  EXPECT_EQ(counter.item<float>(), 1.0f);
  // d(sum(dropout(x)))/dx is the forward's mask scaled by 2.
  EXPECT_TRUE(x.grad().ne(0).equal(mask));
  const at::Tensor after = at::rand({4});
  at::manual_seed(3);
  (void)at::dropout(at::ones({64}), 0.5, true);
  EXPECT_TRUE(at::rand({4}).equal(after));
}

// Every parameter's gradient-ready hook (AccumulateGrad's post hook, the Reducer's signal).
struct CountingHook : torch::autograd::FunctionPostHook {
  explicit CountingHook(int* count) : count_(count) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    ++*count_;
    return outputs;
  }
  int* count_;
};

TEST(ActivationCheckpoint, EveryParameterHookFiresOncePerBackward) {
  Pair p = make_pair("gpt", small_gpt(), test::token_spec(8, 32));
  const auto params = p.with->parameters();
  std::vector<int> counts(params.size(), 0);
  std::vector<std::shared_ptr<torch::autograd::Node>> keep;
  for (size_t i = 0; i < params.size(); ++i) {
    auto acc = torch::autograd::impl::grad_accumulator(params[i]);
    acc->add_post_hook(std::make_unique<CountingHook>(&counts[i]));
    keep.push_back(acc);
  }
  const at::Tensor idx = at::randint(32, {4, 8}, at::kLong);
  for (int micro = 1; micro <= 2; ++micro) {  // accumulation: once per backward each time
    loss_and_backward(*p.with, idx, idx);
    for (size_t i = 0; i < counts.size(); ++i) EXPECT_EQ(counts[i], micro) << "parameter " << i;
  }
}

TEST(ActivationCheckpoint, GptGradientsEqualWithoutCheckpointing) {
  Pair p = make_pair("gpt", small_gpt(), test::token_spec(8, 32));
  at::manual_seed(2);
  const at::Tensor idx = at::randint(32, {4, 8}, at::kLong);
  const at::Tensor targets = at::randint(32, {4, 8}, at::kLong);
  const at::Tensor a = loss_and_backward(*p.with, idx, targets);
  const at::Tensor b = loss_and_backward(*p.without, idx, targets);
  EXPECT_NEAR(a.item<double>(), b.item<double>(), 1e-6 * b.item<double>());
  EXPECT_LT(gradient_difference(*p.with, *p.without), 1e-6);
}

TEST(ActivationCheckpoint, GptWithDropoutRecomputesTheSameMasks) {
  Pair p = make_pair("gpt", small_gpt(0.2), test::token_spec(8, 32));
  EXPECT_TRUE(p.with->recompute_draws_random_numbers());
  EXPECT_FALSE(p.without->recompute_draws_random_numbers());
  at::manual_seed(2);
  const at::Tensor idx = at::randint(32, {4, 8}, at::kLong);
  const at::Tensor a = loss_and_backward(*p.with, idx, idx);
  const at::Tensor after_with = at::rand({8});
  const at::Tensor b = loss_and_backward(*p.without, idx, idx);
  const at::Tensor after_without = at::rand({8});
  EXPECT_NEAR(a.item<double>(), b.item<double>(), 1e-6 * b.item<double>());
  EXPECT_LT(gradient_difference(*p.with, *p.without), 1e-6);
  // The recompute left the generator where the forward pass left it.
  EXPECT_TRUE(after_with.equal(after_without));
  // Dropout did draw: another seed gives other gradients.
  Pair q = make_pair("gpt", small_gpt(0.2), test::token_spec(8, 32));
  loss_and_backward(*q.without, idx, idx);
  at::manual_seed(99);
  q.with->zero_grad();
  {
    at::Tensor out = q.with->forward(idx);
    at::cross_entropy_loss(out.reshape({-1, 32}), idx.reshape({-1})).backward();
  }
  EXPECT_GT(gradient_difference(*q.with, *q.without), 1e-3);
}

// has_blocks() answers what set_activation_checkpointing(kBlocks) would, for every built-in model
// kind, and asking sets nothing.
TEST(ActivationCheckpoint, HasBlocksIsWhatCheckpointingBlocksAnswers) {
  const std::vector<std::pair<std::string, DataSpec>> models = {
      {"gpt", test::token_spec(8, 32)},
      {"resnet18", test::image_spec({3, 16, 16}, 5)},
      {"cnn", test::image_spec({1, 28, 28}, 10)},
      {"mlp", test::image_spec({1, 28, 28}, 10)}};
  for (const auto& [name, spec] : models) {
    ModelConfig c = name == "gpt" ? small_gpt() : ModelConfig{};
    c.name = name;
    auto m = make_model(name, c, spec);
    const bool has = m->has_blocks();
    EXPECT_EQ(has, name == "gpt" || name == "resnet18") << name;
    EXPECT_EQ(m->set_activation_checkpointing(ActivationCheckpointing::kBlocks), has) << name;
  }
}

TEST(ActivationCheckpoint, GptMicroBatchesAccumulateTheSameGradients) {
  Pair p = make_pair("gpt", small_gpt(0.1), test::token_spec(8, 32));
  at::manual_seed(4);
  const at::Tensor idx = at::randint(32, {6, 8}, at::kLong);
  for (auto* m : {p.with.get(), p.without.get()}) {
    for (int64_t k = 0; k < 2; ++k) {
      const at::Tensor part = idx.narrow(0, 3 * k, 3);
      loss_and_backward(*m, part, part);
    }
  }
  EXPECT_LT(gradient_difference(*p.with, *p.without), 1e-6);
}

TEST(ActivationCheckpoint, GptUnderCpuAutocastBf16) {
  // The recompute runs under the forward's autocast (backward runs outside it).
  Pair p = make_pair("gpt", small_gpt(), test::token_spec(8, 32));
  at::manual_seed(2);
  const at::Tensor idx = at::randint(32, {4, 8}, at::kLong);
  loss_and_backward(*p.with, idx, idx, Precision::kBf16);
  loss_and_backward(*p.without, idx, idx, Precision::kBf16);
  EXPECT_LT(gradient_difference(*p.with, *p.without), 1e-6);
}

TEST(ActivationCheckpoint, ResNetGradientsAndRunningStatisticsEqualWithoutCheckpointing) {
  Pair p = make_pair("resnet18", ModelConfig{}, test::image_spec({3, 16, 16}, 5));
  at::manual_seed(2);
  const at::Tensor x = at::randn({4, 3, 16, 16});
  const at::Tensor y = at::randint(5, {4}, at::kLong);
  for (int micro = 0; micro < 2; ++micro) {  // two backward passes: gradients accumulate
    loss_and_backward(*p.with, x, y);
    loss_and_backward(*p.without, x, y);
  }
  EXPECT_LT(gradient_difference(*p.with, *p.without), 1e-6);
  // BatchNorm's running statistics moved once per forward pass, not again in the recompute.
  const auto ba = p.with->named_buffers(), bb = p.without->named_buffers();
  ASSERT_EQ(ba.size(), bb.size());
  for (size_t i = 0; i < ba.size(); ++i)
    EXPECT_TRUE(at::allclose(ba[i].value(), bb[i].value(), 1e-6, 1e-7)) << ba[i].key();
}

TEST(ActivationCheckpoint, ResNet50ChannelsLastGradientsEqual) {
  ModelConfig c;
  c.channels_last = true;
  Pair p = make_pair("resnet50", c, test::image_spec({3, 8, 8}, 3));
  at::manual_seed(2);
  const at::Tensor x = at::randn({2, 3, 8, 8});
  const at::Tensor y = at::randint(3, {2}, at::kLong);
  loss_and_backward(*p.with, x, y);
  loss_and_backward(*p.without, x, y);
  EXPECT_LT(gradient_difference(*p.with, *p.without), 1e-6);
}

TEST(ActivationCheckpoint, ModelsWithoutBlocksRefuseBlocks) {
  ModelConfig c;
  c.hidden = {8};
  auto m = test::build("mlp", c, test::image_spec({4}, 3));
  EXPECT_TRUE(m->set_activation_checkpointing(ActivationCheckpointing::kOff));
  EXPECT_FALSE(m->set_activation_checkpointing(ActivationCheckpointing::kBlocks));
  EXPECT_FALSE(m->recompute_draws_random_numbers());
}

}  // namespace
}  // namespace dtrain
