// checkpointed(): Note [activation checkpointing] in activation_checkpoint.h.
#include "models/activation_checkpoint.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/autocast_mode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include <mutex>
#include <optional>
#include <utility>

#include "cuda/graph.h"
#include "dtrain/error.h"
#include "util/torch_compat.h"

namespace dtrain::detail {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// A generator's state, to draw the same numbers again.
struct GeneratorState {
  at::Generator generator;
  at::Tensor state;
};

GeneratorState state_of(at::Generator generator) {
  std::lock_guard<std::mutex> lock(generator.mutex());
  at::Tensor state = generator.get_state();
  return {std::move(generator), std::move(state)};
}

void restore(const GeneratorState& s) {
  at::Generator g = s.generator;
  std::lock_guard<std::mutex> lock(g.mutex());
  g.set_state(s.state);
}

// The generator fn's random operations draw from: the default one of its inputs' device (the
// CPU's, or the GPU's; the CPU's is left alone for GPU inputs, since other threads may use it).
std::vector<GeneratorState> generator_states(const at::Device& device) {
  if (device.is_cuda()) return {state_of(at::globalContext().defaultGenerator(device))};
  return {state_of(at::detail::getDefaultCPUGenerator())};
}

// Autocast's state for the device types dtrain computes on (compat::set_autocast's).
struct AutocastState {
  bool cpu = false, cuda = false;
  at::ScalarType cpu_dtype = at::kBFloat16, cuda_dtype = at::kHalf;
};

AutocastState autocast_state() {
  AutocastState a;
  a.cpu = compat::autocast_enabled(c10::DeviceType::CPU);
  a.cpu_dtype = compat::autocast_dtype(c10::DeviceType::CPU);
  a.cuda = compat::autocast_enabled(c10::DeviceType::CUDA);
  a.cuda_dtype = compat::autocast_dtype(c10::DeviceType::CUDA);
  return a;
}

void set_autocast_state(const AutocastState& a) {
  compat::set_autocast(c10::DeviceType::CPU, a.cpu, a.cpu_dtype);
  compat::set_autocast(c10::DeviceType::CUDA, a.cuda, a.cuda_dtype);
}

// Runs fn with autocast's cache of cast weights off: a weight cast while autograd is off (the
// node's forward) must not be reused by a later recorded use, and the recompute's casts need not
// outlive it. The same casts are computed either way.
variable_list run_uncached(const CheckpointFn& fn, const variable_list& inputs) {
  const bool cached = at::autocast::is_autocast_cache_enabled();
  at::autocast::set_autocast_cache_enabled(false);
  try {
    variable_list out = fn(inputs);
    at::autocast::set_autocast_cache_enabled(cached);
    return out;
  } catch (...) {
    at::autocast::set_autocast_cache_enabled(cached);
    throw;
  }
}

// What the node's backward needs besides the saved inputs.
struct Recompute : torch::CustomClassHolder {
  CheckpointFn fn;
  CheckpointOptions options;
  at::Device device = at::kCPU;
  std::vector<GeneratorState> generators;  // at the forward, when options.random
  AutocastState autocast;
};

// The generators and autocast as the forward pass had them, while the recompute runs; the
// current ones are put back when it ends (also on an error), before the inner backward (whose
// operations autocast must not touch).
class RecomputeScope {
 public:
  explicit RecomputeScope(const Recompute& r) : autocast_(autocast_state()) {
    if (r.options.random) {
      current_ = generator_states(r.device);
      for (const auto& g : r.generators) restore(g);
    }
    set_autocast_state(r.autocast);
  }
  ~RecomputeScope() {
    set_autocast_state(autocast_);
    for (const auto& g : current_) restore(g);
  }
  RecomputeScope(const RecomputeScope&) = delete;
  RecomputeScope& operator=(const RecomputeScope&) = delete;

 private:
  AutocastState autocast_;
  std::vector<GeneratorState> current_;
};

// Copies of options.keep, written back when the recompute's backward is over (also on an error):
// the recompute's graph may have saved them (BatchNorm saves its running statistics), so they
// cannot change before it has run.
class KeptTensors {
 public:
  explicit KeptTensors(const std::vector<at::Tensor>& keep) {
    at::NoGradGuard no_grad;
    for (const auto& t : keep) kept_.emplace_back(t, t.clone());
  }
  ~KeptTensors() {
    at::NoGradGuard no_grad;
    for (auto& [t, copy] : kept_) t.copy_(copy);
  }
  KeptTensors(const KeptTensors&) = delete;
  KeptTensors& operator=(const KeptTensors&) = delete;

 private:
  std::vector<std::pair<at::Tensor, at::Tensor>> kept_;
};

struct CheckpointNode : torch::autograd::Function<CheckpointNode> {
  static variable_list forward(AutogradContext* ctx, c10::intrusive_ptr<Recompute> r,
                               at::TensorList inputs) {
    if (r->options.random) {
      if (capturing(r->device)) {
        throw Error(
            "a block recomputed in backward draws random numbers (dropout), and a CUDA "
            "graph capture cannot replay them; set model.dropout=0 or "
            "train.cuda_graph=off",
            "train.activation_checkpointing");
      }
      r->generators = generator_states(r->device);
    }
    r->autocast = autocast_state();
    ctx->set_materialize_grads(false);
    ctx->save_for_backward(inputs.vec());
    variable_list out = run_uncached(r->fn, inputs.vec());  // autograd is off in forward
    ctx->saved_data["recompute"] = at::IValue::make_capsule(std::move(r));
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto r =
        c10::static_intrusive_pointer_cast<Recompute>(ctx->saved_data["recompute"].toCapsule());
    variable_list inputs;
    for (const auto& t : ctx->get_saved_variables()) {
      at::Tensor d = t.detach();
      if (t.requires_grad()) d.requires_grad_(true);
      inputs.push_back(d);
    }
    KeptTensors kept(r->options.keep);
    variable_list outputs;
    {
      RecomputeScope scope(*r);
      at::AutoGradMode grad_mode(true);
      outputs = run_uncached(r->fn, inputs);
    }
    if (outputs.size() != grads.size())
      throw Error("a checkpointed block returned " + std::to_string(outputs.size()) +
                  " tensors when recomputed, " + std::to_string(grads.size()) +
                  " in the forward pass (internal error)");
    variable_list roots, root_grads;
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (!grads[i].defined() || !outputs[i].requires_grad()) continue;
      roots.push_back(outputs[i]);
      root_grads.push_back(grads[i]);
    }
    if (!roots.empty()) torch::autograd::backward(roots, root_grads);
    variable_list result{at::Tensor()};  // the Recompute argument has no gradient
    for (const auto& d : inputs) result.push_back(d.requires_grad() ? d.grad() : at::Tensor());
    return result;
  }
};

}  // namespace

std::vector<at::Tensor> checkpointed(const CheckpointFn& fn, const std::vector<at::Tensor>& inputs,
                                     CheckpointOptions options) {
  bool any_grad = false;
  for (const auto& t : inputs) any_grad = any_grad || (t.defined() && t.requires_grad());
  if (!at::GradMode::is_enabled() || !any_grad) return fn(inputs);
  auto r = c10::make_intrusive<Recompute>();
  r->fn = fn;
  r->options = std::move(options);
  r->device = inputs.front().device();
  return CheckpointNode::apply(std::move(r), at::TensorList(inputs));
}

void set_activation_checkpointing(Model& model, const std::string& name,
                                  ActivationCheckpointing mode) {
  if (model.set_activation_checkpointing(mode)) return;
  throw Error(std::string("is ") + to_string(mode) + " but the model " + name +
                  " has no blocks to checkpoint (gpt and resnet18/50 have); set off",
              "train.activation_checkpointing");
}

}  // namespace dtrain::detail
