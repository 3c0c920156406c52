// model.name torchscript: a module written in Python and saved with
// torch.jit.script(m).save(model.path), trained by dtrain like a built-in model.
//
// Note [TorchScript parameters]: the loaded torch::jit::Module keeps its parameters and buffers
// as attributes; TorchScriptModel registers the same tensors (not copies) as torch::nn::Module
// parameters and buffers, in a tree of plain modules that mirrors the scripted one, so that
// named_parameters() reads as Python's state_dict() ("body.0.weight", ...). Everything that
// works on a Model's parameters (the replica check and broadcast, the reducer's gradient hooks,
// the optimizer's in-place updates, checkpoints, model.pt, model.init_weights, Module::to) then
// acts on the tensors the scripted forward reads, since every one of them changes a tensor in
// place or through set_data, which keeps its identity. train()/eval() reach the scripted module.
// A tensor registered under two names (tied weights) is registered once, under its first name,
// so that it is updated once per step.
#include <ATen/ATen.h>
#include <ATen/core/function_schema.h>
#include <ATen/core/grad_mode.h>
#include <torch/csrc/jit/serialization/import.h>
#include <torch/nn/module.h>

#include <sys/stat.h>

#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "dtrain/config.h"
#include "dtrain/error.h"
#include "dtrain/models.h"
#include "util/format.h"

namespace dtrain {
namespace {

std::string where_of(const std::string& path) { return "model.path=" + path; }

// The scripted module of `path` on the CPU; a missing file or one that is not a TorchScript
// archive is an Error naming model.path.
torch::jit::Module load_archive(const std::string& path) {
  if (path.empty())
    throw Error(
        "model.name is torchscript but model.path is empty: set it to the file written in "
        "Python by torch.jit.script(model).save(path)",
        "model.path");
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw Error("file not found", where_of(path));
  if (!S_ISREG(st.st_mode)) throw Error("not a regular file", where_of(path));
  try {
    return torch::jit::load(path, at::Device(at::kCPU));
  } catch (const c10::Error& e) {
    throw Error(
        "not a TorchScript archive (Python writes one with "
        "torch.jit.script(model).save(path); torch.save(model) and torch.save(state_dict) "
        "do not): " +
            detail::first_line(e.what_without_backtrace()),
        where_of(path));
  } catch (const std::exception& e) {
    throw Error("not a TorchScript archive: " + detail::first_line(e.what()), where_of(path));
  }
}

// forward must take one tensor (further arguments need defaults) and return one tensor.
void check_forward(const torch::jit::Module& m, const std::string& path) {
  const auto forward = m.find_method("forward");
  if (!forward) throw Error("the scripted module has no forward method", where_of(path));
  const c10::FunctionSchema& schema = forward->function().getSchema();
  const std::string want =
      "; dtrain calls forward(x: Tensor) -> Tensor, x a batch (N, ...), and "
      "trains on the logits it returns";
  const auto& args = schema.arguments();  // args[0] is self
  std::vector<std::string> required;
  for (size_t i = 1; i < args.size(); ++i)
    if (!args[i].default_value()) required.push_back(args[i].name());
  if (args.size() < 2 || required.size() != 1 || required[0] != args[1].name()) {
    std::ostringstream sig;
    sig << schema;
    throw Error("forward takes " + std::to_string(required.size()) +
                    " argument(s) without a default (" + sig.str() + ")" + want,
                where_of(path));
  }
  if (args[1].type()->kind() != c10::TypeKind::TensorType)
    throw Error(
        "forward's argument " + args[1].name() + " is " + args[1].type()->annotation_str() + want,
        where_of(path));
  if (schema.returns().size() != 1 ||
      schema.returns()[0].type()->kind() != c10::TypeKind::TensorType)
    throw Error(
        std::string("forward returns ") +
            (schema.returns().size() == 1 ? schema.returns()[0].type()->annotation_str()
                                          : std::to_string(schema.returns().size()) + " values") +
            want,
        where_of(path));
}

class TorchScriptModel : public Model {
 public:
  TorchScriptModel(torch::jit::Module scripted, const std::string& path)
      : Model("torchscript"), scripted_(std::move(scripted)), path_(path) {
    std::set<const void*> seen;
    mirror(scripted_, *this, seen);
    scripted_.train(true);
  }

  at::Tensor forward(const at::Tensor& inputs) override {
    c10::IValue out = scripted_.forward({inputs});
    if (!out.isTensor())
      throw Error("forward returned " + out.tagKind() + ", not a tensor", where_of(path_));
    return out.toTensor();
  }

  void train(bool on = true) override {
    Model::train(on);
    scripted_.train(on);
  }

  // A batch of two zero samples through forward (eval mode, no gradients, the CPU generator
  // restored): the output must be (2, outputs), or (2, T, outputs) for sequence inputs (2, T).
  void check_output(const DataSpec& data) {
    const int64_t outputs = data.num_classes > 0 ? data.num_classes : data.target_dim;
    std::vector<int64_t> shape = {2};
    shape.insert(shape.end(), data.input_shape.begin(), data.input_shape.end());
    at::Tensor out;
    {
      at::Generator gen = at::detail::getDefaultCPUGenerator();
      at::Tensor rng;
      {
        std::lock_guard<std::mutex> lock(gen.mutex());
        rng = gen.get_state();
      }
      at::NoGradGuard no_grad;
      train(false);
      try {
        out = forward(at::zeros(shape, at::TensorOptions().dtype(data.input_dtype)));
      } catch (const Error&) {
        train(true);
        throw;
      } catch (const std::exception& e) {
        train(true);
        throw Error("forward failed on a batch of shape " + detail::shape_str(shape) + " " +
                        at::toString(data.input_dtype) +
                        " (the data's samples): " + detail::first_line(e.what()),
                    where_of(path_));
      }
      train(true);
      std::lock_guard<std::mutex> lock(gen.mutex());
      gen.set_state(rng);
    }
    const bool sequence = data.input_shape.size() == 1 && data.input_dtype == at::kLong;
    const bool ok = out.size(0) == 2 && out.size(-1) == outputs &&
                    (out.dim() == 2 || (sequence && out.dim() == 3 && out.size(1) == shape[1]));
    if (!ok)
      throw Error(
          "forward maps a batch " + detail::shape_str(shape) + " to " +
              detail::shape_str(out.sizes().vec()) + "; the data needs (N, " +
              std::to_string(outputs) + ")" +
              (sequence ? " or (N, T, " + std::to_string(outputs) + ")" : std::string()) +
              (data.num_classes > 0 ? " logits, one per class" : " outputs, one per target"),
          where_of(path_));
  }

 private:
  // Note [TorchScript parameters].
  static void mirror(const torch::jit::Module& from, torch::nn::Module& into,
                     std::set<const void*>& seen) {
    for (const auto& p : from.named_parameters(/*recurse=*/false))
      if (seen.insert(p.value.unsafeGetTensorImpl()).second)
        into.register_parameter(p.name, p.value, p.value.requires_grad());
    for (const auto& b : from.named_buffers(/*recurse=*/false))
      if (seen.insert(b.value.unsafeGetTensorImpl()).second) into.register_buffer(b.name, b.value);
    for (const auto& c : from.named_children()) {
      auto child = std::make_shared<torch::nn::Module>(c.name);
      mirror(c.value, *child, seen);
      into.register_module(c.name, child);
    }
  }

  torch::jit::Module scripted_;
  std::string path_;
};

}  // namespace

namespace detail {
void register_torchscript_model() {
  register_model(
      "torchscript",
      [](const ModelConfig& c, const DataSpec& d) -> std::shared_ptr<Model> {
        torch::jit::Module scripted = load_archive(c.path);
        check_forward(scripted, c.path);
        auto model = std::make_shared<TorchScriptModel>(std::move(scripted), c.path);
        model->check_output(d);
        return model;
      },
      "a module scripted and saved in Python: torch.jit.script(m).save(model.path)",
      std::vector<std::string>{"model.path"});
}
}  // namespace detail

}  // namespace dtrain
