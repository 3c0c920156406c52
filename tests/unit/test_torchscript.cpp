// model.name torchscript (src/models/torchscript.cpp): modules scripted by Debian's python3-torch
// load as dtrain Models whose parameters are the scripted module's own tensors (Note
// [TorchScript parameters]), named as Python's state_dict() names them, and whose forward,
// gradients and train/eval switch are those of PyTorch. Files that are not a usable scripted
// module are Errors naming model.path.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/torch_file.h"
#include "dtrain/config.h"
#include "dtrain/models.h"
#include "test_support.h"

namespace dtrain {
namespace {

using test::TempDir;

// Writes the scripted modules and, in ref.pt, PyTorch's values for net.pt: an input x (5, 2, 3),
// the eval-mode output y, every state_dict entry ("sd.<name>") and the gradient of y.sum() with
// respect to every parameter ("grad.<name>").
const char* kScript = R"PY(
import sys, torch
from typing import Tuple
out = sys.argv[1]
torch.manual_seed(3)

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Dropout(0.5))
        self.head = torch.nn.Linear(8, 3)
        self.register_buffer("offset", torch.tensor([0.5, -1.0, 2.0]))
    def forward(self, x):
        return self.head(self.body(x.flatten(1))) + self.offset

class Tied(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(6, 6)
        self.b = torch.nn.Linear(6, 3)
        self.c = torch.nn.Linear(6, 6)
        self.c.weight = self.a.weight
    def forward(self, x):
        return self.b(self.c(self.a(x.flatten(1))))

class TwoArgs(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(6, 3)
    def forward(self, x, y):
        return self.fc(x.flatten(1)) + y

class Pair(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(6, 3)
    def forward(self, x) -> Tuple[torch.Tensor, torch.Tensor]:
        z = self.fc(x.flatten(1))
        return z, z

class IntArg(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(6, 3)
    def forward(self, n: int):
        return self.fc(torch.zeros(n, 6))

class Wide(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(6, 5)
    def forward(self, x):
        return self.fc(x.flatten(1))

net = Net()
torch.jit.script(net).save(out + "/net.pt")
torch.jit.script(Tied()).save(out + "/tied.pt")
torch.jit.script(TwoArgs()).save(out + "/two_args.pt")
torch.jit.script(Pair()).save(out + "/pair.pt")
torch.jit.script(IntArg()).save(out + "/int_arg.pt")
torch.jit.script(Wide()).save(out + "/wide.pt")
torch.save(net.state_dict(), out + "/state_dict.pt")

net.eval()
x = torch.randn(5, 2, 3)
y = net(x)
y.sum().backward()
ref = {"x": x, "y": y.detach()}
for k, v in net.state_dict().items():
    ref["sd." + k] = v
for k, p in net.named_parameters():
    ref["grad." + k] = p.grad
torch.save(ref, out + "/ref.pt")
print("DONE")
)PY";

// Float samples of `shape` in `classes` classes.
DataSpec spec(std::vector<int64_t> shape, int64_t classes) {
  DataSpec s;
  s.input_shape = std::move(shape);
  s.num_classes = classes;
  return s;
}

class TorchScript : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    const auto run = test::run_python(*dir_, kScript, "'" + dir_->path() + "'");
    ok_ = run.status == 0 && run.output.find("DONE") != std::string::npos;
    failure_ = test::python_failure("scripting the test modules", run);
    if (ok_)
      for (auto& [k, v] : detail::torch_load_file(dir_->file("ref.pt"))) ref_[k] = v;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override { ASSERT_TRUE(ok_) << failure_; }

  static std::shared_ptr<Model> load(const std::string& file, int64_t classes = 3) {
    ModelConfig c;
    c.name = "torchscript";
    c.path = file.empty() ? "" : dir_->file(file);
    return make_model("torchscript", c, spec({2, 3}, classes));
  }
  static std::string error_of(const std::string& file) {
    return test::message_of([&] { load(file); });
  }

  static TempDir* dir_;
  static bool ok_;
  static std::string failure_;
  static std::map<std::string, at::Tensor> ref_;
};
TempDir* TorchScript::dir_ = nullptr;
bool TorchScript::ok_ = false;
std::string TorchScript::failure_;
std::map<std::string, at::Tensor> TorchScript::ref_;

TEST_F(TorchScript, ParametersAndBuffersAreTheStateDictOfPython) {
  auto m = load("net.pt");
  std::vector<std::string> params, buffers;
  for (const auto& p : m->named_parameters()) {
    params.push_back(p.key());
    ASSERT_TRUE(ref_.count("sd." + p.key())) << p.key();
    EXPECT_TRUE(at::equal(p.value(), ref_.at("sd." + p.key()))) << p.key();
    EXPECT_TRUE(p.value().requires_grad()) << p.key();
  }
  for (const auto& b : m->named_buffers()) {
    buffers.push_back(b.key());
    EXPECT_TRUE(at::equal(b.value(), ref_.at("sd." + b.key()))) << b.key();
  }
  EXPECT_EQ(params,
            (std::vector<std::string>{"body.0.weight", "body.0.bias", "head.weight", "head.bias"}));
  EXPECT_EQ(buffers, (std::vector<std::string>{"offset"}));
}

TEST_F(TorchScript, ForwardAndGradientsAreThoseOfPyTorch) {
  auto m = load("net.pt");
  m->eval();
  const at::Tensor y = m->forward(ref_.at("x"));
  EXPECT_TRUE(at::allclose(y, ref_.at("y"), 1e-6, 1e-6)) << y << ref_.at("y");
  y.sum().backward();
  for (const auto& p : m->named_parameters()) {
    ASSERT_TRUE(p.value().grad().defined()) << p.key();
    EXPECT_TRUE(at::allclose(p.value().grad(), ref_.at("grad." + p.key()), 1e-6, 1e-6)) << p.key();
  }
}

TEST_F(TorchScript, TrainAndEvalReachTheScriptedModule) {
  auto m = load("net.pt");
  const at::Tensor x = ref_.at("x");
  at::NoGradGuard no_grad;
  m->train();
  EXPECT_TRUE(m->is_training());
  // Dropout(0.5) on 5 x 8 activations: two passes drop the same units with probability 2^-40.
  EXPECT_FALSE(at::equal(m->forward(x), m->forward(x)));
  m->eval();
  EXPECT_TRUE(at::equal(m->forward(x), m->forward(x)));
  EXPECT_TRUE(at::allclose(m->forward(x), ref_.at("y"), 1e-6, 1e-6));
}

TEST_F(TorchScript, ChangesToTheParametersReachTheScriptedForward) {
  auto m = load("net.pt");
  m->eval();
  at::NoGradGuard no_grad;
  // head.weight = 0: every output row is head.bias + offset, whatever the input.
  for (const auto& p : m->named_parameters())
    if (p.key() == "head.weight") p.value().zero_();
  const at::Tensor want = (ref_.at("sd.head.bias") + ref_.at("sd.offset")).expand({5, 3});
  EXPECT_TRUE(at::allclose(m->forward(ref_.at("x")), want, 1e-6, 1e-6));
  // As Module::to and a checkpoint's load do: set_data keeps the tensor the module reads.
  for (const auto& p : m->named_parameters())
    if (p.key() == "head.bias") p.value().set_data(at::full({3}, 7.0));
  EXPECT_TRUE(at::allclose(m->forward(ref_.at("x")),
                           (at::full({3}, 7.0) + ref_.at("sd.offset")).expand({5, 3}), 1e-6, 1e-6));
}

TEST_F(TorchScript, ATiedWeightIsOneParameter) {
  auto m = load("tied.pt");
  std::vector<std::string> params;
  for (const auto& p : m->named_parameters()) params.push_back(p.key());
  EXPECT_EQ(params,
            (std::vector<std::string>{"a.weight", "a.bias", "b.weight", "b.bias", "c.bias"}));
}

TEST_F(TorchScript, BadFilesAreErrorsNamingModelPath) {
  const std::string empty = error_of("");
  EXPECT_NE(empty.find("model.path"), std::string::npos) << empty;
  EXPECT_NE(empty.find("empty"), std::string::npos) << empty;

  {
    std::ofstream f(dir_->file("text.pt"));
    f << "not an archive\n";
  }
  // file -> what the error says besides "model.path=<file>"
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"no_such.pt", {"file not found"}},
      {"text.pt", {"not a TorchScript archive"}},
      {"state_dict.pt", {"not a TorchScript archive"}},
      {"two_args.pt", {"forward takes 2 argument(s)"}},
      {"int_arg.pt", {"forward's argument n is int"}},
      {"pair.pt", {"forward returns Tuple[Tensor, Tensor]"}},
      {"wide.pt", {"[2, 5]", "(N, 3)"}},
  };
  for (const auto& [file, says] : cases) {
    const std::string msg = error_of(file);
    EXPECT_NE(msg.find("model.path=" + dir_->file(file)), std::string::npos) << msg;
    for (const std::string& s : says)
      EXPECT_NE(msg.find(s), std::string::npos) << s << " | " << msg;
  }
}

TEST_F(TorchScript, AnInputTheForwardCannotTakeIsAnErrorNamingModelPath) {
  // net.pt flattens to 6 features; 4 features per sample do not fit its first Linear.
  ModelConfig c;
  c.name = "torchscript";
  c.path = dir_->file("net.pt");
  const std::string msg = test::message_of([&] { make_model("torchscript", c, spec({4}, 3)); });
  EXPECT_NE(msg.find("model.path=" + c.path), std::string::npos) << msg;
  EXPECT_NE(msg.find("forward failed on a batch of shape [2, 4]"), std::string::npos) << msg;
}

}  // namespace
}  // namespace dtrain
