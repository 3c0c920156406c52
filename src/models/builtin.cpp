// dtrain's built-in models: linear, mlp, cnn (gpt.cpp, resnet.cpp and torchscript.cpp register the
// others).
#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/dropout.h>
#include <torch/nn/functional/pooling.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include "dtrain/config.h"
#include "dtrain/error.h"
#include "dtrain/models.h"
#include "models/batch_norm.h"

namespace dtrain {
namespace {

int64_t flat_size(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

int64_t output_size(const DataSpec& data) {
  if (data.num_classes > 0) return data.num_classes;
  if (data.target_dim > 0) return data.target_dim;
  throw Error("the dataset declares neither classes nor a regression target", "data.format");
}

// One affine map: inputs flattened to (N, F) -> (N, out).
class LinearModel : public Model {
 public:
  LinearModel(int64_t in, int64_t out)
      : Model("dtrain.linear"), fc_(register_module("fc", torch::nn::Linear(in, out))) {}
  at::Tensor forward(const at::Tensor& x) override { return fc_->forward(x.flatten(1)); }

 private:
  torch::nn::Linear fc_;
};

// Fully connected layers with ReLU: (N, F) -> hidden... -> (N, out).
class MlpModel : public Model {
 public:
  MlpModel(int64_t in, const std::vector<int64_t>& hidden, int64_t out, double dropout)
      : Model("dtrain.mlp"), dropout_(dropout) {
    int64_t width = in;
    for (size_t i = 0; i < hidden.size(); ++i) {
      layers_.push_back(
          register_module("fc" + std::to_string(i), torch::nn::Linear(width, hidden[i])));
      width = hidden[i];
    }
    head_ = register_module("head", torch::nn::Linear(width, out));
  }
  at::Tensor forward(const at::Tensor& inputs) override {
    at::Tensor x = inputs.flatten(1);  // (N, F)
    for (auto& l : layers_) {
      x = torch::relu(l->forward(x));
      if (dropout_ > 0)
        x = torch::nn::functional::dropout(
            x, torch::nn::functional::DropoutFuncOptions().p(dropout_).training(is_training()));
    }
    return head_->forward(x);
  }

 private:
  std::vector<torch::nn::Linear> layers_;
  torch::nn::Linear head_{nullptr};
  double dropout_;
};

// Conv blocks (5x5 conv, padding 2, [BatchNorm,] ReLU, 2x2 max-pool) then one hidden FC layer:
// (N, C, H, W) -> (N, channels[-1], H/2^k, W/2^k) -> (N, fc) -> (N, out). With model.batch_norm
// each conv has no bias and a BatchNorm follows it (models/batch_norm.h: model.sync_batch_norm).
class Cnn : public Model {
 public:
  Cnn(const std::vector<int64_t>& input_shape, const std::vector<int64_t>& channels, int64_t fc,
      int64_t out, double dropout, bool batch_norm)
      : Model("dtrain.cnn"), dropout_(dropout) {
    if (input_shape.size() != 3)
      throw Error("cnn needs image inputs (C, H, W); this dataset gives " +
                      std::to_string(input_shape.size()) + "-d samples",
                  "model.name");
    int64_t c = input_shape[0], h = input_shape[1], w = input_shape[2];
    for (size_t i = 0; i < channels.size(); ++i) {
      convs_.push_back(register_module(
          "conv" + std::to_string(i),
          torch::nn::Conv2d(
              torch::nn::Conv2dOptions(c, channels[i], 5).padding(2).bias(!batch_norm))));
      if (batch_norm)
        norms_.push_back(
            register_module("bn" + std::to_string(i),
                            torch::nn::BatchNorm2d(
                                torch::nn::BatchNormOptions(channels[i]).eps(1e-5).momentum(0.1))));
      c = channels[i];
      h /= 2;
      w /= 2;
      if (h < 1 || w < 1)
        throw Error("too many conv blocks for " + std::to_string(input_shape[1]) + "x" +
                        std::to_string(input_shape[2]) + " inputs",
                    "model.channels");
    }
    fc_ = register_module("fc", torch::nn::Linear(c * h * w, fc));
    head_ = register_module("head", torch::nn::Linear(fc, out));
  }
  at::Tensor forward(const at::Tensor& inputs) override {
    at::Tensor x = inputs;  // (N, C, H, W)
    for (size_t i = 0; i < convs_.size(); ++i) {
      x = convs_[i]->forward(x);
      x = norms_.empty()
              ? torch::relu(x)
              : detail::norm(norms_[i], x, at::Tensor(), /*relu=*/true, {false, sync_.get()});
      x = torch::max_pool2d(x, 2);
    }
    x = torch::relu(fc_->forward(x.flatten(1)));  // (N, fc)
    if (dropout_ > 0)
      x = torch::nn::functional::dropout(
          x, torch::nn::functional::DropoutFuncOptions().p(dropout_).training(is_training()));
    return head_->forward(x);
  }
  bool set_batch_norm_sync(Communicator* comm) override {
    if (norms_.empty()) return false;
    sync_ = comm ? std::make_unique<detail::BatchNormSync>(*comm) : nullptr;
    return true;
  }

 private:
  std::vector<torch::nn::Conv2d> convs_;
  std::vector<torch::nn::BatchNorm2d> norms_;    // model.batch_norm
  std::unique_ptr<detail::BatchNormSync> sync_;  // model.sync_batch_norm on several ranks
  torch::nn::Linear fc_{nullptr}, head_{nullptr};
  double dropout_;
};

}  // namespace

namespace detail {
void register_gpt_models();         // models/gpt.cpp
void register_resnet_models();      // models/resnet.cpp
void register_torchscript_model();  // models/torchscript.cpp

void register_builtin_models() {
  register_gpt_models();
  register_resnet_models();
  register_torchscript_model();
  register_model(
      "linear",
      [](const ModelConfig&, const DataSpec& d) -> std::shared_ptr<Model> {
        return std::make_shared<LinearModel>(flat_size(d.input_shape), output_size(d));
      },
      "one linear layer on flattened inputs", std::vector<std::string>{});
  register_model(
      "mlp",
      [](const ModelConfig& c, const DataSpec& d) -> std::shared_ptr<Model> {
        return std::make_shared<MlpModel>(flat_size(d.input_shape), c.hidden, output_size(d),
                                          c.dropout);
      },
      "fully connected ReLU layers (model.hidden)",
      std::vector<std::string>{"model.hidden", "model.dropout"});
  register_model(
      "cnn",
      [](const ModelConfig& c, const DataSpec& d) -> std::shared_ptr<Model> {
        return std::make_shared<Cnn>(d.input_shape, c.channels, c.fc, output_size(d), c.dropout,
                                     c.batch_norm);
      },
      "5x5 conv [+ BatchNorm] + max-pool blocks (model.channels), then model.fc, for images",
      std::vector<std::string>{"model.channels", "model.fc", "model.dropout", "model.batch_norm",
                               "model.sync_batch_norm"});
}
}  // namespace detail

}  // namespace dtrain
