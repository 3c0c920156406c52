// Weights for Python (src/checkpoint/weights.h) against Debian's python3-torch and the twins in
// python/dtrain_models.py: dtrain's file opens with torch.load (also weights_only) and
// load_state_dict(strict=True), and the twin's forward equals dtrain's; a twin's
// torch.save(model.state_dict()) loads into dtrain and dtrain's forward equals the twin's;
// every broken file is a dtrain::Error naming the file and what differs. Inputs and expected
// outputs travel in files of LibTorch's own torch::jit::pickle_save / pickle_load (plain dicts),
// not through the code under test.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "checkpoint/weights.h"
#include "dtrain/config.h"
#include "dtrain/models.h"
#include "test_paths.h"
#include "test_support.h"

namespace {

using dtrain::test::message_of;
using dtrain::test::python_failure;
using dtrain::test::run_python;
using dtrain::test::TempDir;

// mode dtrain_to_python KIND WEIGHTS IO: the twin loads dtrain's weights, runs on io["input"]
//   and prints the max difference to io["output"] (dtrain's output).
// mode python_to_dtrain KIND WEIGHTS IO: a randomized twin's state_dict to WEIGHTS, its input
//   and output to IO.
// mode broken KIND DIR: state_dicts with one thing wrong each.
const char* kScript = R"PY(
import sys
sys.path.insert(0, sys.argv[1] + "/python")
import torch
import dtrain_models as d

mode, kind = sys.argv[2], sys.argv[3]
torch.manual_seed(5)

def twin(kind):
    if kind == "linear": return d.Linear(12, 3)
    if kind == "mlp": return d.Mlp(12, (16, 8), 5)
    if kind == "cnn": return d.Cnn((1, 12, 12), (4, 6), 16, 5)
    if kind == "gpt": return d.GPT(32, 8, 2, 2, 16)
    if kind == "resnet18": return d.resnet18(3, 10)
    raise SystemExit("unknown kind " + kind)

def example_input(kind):
    if kind == "gpt": return torch.randint(0, 32, (3, 8))
    if kind == "resnet18": return torch.randn(2, 3, 32, 32)
    if kind == "cnn": return torch.randn(4, 1, 12, 12)
    return torch.randn(4, 3, 4)

m = twin(kind)
if mode == "dtrain_to_python":
    weights, io = sys.argv[4], sys.argv[5]
    sd = torch.load(weights)
    print("KEYS", len(sd))
    sd_safe = torch.load(weights, weights_only=True)
    assert sorted(sd_safe) == sorted(sd)
    m.load_state_dict(sd)  # strict
    m.eval()
    if kind == "gpt":
        print("TIED", int(sd["lm_head.weight"].data_ptr() == sd["transformer.wte.weight"].data_ptr()))
    if kind == "resnet18":
        print("BATCHES", int(m.bn1.num_batches_tracked), tuple(m.bn1.num_batches_tracked.shape))
    data = torch.load(io)
    with torch.no_grad():
        out = m(data["input"])
    ref = data["output"]
    scale = max(1.0, float(out.abs().max()))
    print("MAXDIFF", float((out - ref).abs().max()) / scale, tuple(out.shape) == tuple(ref.shape))
elif mode == "python_to_dtrain":
    weights, io = sys.argv[4], sys.argv[5]
    with torch.no_grad():
        for name, p in m.named_parameters():
            if kind == "resnet18" and ("conv" in name or "downsample.0" in name):
                continue  # keep Kaiming's scale through 18 layers
            p.normal_(0.0, 0.3)
        for name, b in m.named_buffers():
            if name.endswith("running_mean"): b.uniform_(-0.2, 0.2)
            if name.endswith("running_var"): b.uniform_(0.5, 1.5)
            if name.endswith("num_batches_tracked"): b.fill_(3)
    m.eval()
    torch.save(m.state_dict(), weights)
    x = example_input(kind)
    with torch.no_grad():
        y = m(x)
    torch.save({"input": x, "output": y}, io)
elif mode == "broken":
    out = sys.argv[4]
    sd = m.state_dict()
    missing = dict(sd); del missing["head.bias"]
    torch.save(missing, out + "/missing.pt")
    shape = dict(sd); shape["head.weight"] = torch.zeros(7, 8)
    torch.save(shape, out + "/shape.pt")
    dtype = dict(sd); dtype["head.weight"] = sd["head.weight"].double()
    torch.save(dtype, out + "/dtype.pt")
    extra = dict(sd); extra["head.scale"] = torch.ones(5)
    torch.save(extra, out + "/extra.pt")
    torch.save([sd["head.bias"]], out + "/list.pt")
    torch.save(sd, out + "/legacy.pt", _use_new_zipfile_serialization=False)
    g = d.GPT(32, 8, 2, 2, 16).state_dict()
    g["lm_head.weight"] = g["lm_head.weight"] + 1.0
    torch.save(g, out + "/untied.pt")
print("DONE")
)PY";

void python(const TempDir& dir, const std::string& args) {
  const auto run =
      run_python(dir, kScript, std::string("'") + dtrain::test::source_dir() + "' " + args);
  ASSERT_TRUE(run.status == 0 && run.output.find("DONE") != std::string::npos)
      << python_failure("the PyTorch twin", run);
}

std::string python_output(const TempDir& dir, const std::string& args) {
  const auto run =
      run_python(dir, kScript, std::string("'") + dtrain::test::source_dir() + "' " + args);
  EXPECT_TRUE(run.status == 0 && run.output.find("DONE") != std::string::npos)
      << python_failure("the PyTorch twin", run);
  return run.output;
}

// The value after `key` on the output line that starts with it ("" when there is none).
std::string field(const std::string& output, const std::string& key) {
  const size_t at = output.find(key + " ");
  if (at == std::string::npos) return "";
  const size_t start = at + key.size() + 1;
  return output.substr(start, output.find('\n', start) - start);
}

struct Case {
  std::string kind;
  dtrain::ModelConfig cfg;
  dtrain::DataSpec spec;
  at::Tensor input;
};

Case make_case(const std::string& kind) {
  Case c;
  c.kind = kind;
  c.cfg.name = kind;
  c.spec.num_classes = 5;
  if (kind == "linear" || kind == "mlp") {
    c.cfg.hidden = {16, 8};
    c.spec.input_shape = {3, 4};
    if (kind == "linear") c.spec.num_classes = 3;
    c.input = at::randn({4, 3, 4});
  } else if (kind == "cnn") {
    c.cfg.channels = {4, 6};
    c.cfg.fc = 16;
    c.spec.input_shape = {1, 12, 12};
    c.input = at::randn({4, 1, 12, 12});
  } else if (kind == "gpt") {
    c.cfg.n_layer = 2, c.cfg.n_head = 2, c.cfg.n_embd = 16, c.cfg.vocab_size = 32,
    c.cfg.seq_len = 8;
    c.spec.input_shape = {8};
    c.spec.num_classes = 32;
    c.spec.input_dtype = at::kLong;
    c.input = at::randint(0, 32, {3, 8}, at::kLong);
  } else {
    c.spec.input_shape = {3, 32, 32};
    c.spec.num_classes = 10;
    c.input = at::randn({2, 3, 32, 32});
  }
  return c;
}

std::shared_ptr<dtrain::Model> build(const Case& c) {
  return dtrain::make_model(c.kind, c.cfg, c.spec);
}

// Weights away from their initialization, so that every tensor (BatchNorm statistics and
// counters too) shapes the result.
void perturb(dtrain::Model& m, const std::string& kind) {
  at::NoGradGuard no_grad;
  for (auto& kv : m.named_parameters()) {
    if (kind == "resnet18" && kv.key().find("conv") != std::string::npos) continue;
    if (kind == "resnet18" && kv.key().find("downsample.0") != std::string::npos) continue;
    kv.value().normal_(0.0, 0.3);
  }
  for (auto& kv : m.named_buffers()) {
    const std::string& k = kv.key();
    if (k.find("running_mean") != std::string::npos) kv.value().uniform_(-0.2, 0.2);
    if (k.find("running_var") != std::string::npos) kv.value().uniform_(0.5, 1.5);
    if (k.find("num_batches_tracked") != std::string::npos) kv.value().fill_(7);
  }
}

void write_bytes(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::vector<char> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(f), {});
}

class ToPython : public ::testing::TestWithParam<std::string> {};

TEST_P(ToPython, TwinLoadsTheFileAndComputesTheSameOutput) {
  at::manual_seed(3);
  const Case c = make_case(GetParam());
  auto m = build(c);
  perturb(*m, c.kind);
  m->eval();
  const at::Tensor out = m->forward(c.input);
  TempDir dir;
  dtrain::detail::save_weights(*m, dir.file("model.pt"));
  c10::Dict<std::string, at::Tensor> io;
  io.insert("input", c.input);
  io.insert("output", out.detach());
  write_bytes(dir.file("io.pt"), torch::jit::pickle_save(io));
  const std::string py =
      python_output(dir, "dtrain_to_python " + c.kind + " '" + dir.file("model.pt") + "' '" +
                             dir.file("io.pt") + "'");
  const std::string diff = field(py, "MAXDIFF");
  ASSERT_FALSE(diff.empty()) << py;
  EXPECT_LT(std::stod(diff), 1e-5) << c.kind << ": " << py;
  EXPECT_NE(diff.find("True"), std::string::npos) << "output shapes differ: " << py;
  if (c.kind == "gpt") {
    EXPECT_EQ(field(py, "TIED"), "1") << "lm_head.weight is not wte's storage";
  }
  if (c.kind == "resnet18") {
    EXPECT_EQ(field(py, "BATCHES"), "7 ()") << py;
  }
}

class FromPython : public ::testing::TestWithParam<std::string> {};

TEST_P(FromPython, DtrainLoadsTheTwinsStateDictAndComputesTheSameOutput) {
  at::manual_seed(4);
  const Case c = make_case(GetParam());
  TempDir dir;
  python(dir,
         "python_to_dtrain " + c.kind + " '" + dir.file("sd.pt") + "' '" + dir.file("io.pt") + "'");
  auto m = build(c);
  dtrain::detail::load_weights(*m, dir.file("sd.pt"));
  m->eval();
  const auto io = torch::jit::pickle_load(read_bytes(dir.file("io.pt"))).toGenericDict();
  const at::Tensor x = io.at("input").toTensor(), want = io.at("output").toTensor();
  const at::Tensor got = m->forward(x);
  ASSERT_EQ(got.sizes(), want.sizes());
  const double scale = std::max(1.0, want.abs().max().item<double>());
  const double diff = (got - want).abs().max().item<double>() / scale;
  EXPECT_LT(diff, 1e-5) << c.kind << ": max |dtrain - PyTorch| / scale = " << diff;
  if (c.kind == "resnet18") {
    for (const auto& kv : m->named_buffers()) {
      if (kv.key().find("num_batches_tracked") != std::string::npos) {
        EXPECT_EQ(kv.value().item<int64_t>(), 3) << kv.key();
      }
    }
  }
}

const std::vector<std::string> kModels = {"linear", "mlp", "cnn", "gpt", "resnet18"};
INSTANTIATE_TEST_SUITE_P(Models, ToPython, ::testing::ValuesIn(kModels));
INSTANTIATE_TEST_SUITE_P(Models, FromPython, ::testing::ValuesIn(kModels));

TEST(Weights, RoundTripInDtrainKeepsEveryParameterAndBuffer) {
  at::manual_seed(6);
  const Case c = make_case("resnet18");
  auto a = build(c), b = build(c);
  perturb(*a, c.kind);
  TempDir dir;
  dtrain::detail::save_weights(*a, dir.file("w.pt"));
  dtrain::detail::load_weights(*b, dir.file("w.pt"));
  auto pa = a->named_parameters(), pb = b->named_parameters();
  for (const auto& kv : pa) EXPECT_TRUE(at::equal(kv.value(), pb[kv.key()])) << kv.key();
  auto ba = a->named_buffers(), bb = b->named_buffers();
  for (const auto& kv : ba) EXPECT_TRUE(at::equal(kv.value(), bb[kv.key()])) << kv.key();
}

TEST(Weights, BrokenFilesAreErrorsNamingTheFileAndTheDifference) {
  TempDir dir;
  python(dir, "broken mlp '" + dir.path() + "'");
  const Case c = make_case("mlp");
  auto m = build(c);
  const at::Tensor before = m->named_parameters()["head.weight"].clone();
  auto load = [&](const std::string& name) {
    return message_of([&] { dtrain::detail::load_weights(*m, dir.file(name)); });
  };
  auto expect_has = [&](const std::string& msg, const std::vector<std::string>& parts) {
    EXPECT_EQ(msg.find("NOT A dtrain::Error"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("NO EXCEPTION"), std::string::npos) << msg;
    for (const auto& p : parts)
      EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  };
  expect_has(load("missing.pt"), {dir.file("missing.pt"), "missing key head.bias", "[5]"});
  expect_has(load("shape.pt"), {dir.file("shape.pt"), "head.weight", "[7, 8]", "[5, 8]"});
  expect_has(load("dtype.pt"), {dir.file("dtype.pt"), "head.weight", "Double", "Float"});
  expect_has(load("extra.pt"), {dir.file("extra.pt"), "unexpected key head.scale"});
  expect_has(load("list.pt"), {dir.file("list.pt"), "type list", "not a dict"});
  expect_has(load("legacy.pt"), {dir.file("legacy.pt"), "before PyTorch 1.6"});
  expect_has(load("absent.pt"), {dir.file("absent.pt"), "no such file"});
  { std::ofstream(dir.file("text.pt")) << "hello, these are not weights\n"; }
  expect_has(load("text.pt"), {dir.file("text.pt"), "not a file written by torch.save"});
  dtrain::detail::save_weights(*m, dir.file("good.pt"));
  const auto good = read_bytes(dir.file("good.pt"));
  for (size_t keep : {good.size() / 2, good.size() - 10, size_t{30}, size_t{0}}) {
    write_bytes(dir.file("truncated.pt"), std::vector<char>(good.begin(), good.begin() + keep));
    expect_has(load("truncated.pt"), {dir.file("truncated.pt"), "torch.save"});
  }
  // Nothing was copied by a failed load.
  EXPECT_TRUE(at::equal(before, m->named_parameters()["head.weight"]));

  const Case g = make_case("gpt");
  auto gpt = build(g);
  expect_has(message_of([&] { dtrain::detail::load_weights(*gpt, dir.file("untied.pt")); }),
             {dir.file("untied.pt"), "lm_head.weight", "transformer.wte.weight", "ties"});
}

}  // namespace
