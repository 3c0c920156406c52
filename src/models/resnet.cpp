// Models "resnet18" and "resnet50": torchvision's ResNet (v1.5: in a Bottleneck the stride is on
// the 3x3 conv). Parameter and buffer names match torchvision's state_dict: conv1, bn1,
// layer{1..4}.{i}.conv{1,2,3}, .bn{1,2,3}, .downsample.{0,1}, fc.
// Inputs (N, C, H, W) with C from the data (1 for MNIST-like, 3 for RGB); outputs (N, classes).
// With model.channels_last the 4-d weights are stored channels-last and inputs are converted in
// forward (NHWC convolutions on GPUs).
// Training FLOPs per sample (for MFU): 3 × 2 × the multiply-adds of every conv and the fc layer
// for the data's image size (forward, and backward's two products per layer); batch norm,
// ReLU, pooling and the residual adds are not counted.
// On CUDA with model.fused_kernels (channels-last), each BatchNorm with the ReLU and the shortcut
// add after it is one fused op whose output reaches the next block as two uses (Note [fused
// BatchNorm]), and the stem's max-pool is dtrain's kernel (Note [max-pool kernels]); elsewhere
// LibTorch's modules and ops. With model.fused_kernels under autocast the weights are cast in one
// multi-tensor copy at the start of forward (Note [weight casts]).
#include <torch/nn/init.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include "cuda/max_pool.h"
#include "dtrain/config.h"
#include "dtrain/error.h"
#include "dtrain/models.h"
#include "models/activation_checkpoint.h"
#include "models/batch_norm.h"
#include "models/weight_casts.h"

namespace dtrain {
namespace detail {
void register_resnet_models();
}

namespace {

// Every conv of a ResNet pads kernel / 2 (7x7: 3, 3x3: 1, 1x1: 0), as torchvision's do.
torch::nn::Conv2d conv(int64_t in, int64_t out, int64_t kernel, int64_t stride) {
  return torch::nn::Conv2d(
      torch::nn::Conv2dOptions(in, out, kernel).stride(stride).padding(kernel / 2).bias(false));
}

// Multiply-adds of `c` on one h×w input; h and w become its output's.
double conv_macs(const torch::nn::Conv2d& c, int64_t& h, int64_t& w) {
  const auto& o = c->options;
  int64_t* size[2] = {&h, &w};
  for (int d = 0; d < 2; ++d) {
    const int64_t k = (*o.kernel_size())[d], s = (*o.stride())[d];
    *size[d] = (*size[d] + 2 * (k / 2) - k) / s + 1;  // padding k / 2 (conv())
  }
  // Every output value: in_channels × kernel area multiply-adds (one group).
  return static_cast<double>(h * w) * static_cast<double>(c->weight.numel());
}

// c(x) with `casts`'s cast of c's weight where it has one (Note [weight casts]); c made by conv().
at::Tensor convolve(torch::nn::Conv2d c, const at::Tensor& x, const detail::WeightCasts& casts) {
  const at::Tensor& w = casts(c->weight);
  if (w.is_same(c->weight)) return c->forward(x);
  const auto& k = *c->options.kernel_size();
  return at::conv2d(x, w, c->bias, *c->options.stride(), {k[0] / 2, k[1] / 2});  // conv()'s padding
}

torch::nn::BatchNorm2d bn(int64_t c) {
  return torch::nn::BatchNorm2d(torch::nn::BatchNormOptions(c).eps(1e-5).momentum(0.1));
}

// A block's output as the next block takes it: `main` for its convolutions, `shortcut` for its
// identity or downsample path. Where the block's last BatchNorm is fused and forked, the two are
// one storage whose uses' gradients its backward reads apart (Note [fused BatchNorm]); otherwise
// the same tensor twice.
struct Activation {
  at::Tensor main, shortcut;
};

// norm(), returned as two uses when `fork` (models/batch_norm.h: norm_forked).
Activation norm_forked(torch::nn::BatchNorm2d bn, const at::Tensor& x, const at::Tensor& residual,
                       bool relu, const detail::NormMode& mode, bool fork) {
  if (!fork) {
    const at::Tensor y = detail::norm(bn, x, residual, relu, mode);
    return {y, y};
  }
  const auto y = detail::norm_forked(bn, x, residual, relu, mode);
  return {y[0], y[1]};
}

// 1x1 conv (stride) + BN on the shortcut when the shape changes; null otherwise.
torch::nn::Sequential downsample(int64_t in, int64_t out, int64_t stride) {
  if (stride == 1 && in == out) return torch::nn::Sequential(nullptr);
  return torch::nn::Sequential(conv(in, out, 1, stride), bn(out));
}

class Block : public torch::nn::Module {
 public:
  // The block on x (its two uses); the output forked for the next block when `fork`; the
  // convolutions take their weights' `casts` where there are, the BatchNorms run as `mode` says.
  virtual Activation forward(const Activation& x, bool fork, const detail::WeightCasts& casts,
                             const detail::NormMode& mode) = 0;
  // Appends the block's convolutions' weights.
  virtual void conv_weights(std::vector<at::Tensor>& out) const = 0;
  // Multiply-adds on one h×w input; h and w become the output's.
  virtual double macs(int64_t& h, int64_t& w) const = 0;
};

// The shortcut's multiply-adds on one h×w input (h, w unchanged: the main path sets them).
double downsample_macs(const torch::nn::Sequential& d, int64_t h, int64_t w) {
  return d ? conv_macs(torch::nn::Conv2d(d->ptr<torch::nn::Conv2dImpl>(0)), h, w) : 0.0;
}

// The downsample's convolution (d not null).
torch::nn::Conv2d downsample_conv(const torch::nn::Sequential& d) {
  return torch::nn::Conv2d(std::dynamic_pointer_cast<torch::nn::Conv2dImpl>(d->ptr(0)));
}

// The shortcut's output: x itself, or the downsample's BN(conv(x)).
at::Tensor shortcut(const torch::nn::Sequential& d, const at::Tensor& x,
                    const detail::NormMode& mode, const detail::WeightCasts& casts) {
  if (!d) return x;
  const at::Tensor c = convolve(downsample_conv(d), x, casts);
  const auto b = std::dynamic_pointer_cast<torch::nn::BatchNorm2dImpl>(d->ptr(1));
  return detail::norm(torch::nn::BatchNorm2d(b), c, at::Tensor(), false, mode);
}

// Two 3x3 convs: relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)).
class BasicBlock : public Block {
 public:
  static constexpr int64_t kExpansion = 1;
  BasicBlock(int64_t in, int64_t planes, int64_t stride) {
    conv1_ = register_module("conv1", conv(in, planes, 3, stride));
    bn1_ = register_module("bn1", bn(planes));
    conv2_ = register_module("conv2", conv(planes, planes, 3, 1));
    bn2_ = register_module("bn2", bn(planes));
    downsample_ = downsample(in, planes * kExpansion, stride);
    if (downsample_) register_module("downsample", downsample_);
  }
  Activation forward(const Activation& x, bool fork, const detail::WeightCasts& casts,
                     const detail::NormMode& mode) override {
    const at::Tensor out =
        detail::norm(bn1_, convolve(conv1_, x.main, casts), at::Tensor(), true, mode);
    return norm_forked(bn2_, convolve(conv2_, out, casts),
                       shortcut(downsample_, x.shortcut, mode, casts), true, mode, fork);
  }
  void conv_weights(std::vector<at::Tensor>& out) const override {
    for (const auto* c : {&conv1_, &conv2_}) out.push_back((*c)->weight);
    if (downsample_) out.push_back(downsample_conv(downsample_)->weight);
  }
  double macs(int64_t& h, int64_t& w) const override {
    const double shortcut = downsample_macs(downsample_, h, w);
    return shortcut + conv_macs(conv1_, h, w) + conv_macs(conv2_, h, w);
  }

 private:
  torch::nn::Conv2d conv1_{nullptr}, conv2_{nullptr};
  torch::nn::BatchNorm2d bn1_{nullptr}, bn2_{nullptr};
  torch::nn::Sequential downsample_{nullptr};
};

// 1x1 reduce, 3x3 (carries the stride), 1x1 expand by 4, plus the shortcut.
class Bottleneck : public Block {
 public:
  static constexpr int64_t kExpansion = 4;
  Bottleneck(int64_t in, int64_t planes, int64_t stride) {
    const int64_t width = planes;  // base width 64, one group
    conv1_ = register_module("conv1", conv(in, width, 1, 1));
    bn1_ = register_module("bn1", bn(width));
    conv2_ = register_module("conv2", conv(width, width, 3, stride));
    bn2_ = register_module("bn2", bn(width));
    conv3_ = register_module("conv3", conv(width, planes * kExpansion, 1, 1));
    bn3_ = register_module("bn3", bn(planes * kExpansion));
    downsample_ = downsample(in, planes * kExpansion, stride);
    if (downsample_) register_module("downsample", downsample_);
  }
  Activation forward(const Activation& x, bool fork, const detail::WeightCasts& casts,
                     const detail::NormMode& mode) override {
    at::Tensor out = detail::norm(bn1_, convolve(conv1_, x.main, casts), at::Tensor(), true, mode);
    out = detail::norm(bn2_, convolve(conv2_, out, casts), at::Tensor(), true, mode);
    return norm_forked(bn3_, convolve(conv3_, out, casts),
                       shortcut(downsample_, x.shortcut, mode, casts), true, mode, fork);
  }
  void conv_weights(std::vector<at::Tensor>& out) const override {
    for (const auto* c : {&conv1_, &conv2_, &conv3_}) out.push_back((*c)->weight);
    if (downsample_) out.push_back(downsample_conv(downsample_)->weight);
  }
  double macs(int64_t& h, int64_t& w) const override {
    const double shortcut = downsample_macs(downsample_, h, w);
    return shortcut + conv_macs(conv1_, h, w) + conv_macs(conv2_, h, w) + conv_macs(conv3_, h, w);
  }

 private:
  torch::nn::Conv2d conv1_{nullptr}, conv2_{nullptr}, conv3_{nullptr};
  torch::nn::BatchNorm2d bn1_{nullptr}, bn2_{nullptr}, bn3_{nullptr};
  torch::nn::Sequential downsample_{nullptr};
};

// Stem (7x7/2 conv, BN, ReLU, 3x3/2 max-pool), four stages, global average pool, fc.
class ResNet : public Model {
 public:
  template <typename B>
  static std::shared_ptr<ResNet> build(const std::string& name, const std::vector<int64_t>& layers,
                                       const std::vector<int64_t>& image, int64_t classes,
                                       bool channels_last, bool fused) {
    auto net = std::shared_ptr<ResNet>(new ResNet(name, image, channels_last, fused));
    int64_t in = 64;
    const int64_t planes[4] = {64, 128, 256, 512};
    for (int s = 0; s < 4; ++s) {
      torch::nn::ModuleList stage;
      for (int64_t i = 0; i < layers[s]; ++i) {
        const int64_t stride = (s > 0 && i == 0) ? 2 : 1;
        auto block = std::make_shared<B>(in, planes[s], stride);
        in = planes[s] * B::kExpansion;
        stage->push_back(block);
        net->blocks_.push_back(block);
      }
      net->register_module("layer" + std::to_string(s + 1), stage);
    }
    net->fc_ = net->register_module("fc", torch::nn::Linear(in, classes));
    net->init_weights();
    if (channels_last) net->to_channels_last();
    return net;
  }

  at::Tensor forward(const at::Tensor& inputs) override {
    if (inputs.dim() != 4) {
      throw Error("resnet needs image batches (N, C, H, W); got a " + std::to_string(inputs.dim()) +
                      "-d tensor",
                  "model.name");
    }
    at::Tensor x = channels_last_ ? inputs.contiguous(at::MemoryFormat::ChannelsLast) : inputs;
    // With the fused kernels, every convolution's (and fc's) weight cast to autocast's dtype at
    // once, when autocast is on (Note [weight casts]).
    const detail::WeightCasts casts =
        fused_ ? detail::WeightCasts(cast_weights(), inputs.device()) : detail::WeightCasts();
    const detail::NormMode mode{fused_, sync_.get()};
    x = detail::norm(bn1_, convolve(conv1_, x, casts), at::Tensor(), true, mode);
    x = fused_ && detail::max_pool_applies(x, 3, 2, 1) ? detail::max_pool(x, 3, 2, 1)
                                                       : at::max_pool2d(x, {3, 3}, {2, 2}, {1, 1});
    Activation a{x, x};
    for (size_t i = 0; i < blocks_.size(); ++i) {
      Block* b = blocks_[i].get();
      if (!checkpoint_) {
        a = b->forward(a, /*fork=*/i + 1 < blocks_.size(), casts, mode);
        continue;
      }
      // Only the block's input is kept; it runs again in backward, its BatchNorms' running
      // statistics left as this forward pass set them (Note [activation checkpointing]), with
      // autocast's casts (the recomputation has no `casts`, Note [weight casts]).
      const at::Tensor y = detail::checkpointed(
          [b, mode](const std::vector<at::Tensor>& in) {
            return std::vector<at::Tensor>{
                b->forward({in[0], in[0]}, false, detail::WeightCasts(), mode).main};
          },
          {a.main}, {/*random=*/false, b->buffers()})[0];
      a = {y, y};
    }
    // The mean over H and W keeps nothing for backward (adaptive_avg_pool2d kept its whole
    // input: 25 MB a step for ResNet-50 at batch 128, the last block's output, kept for nothing).
    x = a.main.mean({2, 3});                                     // (N, features)
    return at::linear(x, casts(fc_->weight), casts(fc_->bias));  // (N, classes)
  }

  double train_flops_per_sample() const override { return 3 * 2 * forward_macs(); }
  // The stem is a convolution: under autocast it takes its input in the autocast dtype anyway.
  PixelInputs pixel_inputs() const override {
    return {true, channels_last_ ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous};
  }
  // Each residual block (BasicBlock, Bottleneck) keeps its input: one activation per block.
  bool has_blocks() const override { return true; }
  bool set_activation_checkpointing(ActivationCheckpointing mode) override {
    checkpoint_ = mode == ActivationCheckpointing::kBlocks;
    return true;
  }
  bool set_batch_norm_sync(Communicator* comm) override {
    sync_ = comm ? std::make_unique<detail::BatchNormSync>(*comm) : nullptr;
    return true;
  }

 private:
  // image: the samples' (C, H, W).
  ResNet(const std::string& name, const std::vector<int64_t>& image, bool channels_last, bool fused)
      : Model("dtrain." + name),
        channels_last_(channels_last),
        fused_(fused),
        height_(image[1]),
        width_(image[2]) {
    conv1_ = register_module("conv1", conv(image[0], 64, 7, 2));
    bn1_ = register_module("bn1", bn(64));
  }

  // torchvision: Kaiming normal (fan_out, ReLU) for convs; BN weight 1, bias 0; fc keeps
  // nn.Linear's default.
  void init_weights() {
    for (auto& m : modules(/*include_self=*/false)) {
      if (auto* c = m->as<torch::nn::Conv2d>()) {
        torch::nn::init::kaiming_normal_(c->weight, 0.0, torch::kFanOut, torch::kReLU);
      } else if (auto* b = m->as<torch::nn::BatchNorm2d>()) {
        torch::nn::init::ones_(b->weight);
        torch::nn::init::zeros_(b->bias);
      }
    }
  }

  // The weights cast at the start of forward: every convolution's and fc's.
  std::vector<at::Tensor> cast_weights() const {
    std::vector<at::Tensor> w{conv1_->weight};
    for (const auto& block : blocks_) block->conv_weights(w);
    w.push_back(fc_->weight);
    w.push_back(fc_->bias);
    return w;
  }

  // Multiply-adds of one sample's forward pass: the stem, the 3x3/2 max-pool's new size, the
  // blocks, and the fc layer on the pooled features.
  double forward_macs() const {
    int64_t h = height_, w = width_;
    double macs = conv_macs(conv1_, h, w);
    h = (h + 2 - 3) / 2 + 1, w = (w + 2 - 3) / 2 + 1;
    for (const auto& block : blocks_) macs += block->macs(h, w);
    return macs + static_cast<double>(fc_->weight.numel());
  }

  // As model.to(memory_format=torch.channels_last): every 4-d parameter and buffer.
  void to_channels_last() {
    at::NoGradGuard no_grad;
    for (auto& p : parameters()) {
      if (p.dim() == 4) p.set_data(p.contiguous(at::MemoryFormat::ChannelsLast));
    }
    for (auto& b : buffers()) {
      if (b.dim() == 4) b.set_data(b.contiguous(at::MemoryFormat::ChannelsLast));
    }
  }

  bool channels_last_;
  bool fused_;                                   // model.fused_kernels
  bool checkpoint_ = false;                      // train.activation_checkpointing: blocks
  std::unique_ptr<detail::BatchNormSync> sync_;  // model.sync_batch_norm on several ranks
  int64_t height_, width_;
  torch::nn::Conv2d conv1_{nullptr};
  torch::nn::BatchNorm2d bn1_{nullptr};
  std::vector<std::shared_ptr<Block>> blocks_;
  torch::nn::Linear fc_{nullptr};
};

template <typename B>
std::shared_ptr<Model> make_resnet(const char* name, const std::vector<int64_t>& layers,
                                   const ModelConfig& c, const DataSpec& data) {
  if (data.input_shape.size() != 3 || data.input_dtype != at::kFloat) {
    throw Error(std::string(name) + " needs float image samples (C, H, W); this dataset gives " +
                    std::string(at::toString(data.input_dtype)) + " samples of " +
                    std::to_string(data.input_shape.size()) + " dims",
                "model.name");
  }
  if (data.num_classes < 1) {
    throw Error(std::string(name) + " is a classifier; this dataset has no classes", "model.name");
  }
  return ResNet::build<B>(name, layers, data.input_shape, data.num_classes, c.channels_last,
                          c.fused_kernels);
}

}  // namespace

namespace detail {
void register_resnet_models() {
  register_model(
      "resnet18",
      [](const ModelConfig& c, const DataSpec& d) {
        return make_resnet<BasicBlock>("resnet18", {2, 2, 2, 2}, c, d);
      },
      "torchvision's ResNet-18 (model.channels_last), for images",
      std::vector<std::string>{"model.channels_last", "model.fused_kernels",
                               "model.sync_batch_norm"});
  register_model(
      "resnet50",
      [](const ModelConfig& c, const DataSpec& d) {
        return make_resnet<Bottleneck>("resnet50", {3, 4, 6, 3}, c, d);
      },
      "torchvision's ResNet-50 v1.5 (model.channels_last), for images",
      std::vector<std::string>{"model.channels_last", "model.fused_kernels",
                               "model.sync_batch_norm"});
}
}  // namespace detail

}  // namespace dtrain
