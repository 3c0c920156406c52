// dtrain::Optimizer against torch.optim in DTRAIN_REF_PYTHON (Debian's python3-torch): SGD, Adam
// and AdamW from the same initial parameters through the same gradients (the learning rate
// changes between steps; one parameter has no gradient on its first step, another on a later
// one), compared after every step. Then checkpoints: state() / load_state() round trip, and the
// errors that name the bad entry.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "dtrain/config.h"
#include "dtrain/optim.h"
#include "test_support.h"

namespace dtrain {
namespace {

using test::message_of;
using test::python_failure;
using test::run_python;
using test::TempDir;

// Initial parameters and a gradient sequence; grads[s][i] undefined = no gradient on step s.
struct Scenario {
  std::vector<at::Tensor> init;
  std::vector<double> lrs;
  std::vector<std::vector<at::Tensor>> grads;
};

Scenario make_scenario(double base_lr) {
  at::manual_seed(20240611);
  Scenario s;
  for (auto shape :
       {std::vector<int64_t>{4, 3}, std::vector<int64_t>{5}, std::vector<int64_t>{2, 2, 2}}) {
    s.init.push_back(at::randn(shape));
  }
  s.lrs = {base_lr, 0.5 * base_lr, 0.5 * base_lr, 2.0 * base_lr, 0.25 * base_lr};
  for (size_t step = 0; step < s.lrs.size(); ++step) {
    std::vector<at::Tensor> g;
    for (size_t i = 0; i < s.init.size(); ++i) {
      const bool none = (step == 0 && i == 2) || (step == 2 && i == 1);
      g.push_back(none ? at::Tensor() : at::randn(s.init[i].sizes()) * (1.0 + step));
    }
    s.grads.push_back(g);
  }
  return s;
}

std::vector<at::Tensor> fresh_params(const Scenario& s) {
  std::vector<at::Tensor> p;
  for (const auto& t : s.init) p.push_back(t.clone().requires_grad_(true));
  return p;
}

void set_grads(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads) {
  for (size_t i = 0; i < params.size(); ++i) {
    at::Tensor p = params[i];
    p.mutable_grad() = grads[i].defined() ? grads[i].clone() : at::Tensor();
  }
}

// The parameters after each step, flattened to float64: out[step][param].
std::vector<std::vector<at::Tensor>> run_dtrain(const OptimizerOptions& o, const Scenario& s) {
  auto params = fresh_params(s);
  Optimizer opt(params, o);
  std::vector<std::vector<at::Tensor>> out;
  for (size_t step = 0; step < s.lrs.size(); ++step) {
    set_grads(params, s.grads[step]);
    opt.step(s.lrs[step]);
    std::vector<at::Tensor> snap;
    for (const auto& p : params) snap.push_back(p.detach().reshape({-1}).to(at::kDouble));
    out.push_back(snap);
  }
  return out;
}

void write_values(std::ostream& f, const at::Tensor& t) {
  const at::Tensor c = t.detach().to(at::kFloat).contiguous().reshape({-1});
  const float* v = c.data_ptr<float>();
  char buf[32];
  for (int64_t k = 0; k < c.numel(); ++k) {
    std::snprintf(buf, sizeof buf, " %.9g", static_cast<double>(v[k]));  // exact for float32
    f << buf;
  }
}

// Spec for the reference script: hyperparameters, initial values, then per step the lr and
// each parameter's gradient ("none" when it has none).
void write_spec(const std::string& path, const OptimizerOptions& o, const Scenario& s) {
  std::ofstream f(path);
  char buf[256];
  std::snprintf(buf, sizeof buf, "%s %.17g %.17g %.17g %.17g %.17g %.17g %d %d\n",
                to_string(o.kind), o.momentum, o.weight_decay, o.beta1, o.beta2, o.eps, o.dampening,
                o.nesterov ? 1 : 0, o.no_decay_norm_bias ? 1 : 0);
  f << buf << s.init.size() << ' ' << s.lrs.size() << '\n';
  for (const auto& t : s.init) {
    f << "p ";
    for (int64_t d = 0; d < t.dim(); ++d) f << (d ? "x" : "") << t.size(d);
    write_values(f, t);
    f << '\n';
  }
  for (size_t step = 0; step < s.lrs.size(); ++step) {
    std::snprintf(buf, sizeof buf, "lr %.17g\n", s.lrs[step]);
    f << buf;
    for (const auto& g : s.grads[step]) {
      f << "g";
      if (g.defined()) {
        write_values(f, g);
      } else {
        f << " none";
      }
      f << '\n';
    }
  }
}

const char* kReferenceScript = R"PY(
import sys
import torch

for spec in sys.argv[1:]:
    lines = open(spec).read().split("\n")
    kind, momentum, wd, beta1, beta2, eps, dampening, nesterov, no_decay = lines[0].split()
    momentum, wd, beta1, beta2, eps, dampening = (
        float(x) for x in (momentum, wd, beta1, beta2, eps, dampening))
    nesterov, no_decay = nesterov == "1", no_decay == "1"
    n_params, n_steps = (int(x) for x in lines[1].split())
    row = 2
    params = []
    for _ in range(n_params):
        words = lines[row].split()
        shape = [int(d) for d in words[1].split("x")]
        values = [float(v) for v in words[2:]]
        params.append(torch.tensor(values, dtype=torch.float32).reshape(shape).requires_grad_(True))
        row += 1
    # nanoGPT's groups: every parameter of 2 or more dimensions decays, the others do not.
    groups = [{"params": [p for p in params if p.dim() >= 2 or not no_decay]},
              {"params": [p for p in params if p.dim() < 2 and no_decay], "weight_decay": 0.0}]
    groups = [g for g in groups if g["params"]]
    if kind == "sgd":
        opt = torch.optim.SGD(groups, lr=1.0, momentum=momentum, weight_decay=wd,
                              dampening=dampening, nesterov=nesterov)
    elif kind == "adam":
        opt = torch.optim.Adam(groups, lr=1.0, betas=(beta1, beta2), eps=eps, weight_decay=wd)
    elif kind == "adamw":
        opt = torch.optim.AdamW(groups, lr=1.0, betas=(beta1, beta2), eps=eps, weight_decay=wd)
    else:
        raise SystemExit("unknown kind " + kind)
    with open(spec + ".out", "w") as out:
        for _ in range(n_steps):
            lr = float(lines[row].split()[1])
            row += 1
            for group in opt.param_groups:
                group["lr"] = lr
            for p in params:
                words = lines[row].split()[1:]
                row += 1
                p.grad = None if words == ["none"] else torch.tensor(
                    [float(v) for v in words], dtype=torch.float32).reshape(p.shape)
            opt.step()
            for p in params:
                out.write(" ".join(repr(v) for v in p.detach().reshape(-1).tolist()) + "\n")
print("DONE")
)PY";

// Runs torch.optim on every (options, scenario) pair; result[case][step][param].
std::vector<std::vector<std::vector<at::Tensor>>> run_torch(
    const std::vector<std::pair<OptimizerOptions, Scenario>>& cases) {
  TempDir dir;
  std::string args;
  for (size_t c = 0; c < cases.size(); ++c) {
    const std::string spec = dir.file("spec" + std::to_string(c) + ".txt");
    write_spec(spec, cases[c].first, cases[c].second);
    args += " '" + spec + "'";
  }
  const auto run = run_python(dir, kReferenceScript, args);
  EXPECT_TRUE(run.status == 0 && run.output.find("DONE") != std::string::npos)
      << python_failure("the torch.optim reference", run);
  std::vector<std::vector<std::vector<at::Tensor>>> result;
  for (size_t c = 0; c < cases.size(); ++c) {
    const Scenario& s = cases[c].second;
    std::ifstream f(dir.file("spec" + std::to_string(c) + ".txt.out"));
    std::vector<std::vector<at::Tensor>> steps;
    std::string line;
    for (size_t step = 0; step < s.lrs.size(); ++step) {
      std::vector<at::Tensor> params;
      for (size_t i = 0; i < s.init.size() && std::getline(f, line); ++i) {
        std::istringstream in(line);
        std::vector<double> v;
        for (double x; in >> x;) v.push_back(x);
        params.push_back(at::tensor(v, at::kDouble));
      }
      steps.push_back(params);
    }
    result.push_back(steps);
  }
  return result;
}

std::string describe_options(const OptimizerOptions& o) {
  std::ostringstream s;
  s << to_string(o.kind) << " momentum=" << o.momentum << " dampening=" << o.dampening
    << " nesterov=" << o.nesterov << " weight_decay=" << o.weight_decay
    << " no_decay_norm_bias=" << o.no_decay_norm_bias << " betas=(" << o.beta1 << ", " << o.beta2
    << ") eps=" << o.eps;
  return s.str();
}

// Every case: dtrain's parameters after each step equal torch.optim's within 1e-6 relative.
void expect_matches_torch(const std::vector<OptimizerOptions>& configs, double base_lr) {
  std::vector<std::pair<OptimizerOptions, Scenario>> cases;
  for (const auto& o : configs) cases.emplace_back(o, make_scenario(base_lr));
  const auto ref = run_torch(cases);
  ASSERT_EQ(ref.size(), cases.size());
  for (size_t c = 0; c < cases.size(); ++c) {
    const auto& [o, s] = cases[c];
    SCOPED_TRACE(describe_options(o));
    const auto mine = run_dtrain(o, s);
    ASSERT_EQ(ref[c].size(), mine.size());
    for (size_t step = 0; step < mine.size(); ++step) {
      ASSERT_EQ(ref[c][step].size(), mine[step].size()) << "step " << step;
      for (size_t i = 0; i < mine[step].size(); ++i) {
        const at::Tensor& a = mine[step][i];
        const at::Tensor& b = ref[c][step][i];
        ASSERT_EQ(a.numel(), b.numel()) << "step " << step << " param " << i;
        const double err = ((a - b).abs() / (b.abs() + 1e-3)).max().item<double>();
        EXPECT_LT(err, 1e-6) << "step " << step << " param " << i << "\n dtrain: " << a
                             << "\n torch:  " << b;
      }
    }
    // The run moved every parameter, so agreement is not two unchanged copies.
    for (size_t i = 0; i < s.init.size(); ++i) {
      const double moved =
          (mine.back()[i] - s.init[i].reshape({-1}).to(at::kDouble)).abs().max().item<double>();
      EXPECT_GT(moved, 1e-4) << "param " << i;
    }
  }
}

OptimizerOptions opts(const std::string& kind, double momentum, double wd) {
  OptimizerOptions o;
  o.kind = kind == "sgd"    ? OptimizerKind::kSgd
           : kind == "adam" ? OptimizerKind::kAdam
                            : OptimizerKind::kAdamW;
  o.momentum = momentum;
  o.weight_decay = wd;
  return o;
}

TEST(Optimizer, SgdMatchesTorchOptim) {
  expect_matches_torch(
      {opts("sgd", 0, 0), opts("sgd", 0.9, 0), opts("sgd", 0.9, 0.01), opts("sgd", 0, 0.1)}, 0.1);
}

OptimizerOptions sgd_with(double momentum, double dampening, bool nesterov, double wd,
                          bool no_decay) {
  OptimizerOptions o = opts("sgd", momentum, wd);
  o.dampening = dampening;
  o.nesterov = nesterov;
  o.no_decay_norm_bias = no_decay;
  return o;
}

// Nesterov and dampening; parameter 2 gets its first gradient on step 1, so its dampened buffer
// starts a step later than the others'.
TEST(Optimizer, SgdNesterovAndDampeningMatchTorchOptim) {
  expect_matches_torch({sgd_with(0.9, 0, true, 0, false), sgd_with(0.8, 0, true, 0.01, false),
                        sgd_with(0.9, 0.3, false, 0, false), sgd_with(0.7, 0.5, false, 0.05, true)},
                       0.1);
}

// train.no_decay_norm_bias: the 1-dimensional parameter (index 1, shape [5]) is not decayed; the
// 2- and 3-dimensional ones are. Large decays make the difference far above the tolerance.
TEST(Optimizer, NoDecayForOneDimensionalParametersMatchesTorchParamGroups) {
  auto with = [](const std::string& kind, double wd) {
    OptimizerOptions o = opts(kind, kind == "sgd" ? 0.9 : 0, wd);
    o.no_decay_norm_bias = true;
    return o;
  };
  expect_matches_torch({with("sgd", 0.5), with("adam", 0.5), with("adamw", 0.5)}, 0.05);
  // And it changes something: the undecayed parameter differs from a run that decays it.
  const Scenario s = make_scenario(0.05);
  const auto skip = run_dtrain(with("adamw", 0.5), s);
  const auto decay = run_dtrain(opts("adamw", 0, 0.5), s);
  EXPECT_TRUE(skip.back()[0].equal(decay.back()[0]));
  EXPECT_FALSE(skip.back()[1].equal(decay.back()[1]));
}

TEST(Optimizer, NesterovNeedsMomentumAndNoDampening) {
  const Scenario s = make_scenario(0.1);
  auto params = fresh_params(s);
  std::string msg = message_of([&] { Optimizer(params, sgd_with(0, 0, true, 0, false)); });
  EXPECT_NE(msg.find("train.nesterov"), std::string::npos) << msg;
  EXPECT_NE(msg.find("train.momentum > 0"), std::string::npos) << msg;
  msg = message_of([&] { Optimizer(params, sgd_with(0.9, 0.1, true, 0, false)); });
  EXPECT_NE(msg.find("dampening 0.1"), std::string::npos) << msg;
  msg = message_of([&] { Optimizer(params, sgd_with(0.9, 1.5, false, 0, false)); });
  EXPECT_NE(msg.find("train.dampening"), std::string::npos) << msg;
  OptimizerOptions o = sgd_with(0.9, 0, true, 0.1, true);
  o.fused = false;
  EXPECT_EQ(Optimizer(params, o).describe(),
            "SGD (Nesterov momentum 0.9), no weight decay on 1 of 3 parameters (fewer than 2 "
            "dimensions), "
            "multi-tensor (foreach)");
}

TEST(Optimizer, AdamMatchesTorchOptim) {
  OptimizerOptions tuned = opts("adam", 0, 0.01);
  tuned.beta1 = 0.8;
  tuned.beta2 = 0.99;
  tuned.eps = 1e-6;
  expect_matches_torch({opts("adam", 0, 0.01), opts("adam", 0, 0), tuned}, 0.01);
}

TEST(Optimizer, AdamWMatchesTorchOptim) {
  OptimizerOptions tuned = opts("adamw", 0, 0.1);
  tuned.beta1 = 0.85;
  tuned.beta2 = 0.95;
  expect_matches_torch({opts("adamw", 0, 0.05), tuned}, 0.01);
}

TEST(Optimizer, StepDoesNotWriteGradients) {
  for (const auto& o : {opts("sgd", 0.9, 0.1), opts("adam", 0, 0.1), opts("adamw", 0, 0.1)}) {
    const Scenario s = make_scenario(0.1);
    auto params = fresh_params(s);
    Optimizer opt(params, o);
    set_grads(params, s.grads[1]);
    std::vector<at::Tensor> before;
    for (const auto& p : params) before.push_back(p.grad().clone());
    opt.step(0.1);
    for (size_t i = 0; i < params.size(); ++i) {
      EXPECT_TRUE(params[i].grad().equal(before[i])) << to_string(o.kind) << " param " << i;
    }
  }
}

// A fresh optimizer loaded with another's state continues exactly as the original does, and
// differs from one that starts without it (so the state carries something).
TEST(Optimizer, StateRoundTripContinuesIdentically) {
  for (const auto& o : {opts("sgd", 0.9, 0.01), sgd_with(0.9, 0.5, false, 0.01, true),
                        opts("adam", 0, 0.01), opts("adamw", 0, 0.05)}) {
    SCOPED_TRACE(describe_options(o));
    const Scenario s = make_scenario(0.05);
    auto a_params = fresh_params(s);
    Optimizer a(a_params, o);
    for (size_t step = 0; step < 2; ++step) {
      set_grads(a_params, s.grads[step]);
      a.step(s.lrs[step]);
    }
    std::vector<std::pair<std::string, at::Tensor>> saved;
    for (const auto& kv : a.state()) saved.emplace_back(kv.first, kv.second.clone());
    EXPECT_FALSE(saved.empty());

    std::vector<at::Tensor> b_params, c_params;
    for (const auto& p : a_params) {
      b_params.push_back(p.detach().clone().requires_grad_(true));
      c_params.push_back(p.detach().clone().requires_grad_(true));
    }
    Optimizer b(b_params, o);
    b.load_state(saved);
    Optimizer c(c_params, o);
    for (size_t step = 2; step < s.lrs.size(); ++step) {
      set_grads(a_params, s.grads[step]);
      set_grads(b_params, s.grads[step]);
      set_grads(c_params, s.grads[step]);
      a.step(s.lrs[step]);
      b.step(s.lrs[step]);
      c.step(s.lrs[step]);
    }
    bool c_differs = false;
    for (size_t i = 0; i < a_params.size(); ++i) {
      EXPECT_TRUE(a_params[i].equal(b_params[i])) << "param " << i;
      c_differs = c_differs || !a_params[i].equal(c_params[i]);
    }
    EXPECT_TRUE(c_differs);
    // The step counts came along: parameter 2 missed step 0, so it is one behind.
    if (o.kind != OptimizerKind::kSgd || o.dampening != 0) {
      std::vector<double> steps;
      for (const auto& kv : b.state()) {
        if (kv.first.rfind("step.", 0) == 0) steps.push_back(kv.second.item<double>());
      }
      EXPECT_EQ(steps, (std::vector<double>{5.0, 4.0, 4.0}));
    }
  }
}

TEST(Optimizer, StateNames) {
  const Scenario s = make_scenario(0.1);
  auto names = [&](const OptimizerOptions& o) {
    auto params = fresh_params(s);
    Optimizer opt(params, o);
    std::vector<std::string> n;
    for (const auto& kv : opt.state()) n.push_back(kv.first);
    return n;
  };
  EXPECT_EQ(names(opts("sgd", 0.9, 0)),
            (std::vector<std::string>{"momentum.0", "momentum.1", "momentum.2"}));
  EXPECT_TRUE(names(opts("sgd", 0, 0.1)).empty());
  EXPECT_EQ(
      names(opts("adam", 0, 0)),
      (std::vector<std::string>{"exp_avg.0", "exp_avg_sq.0", "step.0", "exp_avg.1", "exp_avg_sq.1",
                                "step.1", "exp_avg.2", "exp_avg_sq.2", "step.2"}));
}

TEST(Optimizer, LoadStateNamesTheBadEntry) {
  const Scenario s = make_scenario(0.1);
  auto params = fresh_params(s);
  Optimizer adam(params, opts("adam", 0, 0));
  set_grads(params, s.grads[1]);
  adam.step(0.1);
  const auto good = adam.state();

  auto without = [&](const std::string& name) {
    std::vector<std::pair<std::string, at::Tensor>> out;
    for (const auto& kv : good) {
      if (kv.first != name) out.emplace_back(kv.first, kv.second.clone());
    }
    return out;
  };
  auto fresh = fresh_params(s);
  Optimizer target(fresh, opts("adam", 0, 0));
  std::string msg = message_of([&] { target.load_state(without("exp_avg_sq.1")); });
  EXPECT_NE(msg.find("'exp_avg_sq.1'"), std::string::npos) << msg;

  auto wrong_shape = without("");
  for (auto& kv : wrong_shape) {
    if (kv.first == "exp_avg.0") kv.second = at::zeros({3, 4});
  }
  msg = message_of([&] { target.load_state(wrong_shape); });
  EXPECT_NE(msg.find("'exp_avg.0'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[3, 4]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[4, 3]"), std::string::npos) << msg;

  auto extra = without("");
  extra.emplace_back("momentum.0", at::zeros({4, 3}));
  msg = message_of([&] { target.load_state(extra); });
  EXPECT_NE(msg.find("'momentum.0'"), std::string::npos) << msg;

  // Adam's state is not SGD's: the first SGD entry is missing.
  auto sgd_params = fresh_params(s);
  Optimizer sgd(sgd_params, opts("sgd", 0.9, 0));
  msg = message_of([&] { sgd.load_state(good); });
  EXPECT_NE(msg.find("'momentum.0'"), std::string::npos) << msg;

  // A failed load changed nothing: the target still holds its initial (zero) state.
  for (const auto& kv : target.state()) {
    EXPECT_EQ(kv.second.abs().sum().item<double>(), 0.0) << kv.first;
  }
}

TEST(Optimizer, OutOfRangeOptionsNameTheConfigKeyWithTheSchemasRule) {
  // The same ranges as the config's (one definition, in the schema): momentum in [0, 1), eps > 0.
  const Scenario s = make_scenario(0.1);
  auto params = fresh_params(s);
  std::string msg = message_of([&] { Optimizer(params, opts("sgd", 1.5, 0)); });
  EXPECT_NE(msg.find("train.momentum"), std::string::npos) << msg;
  EXPECT_NE(msg.find("must be in [0.0, 1.0)"), std::string::npos) << msg;
  OptimizerOptions o = opts("adam", 0, 0);
  o.eps = 0;
  msg = message_of([&] { Optimizer(params, o); });
  EXPECT_NE(msg.find("train.eps"), std::string::npos) << msg;
  const std::string from_config = message_of([] { Config::from_string("train: {eps: 0}\n"); });
  EXPECT_NE(from_config.find("must be > 0"), std::string::npos) << from_config;
  EXPECT_NE(msg.find("must be > 0"), std::string::npos) << msg;
}

TEST(Optimizer, DescribesThePathOnCpu) {
  const Scenario s = make_scenario(0.1);
  auto params = fresh_params(s);
  OptimizerOptions o = opts("sgd", 0.9, 0);
  o.fused = false;
  Optimizer sgd(params, o);
  EXPECT_EQ(sgd.describe(), "SGD (momentum 0.9), multi-tensor (foreach)");
  EXPECT_FALSE(sgd.fused());
  EXPECT_FALSE(sgd.capturable());

  // Fused allowed, but the parameters are on the CPU: foreach, and it says why.
  Optimizer adamw(params, opts("adamw", 0, 0.01));
  EXPECT_FALSE(adamw.fused());
  EXPECT_FALSE(adamw.capturable());
  const std::string d = adamw.describe();
  EXPECT_EQ(d.rfind("AdamW, multi-tensor (foreach); not fused: ", 0), 0u) << d;
}

}  // namespace
}  // namespace dtrain
