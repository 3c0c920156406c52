// A model's weights under its PyTorch twin's names (Note [weight names], weights.h), in the file
// format of torch.save (checkpoint/torch_file.h).
#include "checkpoint/weights.h"

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <cctype>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "checkpoint/torch_file.h"
#include "dtrain/error.h"
#include "util/format.h"
#include "util/fs.h"

namespace dtrain::detail {
namespace {

// One entry of the state_dict: the twin's name and the model's tensor. A tied entry (gpt's
// lm_head.weight) is the same tensor as another entry, under a second name.
struct Entry {
  std::string name;
  at::Tensor tensor;
  bool tied = false;
  std::string tied_to;  // the twin's name of the entry it is tied to
};

// "conv12.weight" -> "convs.12.weight" for prefix "conv" and list "convs"; other names as they
// are.
std::string indexed(const std::string& name, const std::string& prefix, const std::string& list) {
  if (name.compare(0, prefix.size(), prefix) != 0) return name;
  size_t end = prefix.size();
  while (end < name.size() && std::isdigit(static_cast<unsigned char>(name[end]))) ++end;
  if (end == prefix.size() || end >= name.size() || name[end] != '.') return name;
  return list + "." + name.substr(prefix.size(), end - prefix.size()) + name.substr(end);
}

// The twin's name (Note [weight names]) of dtrain's parameter or buffer `name` in a model whose
// Module::name() is `model`.
std::string twin_name(const std::string& model, const std::string& name) {
  if (model == "dtrain.mlp") return indexed(name, "fc", "layers");
  if (model == "dtrain.cnn") return indexed(indexed(name, "conv", "convs"), "bn", "norms");
  if (model == "dtrain.gpt") return "transformer." + name;
  return name;
}

// Entries the twin has as well, tied to another one: (name, tied to) (Note [weight names]).
std::vector<std::pair<std::string, std::string>> tied_names(const std::string& model) {
  if (model == "dtrain.gpt") return {{"lm_head.weight", "transformer.wte.weight"}};
  return {};
}

std::vector<Entry> entries(const std::string& kind, const NamedTensors& tensors) {
  std::vector<Entry> out;
  for (const auto& [name, t] : tensors) out.push_back({twin_name(kind, name), t, false, {}});
  for (const auto& [name, target] : tied_names(kind)) {
    for (size_t k = 0; k < out.size(); ++k) {
      if (out[k].name == target) {
        out.push_back({name, out[k].tensor, true, target});
        break;
      }
    }
  }
  return out;
}

std::vector<Entry> entries(Model& model) {
  NamedTensors tensors;
  for (const auto& p : model.named_parameters()) tensors.emplace_back(p.key(), p.value());
  for (const auto& b : model.named_buffers()) tensors.emplace_back(b.key(), b.value());
  return entries(model.name(), tensors);
}

std::string dtype_str(const at::Tensor& t) { return at::toString(t.scalar_type()); }

}  // namespace

void weights_to(const std::string& model_kind, const NamedTensors& tensors, const ByteSink& out) {
  NamedTensors named;
  for (const Entry& e : entries(model_kind, tensors)) named.emplace_back(e.name, e.tensor);
  torch_save_to(named, out);
}

std::string weights_bytes(const std::string& model_kind, const NamedTensors& tensors) {
  std::string out;
  weights_to(model_kind, tensors, [&out](const char* data, size_t n) { out.append(data, n); });
  return out;
}

std::string weights_bytes(Model& model) {
  NamedTensors tensors;
  for (const Entry& e : entries(model)) tensors.emplace_back(e.name, e.tensor);
  return torch_save_bytes(tensors);
}

std::vector<std::pair<std::string, at::Tensor>> weight_tensors(Model& model) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& p : model.named_parameters()) out.emplace_back(p.key(), p.value());
  for (const auto& b : model.named_buffers()) out.emplace_back(b.key(), b.value());
  return out;
}

void save_weights(Model& model, const std::string& path) {
  write_file_atomic(path, weights_bytes(model));
}

void load_weights(Model& model, const std::string& path) {
  const NamedTensors file = torch_load_file(path);
  std::map<std::string, at::Tensor> in_file(file.begin(), file.end());
  const std::vector<Entry> want = entries(model);
  std::set<std::string> names;
  for (const Entry& e : want) names.insert(e.name);
  for (const auto& [name, t] : file) {
    if (names.count(name) == 0)
      throw Error("unexpected key " + name + " " + shape_str(t.sizes().vec()) +
                      ": the model has no such parameter or buffer (dtrain's " + model.name() +
                      " has " + std::to_string(want.size()) + " entries, e.g. " +
                      (want.empty() ? std::string("none") : want.front().name) +
                      "; the names are its PyTorch twin's, "
                      "python/dtrain_models.py)",
                  path);
  }
  for (const Entry& e : want) {
    auto it = in_file.find(e.name);
    if (it == in_file.end())
      throw Error("missing key " + e.name + " (" + shape_str(e.tensor.sizes().vec()) + " " +
                      dtype_str(e.tensor) + " in the model)",
                  path);
    const at::Tensor& t = it->second;
    if (t.sizes() != e.tensor.sizes())
      throw Error("key " + e.name + ": shape " + shape_str(t.sizes().vec()) + " in the file, " +
                      shape_str(e.tensor.sizes().vec()) + " in the model",
                  path);
    if (t.scalar_type() != e.tensor.scalar_type())
      throw Error("key " + e.name + ": dtype " + dtype_str(t) + " in the file, " +
                      dtype_str(e.tensor) + " in the model",
                  path);
    if (e.tied && !at::equal(t, in_file.at(e.tied_to)))
      throw Error("key " + e.name + " differs from " + e.tied_to + "; dtrain's " + model.name() +
                      " ties them (one tensor), so they must be equal",
                  path);
  }
  at::NoGradGuard no_grad;
  for (const Entry& e : want) {
    if (!e.tied) e.tensor.copy_(in_file.at(e.name));
  }
}

}  // namespace dtrain::detail
