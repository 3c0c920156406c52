// Training FLOPs per sample, for MFU (Model::train_flops_per_sample): the GPT's from nanoGPT's
// estimate_mfu formula (PaLM's) and llm.c's, computed here from the config; the ResNets' from
// the multiply-adds PyTorch's own convolutions and linear layers do on the PyTorch twin
// (python/dtrain_models.py, forward hooks, in DTRAIN_REF_PYTHON), and ResNet-50's at 224x224
// against torchvision's published 4.09 GMACs.
#include <gtest/gtest.h>

#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "dtrain/config.h"
#include "dtrain/data/dataset.h"
#include "dtrain/models.h"
#include "test_paths.h"
#include "test_support.h"

namespace dtrain::detail {
void register_gpt_models();     // models/gpt.cpp
void register_resnet_models();  // models/resnet.cpp
}  // namespace dtrain::detail

namespace {

using dtrain::test::python_failure;
using dtrain::test::run_python;
using dtrain::test::TempDir;

std::shared_ptr<dtrain::Model> build(const std::string& name, const dtrain::ModelConfig& cfg,
                                     const dtrain::DataSpec& spec) {
  static const bool registered = [] {
    dtrain::detail::register_gpt_models();
    dtrain::detail::register_resnet_models();
    return true;
  }();
  (void)registered;
  return dtrain::make_model(name, cfg, spec);
}

dtrain::DataSpec tokens(int64_t seq, int64_t vocab) {
  dtrain::DataSpec s;
  s.input_shape = {seq};
  s.num_classes = vocab;
  s.input_dtype = at::kLong;
  return s;
}

dtrain::DataSpec images(std::vector<int64_t> shape, int64_t classes) {
  dtrain::DataSpec s;
  s.input_shape = std::move(shape);
  s.num_classes = classes;
  return s;
}

// ---- GPT ------------------------------------------------------------------------------------

struct Gpt {
  int64_t layers, heads, embd, vocab, positions, tokens;  // tokens: the data's per sample
};

// Every parameter of a GPT-2 with a tied head: wte V·C, wpe P·C, per block two LayerNorms
// (4C), qkv (3C² + 3C), attention projection (C² + C), fc (4C² + 4C), MLP projection
// (4C² + C); the final LayerNorm 2C.
double all_parameters(const Gpt& g) {
  const double c = static_cast<double>(g.embd);
  const double block =
      4 * c + (3 * c * c + 3 * c) + (c * c + c) + (4 * c * c + 4 * c) + (4 * c * c + c);
  return static_cast<double>(g.vocab) * c + static_cast<double>(g.positions) * c +
         static_cast<double>(g.layers) * block + 2 * c;
}

dtrain::ModelConfig config_of(const Gpt& g) {
  dtrain::ModelConfig c;
  c.name = "gpt";
  c.n_layer = g.layers, c.n_head = g.heads, c.n_embd = g.embd;
  c.vocab_size = g.vocab, c.seq_len = g.positions;
  return c;
}

TEST(Flops, GptFollowsNanoGptsEstimateMfu) {
  // nanoGPT: N = get_num_params() (every parameter but wpe), L, H, Q = n_embd / n_head, T;
  // flops_per_token = 6N + 12·L·H·Q·T; per sample (one sequence) × T.
  for (const Gpt g :
       {Gpt{12, 12, 768, 50257, 1024, 1024}, Gpt{2, 2, 16, 32, 8, 8}, Gpt{3, 4, 32, 100, 20, 12}}) {
    const double n = all_parameters(g) - static_cast<double>(g.positions * g.embd);
    const double h = static_cast<double>(g.heads), q = static_cast<double>(g.embd / g.heads);
    const double t = static_cast<double>(g.tokens), l = static_cast<double>(g.layers);
    const double per_token = 6 * n + 12 * l * h * q * t;
    auto m = build("gpt", config_of(g), tokens(g.tokens, g.vocab));
    EXPECT_DOUBLE_EQ(m->train_flops_per_sample(), per_token * t) << g.layers << " layers";
    // llm.c's gpt2_estimate_mfu: N = every parameter, 6N + 6·L·C·T per token.
    const double llmc = 6 * all_parameters(g) + 6 * l * static_cast<double>(g.embd) * t;
    EXPECT_DOUBLE_EQ(m->train_flops_per_sample_llmc(), llmc * t) << g.layers << " layers";
  }
}

TEST(Flops, Gpt2SmallHasNanoGptsParameterCountAndFlops) {
  // nanoGPT prints "number of parameters: 123.65M" for GPT-2 small (vocab 50257, 1024
  // positions): 124,439,808 with wpe's 786,432 taken out.
  const Gpt g{12, 12, 768, 50257, 1024, 1024};
  EXPECT_EQ(all_parameters(g), 124439808.0);
  auto m = build("gpt", config_of(g), tokens(1024, 50257));
  const double per_token = 6.0 * 123653376 + 12.0 * 12 * 768 * 1024;  // 855,166,464
  EXPECT_DOUBLE_EQ(m->train_flops_per_sample(), per_token * 1024);
}

// ---- ResNets --------------------------------------------------------------------------------

// Prints the forward multiply-adds of one sample of each case "kind C H W classes": every
// Conv2d (output values × in_channels / groups × kernel area) and Linear (outputs × inputs),
// counted by forward hooks while PyTorch runs the twin.
const char* kMacs = R"PY(
import sys
sys.path.insert(0, sys.argv[1] + "/python")
import torch
import dtrain_models as d

for case in sys.argv[2:]:
    kind, c, h, w, classes = case.split(":")
    model = getattr(d, kind)(int(c), int(classes)).eval()
    macs = [0]
    def conv(m, inp, out):
        macs[0] += out[0].numel() * (m.in_channels // m.groups) * m.kernel_size[0] * m.kernel_size[1]
    def linear(m, inp, out):
        macs[0] += out[0].numel() * m.in_features
    for m in model.modules():
        if isinstance(m, torch.nn.Conv2d): m.register_forward_hook(conv)
        if isinstance(m, torch.nn.Linear): m.register_forward_hook(linear)
    with torch.no_grad():
        model(torch.zeros(1, int(c), int(h), int(w)))
    print(case, macs[0])
)PY";

TEST(Flops, ResNetsCountTheMultiplyAddsPyTorchRuns) {
  struct Case {
    const char* kind;
    int64_t c, h, w, classes;
  };
  const std::vector<Case> cases = {{"resnet50", 3, 224, 224, 1000},
                                   {"resnet18", 3, 224, 224, 1000},
                                   {"resnet18", 1, 28, 28, 10},
                                   {"resnet50", 3, 65, 47, 7},
                                   {"resnet18", 3, 32, 33, 100}};
  std::string args = std::string("'") + dtrain::test::source_dir() + "'";
  for (const Case& k : cases)
    args += " " + std::string(k.kind) + ":" + std::to_string(k.c) + ":" + std::to_string(k.h) +
            ":" + std::to_string(k.w) + ":" + std::to_string(k.classes);
  TempDir dir;
  const auto run = run_python(dir, kMacs, args);
  ASSERT_EQ(run.status, 0) << python_failure("the MAC count of the PyTorch twins", run);
  std::istringstream out(run.output);
  dtrain::ModelConfig cfg;
  for (const Case& k : cases) {
    std::string label;
    double macs = 0;
    ASSERT_TRUE(out >> label >> macs) << run.output;
    auto m = build(k.kind, cfg, images({k.c, k.h, k.w}, k.classes));
    // Forward 2·MACs FLOPs, backward twice the forward.
    EXPECT_DOUBLE_EQ(m->train_flops_per_sample(), 3 * 2 * macs) << label;
    if (label == "resnet50:3:224:224:1000") {
      // torchvision lists ResNet-50 at 4.09 GFLOPS, which are multiply-adds.
      EXPECT_NEAR(macs, 4.09e9, 0.005e9);
    }
  }
}

TEST(Flops, OtherModelsDoNotClaimAFigure) {
  dtrain::ModelConfig cfg;
  cfg.name = "mlp";
  auto m = dtrain::make_model("mlp", cfg, images({1, 28, 28}, 10));
  EXPECT_EQ(m->train_flops_per_sample(), 0);
  auto r = build("resnet18", cfg, images({3, 32, 32}, 10));
  EXPECT_EQ(r->train_flops_per_sample_llmc(), 0);  // llm.c's count is for GPTs
}

}  // namespace
