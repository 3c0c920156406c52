// Model "gpt": GPT-2 as nanoGPT and llm.c define it. Token embedding wte (V, C) plus learned
// position embedding wpe (seq_len, C); n_layer pre-LayerNorm blocks of causal self-attention and
// a 4x GELU(tanh) MLP, each added to the residual stream; a final LayerNorm; the language-model
// head is tied to wte (logits = x · wteᵀ, no weight of its own). Parameter names follow nanoGPT
// without the "transformer." prefix: wte, wpe, h.{i}.ln_1, h.{i}.attn.c_attn, h.{i}.attn.c_proj,
// h.{i}.ln_2, h.{i}.mlp.c_fc, h.{i}.mlp.c_proj, ln_f.
// Inputs (B, T) int64 token ids with T <= model.seq_len; outputs (B, T, V) logits.
// Training FLOPs per sample (for MFU), T = the data's tokens per sample: nanoGPT's estimate_mfu
// (PaLM's), (6·N + 12·L·C·T)·T with N every parameter but wpe (wte counts: it is the head too);
// and llm.c's, (6·N + 6·L·C·T)·T with N every parameter.
#include <torch/nn/init.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <cmath>
#include <limits>
#include <tuple>
#include <utility>

#include "cuda/fused_head.h"
#include "cuda/fused_linear.h"
#include "cuda/fused_mlp.h"
#include "cuda/fused_norm.h"
#include "dtrain/config.h"
#include "dtrain/error.h"
#include "dtrain/log.h"
#include "dtrain/models.h"
#include "models/activation_checkpoint.h"
#include "util/torch_compat.h"

namespace dtrain {
namespace detail {
void register_gpt_models();
}

namespace {

constexpr double kInitStd = 0.02;

torch::nn::Linear make_linear(int64_t in, int64_t out, double std) {
  torch::nn::Linear l(torch::nn::LinearOptions(in, out).bias(true));
  torch::nn::init::normal_(l->weight, 0.0, std);
  torch::nn::init::zeros_(l->bias);
  return l;
}

// A Linear layer on (B, T, C) activations through at::linear, which flattens them and runs one
// GEMM with the bias added in its epilogue. (torch::nn::Linear::forward does a batched matmul and
// then a separate broadcast add of the bias: 48 extra strided kernels per GPT-2 step, ~11% of
// its GPU time on an H200.)
// On CUDA with `fused`, dtrain's Linear (the same GEMMs, the bias gradient by its own kernel:
// Note [Linear bias gradient]).
at::Tensor linear(const torch::nn::Linear& l, const at::Tensor& x, bool fused) {
  if (fused && detail::fused_linear_applies(x, l->weight, l->bias))
    return detail::fused_linear(x, l->weight, l->bias);
  return at::linear(x, l->weight, l->bias);
}

torch::nn::LayerNorm make_layer_norm(int64_t c) {
  return torch::nn::LayerNorm(torch::nn::LayerNormOptions({c}).eps(1e-5));
}

// Multi-head causal self-attention with one fused q/k/v projection: (B, T, C) -> (B, T, C).
class CausalSelfAttention : public torch::nn::Module {
 public:
  CausalSelfAttention(int64_t n_embd, int64_t n_head, double dropout, double proj_std)
      : n_embd_(n_embd), n_head_(n_head), dropout_(dropout) {
    c_attn_ = register_module("c_attn", make_linear(n_embd, 3 * n_embd, kInitStd));
    c_proj_ = register_module("c_proj", make_linear(n_embd, n_embd, proj_std));
  }

  at::Tensor forward(const at::Tensor& x, bool fused) {  // (B, T, C)
    const int64_t b = x.size(0), t = x.size(1), c = x.size(2);
    const int64_t d = c / n_head_;
    const auto qkv = linear(c_attn_, x, fused).split(n_embd_, 2);          // 3 x (B, T, C)
    const at::Tensor q = qkv[0].view({b, t, n_head_, d}).transpose(1, 2);  // (B, H, T, D)
    const at::Tensor k = qkv[1].view({b, t, n_head_, d}).transpose(1, 2);  // (B, H, T, D)
    const at::Tensor v = qkv[2].view({b, t, n_head_, d}).transpose(1, 2);  // (B, H, T, D)
    at::Tensor y;
    if (dropout_ > 0 && is_training()) {
      // Dropout on the attention weights (as nanoGPT's SDPA call with dropout_p): written out,
      // since the compat wrapper has no dropout.
      at::Tensor att = at::matmul(q, k.transpose(-2, -1)).mul(1.0 / std::sqrt(double(d)));
      const at::Tensor future =
          at::ones({t, t}, x.options().dtype(at::kBool)).triu(1);  // (T, T), true above diagonal
      att = at::softmax(att.masked_fill(future, -std::numeric_limits<double>::infinity()), -1);
      att = at::dropout(att, dropout_, /*train=*/true);  // (B, H, T, T)
      y = at::matmul(att, v);
    } else {
      y = compat::scaled_dot_product_attention(q, k, v, /*is_causal=*/true);  // (B, H, T, D)
    }
    y = y.transpose(1, 2).contiguous().view({b, t, c});  // (B, T, C)
    y = linear(c_proj_, y, fused);
    if (dropout_ > 0) y = at::dropout(y, dropout_, is_training());
    return y;
  }

 private:
  int64_t n_embd_, n_head_;
  double dropout_;
  torch::nn::Linear c_attn_{nullptr}, c_proj_{nullptr};
};

// Position-wise MLP: (B, T, C) -> (B, T, 4C) -> GELU(tanh) -> (B, T, C).
class Mlp : public torch::nn::Module {
 public:
  Mlp(int64_t n_embd, double dropout, double proj_std) : dropout_(dropout) {
    c_fc_ = register_module("c_fc", make_linear(n_embd, 4 * n_embd, kInitStd));
    c_proj_ = register_module("c_proj", make_linear(4 * n_embd, n_embd, proj_std));
  }
  // fused_mlp: both GEMMs with the GELU in their epilogues (Note [MLP GEMM epilogues]).
  at::Tensor forward(const at::Tensor& x, bool fused, bool fused_mlp) {
    const at::Tensor &fw = c_fc_->weight, &fb = c_fc_->bias;
    const at::Tensor &pw = c_proj_->weight, &pb = c_proj_->bias;
    at::Tensor y;
    if (fused && fused_mlp && detail::fused_mlp_applies(x, fw, fb, pw, pb))
      y = detail::fused_mlp(x, fw, fb, pw, pb);
    else
      y = linear(c_proj_, at::gelu(linear(c_fc_, x, fused), "tanh"), fused);
    if (dropout_ > 0) y = at::dropout(y, dropout_, is_training());
    return y;
  }

 private:
  double dropout_;
  torch::nn::Linear c_fc_{nullptr}, c_proj_{nullptr};
};

// x + attn(ln_1(x)), then x + mlp(ln_2(x)); Gpt::forward runs the pieces so that each residual
// add is fused with the LayerNorm after it (add_norm).
class TransformerBlock : public torch::nn::Module {
 public:
  TransformerBlock(int64_t n_embd, int64_t n_head, double dropout, double proj_std) {
    ln_1_ = register_module("ln_1", make_layer_norm(n_embd));
    attn_ = register_module(
        "attn", std::make_shared<CausalSelfAttention>(n_embd, n_head, dropout, proj_std));
    ln_2_ = register_module("ln_2", make_layer_norm(n_embd));
    mlp_ = register_module("mlp", std::make_shared<Mlp>(n_embd, dropout, proj_std));
  }
  torch::nn::LayerNorm ln_1() const { return ln_1_; }
  torch::nn::LayerNorm ln_2() const { return ln_2_; }
  at::Tensor attn(const at::Tensor& x, bool fused) { return attn_->forward(x, fused); }
  at::Tensor mlp(const at::Tensor& x, bool fused, bool fused_mlp) {
    return mlp_->forward(x, fused, fused_mlp);
  }

 private:
  torch::nn::LayerNorm ln_1_{nullptr}, ln_2_{nullptr};
  std::shared_ptr<CausalSelfAttention> attn_;
  std::shared_ptr<Mlp> mlp_;
};

// (s, ln(s)) with s = x + r (x when r is undefined): one fused kernel on CUDA (Note [fused
// residual LayerNorm]), LibTorch's add and layer_norm elsewhere.
std::pair<at::Tensor, at::Tensor> add_norm(const at::Tensor& x, const at::Tensor& r,
                                           torch::nn::LayerNorm ln, bool fused) {
  if (fused && detail::fused_layer_norm_applies(x, r, ln->weight, ln->bias))
    return detail::fused_residual_layer_norm(x, r, ln->weight, ln->bias, ln->options.eps());
  at::Tensor s = r.defined() ? x + r : x;
  return {s, ln->forward(s)};
}

class Gpt : public Model {
 public:
  Gpt(const ModelConfig& c, int64_t tokens)
      : Model("dtrain.gpt"),
        seq_len_(c.seq_len),
        dropout_(c.dropout),
        layers_(c.n_layer),
        width_(c.n_embd),
        tokens_(tokens),
        fused_(c.fused_kernels),
        fused_mlp_(c.fused_mlp),
        fused_head_(c.fused_head) {
    // GPT-2's init: N(0, 0.02) for weights and embeddings, zero biases, and the two projections
    // into the residual stream scaled by 1/sqrt(2 * n_layer).
    const double proj_std = kInitStd / std::sqrt(2.0 * static_cast<double>(c.n_layer));
    wte_ = register_module("wte", torch::nn::Embedding(c.vocab_size, c.n_embd));
    wpe_ = register_module("wpe", torch::nn::Embedding(c.seq_len, c.n_embd));
    torch::nn::init::normal_(wte_->weight, 0.0, kInitStd);
    torch::nn::init::normal_(wpe_->weight, 0.0, kInitStd);
    torch::nn::ModuleList h;
    for (int64_t i = 0; i < c.n_layer; ++i) {
      blocks_.push_back(
          std::make_shared<TransformerBlock>(c.n_embd, c.n_head, c.dropout, proj_std));
      h->push_back(blocks_.back());
    }
    register_module("h", h);
    ln_f_ = register_module("ln_f", make_layer_norm(c.n_embd));
  }

  at::Tensor forward(const at::Tensor& idx) override {  // (B, T) token ids
    return at::linear(trunk(idx), wte_->weight);        // (B, T, V), head tied to wte
  }

  // On CUDA with model.fused_head: the head and the loss in chunks (Note [fused head and loss]).
  at::Tensor forward_cross_entropy(const at::Tensor& idx, const at::Tensor& targets,
                                   double label_smoothing) override {
    if (!fused_ || !fused_head_ || !detail::fused_head_loss_applies(wte_->weight, targets) ||
        targets.sizes() != idx.sizes())
      return {};
    return detail::fused_head_loss(trunk(idx), wte_->weight, targets, /*chunk_rows=*/0,
                                   label_smoothing);
  }

  double train_flops_per_sample() const override {
    return flops_per_sample(parameter_count() - wpe_->weight.numel(), 12);
  }
  double train_flops_per_sample_llmc() const override {
    return flops_per_sample(parameter_count(), 6);
  }
  // The logits come from the tied head's matmul, which saved its inputs, not its output.
  bool loss_can_reuse_outputs() const override { return true; }
  // Each transformer block keeps its (x, ln_1(x)) pair: 2·B·T·C values per block.
  bool has_blocks() const override { return true; }
  bool set_activation_checkpointing(ActivationCheckpointing mode) override {
    checkpoint_ = mode == ActivationCheckpointing::kBlocks;
    return true;
  }
  // In training: dropout in the blocks.
  bool recompute_draws_random_numbers() const override { return checkpoint_ && dropout_ > 0; }

 private:
  // Everything but the head: (B, T) token ids -> (B, T, C), the final LayerNorm's output.
  at::Tensor trunk(const at::Tensor& idx) {
    if (idx.dim() != 2 || at::isFloatingType(idx.scalar_type())) {
      throw Error("gpt needs (B, T) integer token ids; got a " + std::to_string(idx.dim()) + "-d " +
                      std::string(at::toString(idx.scalar_type())) + " tensor",
                  "model.name");
    }
    const int64_t t = idx.size(1);
    if (t > seq_len_) {
      throw Error("sequence of " + std::to_string(t) + " tokens is longer than the model's " +
                      std::to_string(seq_len_) + " positions",
                  "model.seq_len");
    }
    const at::Tensor pos = at::arange(t, idx.options().dtype(at::kLong));  // (T,)
    at::Tensor x = wte_->forward(idx) + wpe_->forward(pos);                // (B, T, C)
    if (dropout_ > 0) x = at::dropout(x, dropout_, is_training());
    // y: the normalized input of the next sub-layer; x: the residual stream.
    at::Tensor y;
    std::tie(x, y) =
        add_norm(x, at::Tensor(), blocks_.empty() ? ln_f_ : blocks_[0]->ln_1(), fused_);
    for (size_t i = 0; i < blocks_.size(); ++i) {
      if (!checkpoint_) {
        std::tie(x, y) = block_forward(i, x, y);
        continue;
      }
      // Only (x, y) is kept; the block runs again in backward (Note [activation checkpointing]).
      const auto out = detail::checkpointed(
          [this, i](const std::vector<at::Tensor>& in) {
            const auto [s, n] = block_forward(i, in[0], in[1]);
            return std::vector<at::Tensor>{s, n};
          },
          {x, y}, {/*random=*/dropout_ > 0 && is_training(), {}});
      x = out[0], y = out[1];
    }
    return y;
  }

  // Block i on the residual stream x and its normalized y = ln_1(x): the stream after the block
  // and its normalization by the next block's ln_1 (ln_f after the last block).
  std::pair<at::Tensor, at::Tensor> block_forward(size_t i, at::Tensor x, at::Tensor y) {
    TransformerBlock& block = *blocks_[i];
    std::tie(x, y) = add_norm(x, block.attn(y, fused_), block.ln_2(), fused_);
    const auto next_norm = i + 1 < blocks_.size() ? blocks_[i + 1]->ln_1() : ln_f_;
    return add_norm(x, block.mlp(y, fused_, fused_mlp_), next_norm, fused_);
  }

  double parameter_count() const {
    double n = 0;
    for (const auto& p : parameters()) n += static_cast<double>(p.numel());
    return n;
  }
  // (6·N + attention·L·C·T) FLOPs per token, times T tokens.
  double flops_per_sample(double n, double attention) const {
    const double t = static_cast<double>(tokens_);
    return (6 * n + attention * static_cast<double>(layers_ * width_) * t) * t;
  }

  int64_t seq_len_;
  double dropout_;
  int64_t layers_, width_, tokens_;
  bool fused_;               // model.fused_kernels
  bool fused_mlp_;           // model.fused_mlp
  bool fused_head_;          // model.fused_head
  bool checkpoint_ = false;  // train.activation_checkpointing: blocks
  torch::nn::Embedding wte_{nullptr}, wpe_{nullptr};
  std::vector<std::shared_ptr<TransformerBlock>> blocks_;
  torch::nn::LayerNorm ln_f_{nullptr};
};

std::shared_ptr<Model> make_gpt(const ModelConfig& c, const DataSpec& data) {
  if (c.n_embd % c.n_head != 0) {
    throw Error("model.n_embd (" + std::to_string(c.n_embd) + ") must be a multiple of the " +
                    std::to_string(c.n_head) + " heads",
                "model.n_head");
  }
  if (data.input_dtype != at::kLong || data.input_shape.size() != 1) {
    throw Error(
        "gpt needs token sequences (int64 samples of shape [T], e.g. data.synthetic_task "
        "tokens); this dataset gives " +
            std::string(at::toString(data.input_dtype)) + " samples of " +
            std::to_string(data.input_shape.size()) + " dims",
        "model.name");
  }
  if (data.num_classes != c.vocab_size) {
    throw Error("is " + std::to_string(c.vocab_size) + " but the dataset's vocabulary has " +
                    std::to_string(data.num_classes) + " tokens; they must be equal",
                "model.vocab_size");
  }
  if (data.input_shape[0] > c.seq_len) {
    throw Error("is " + std::to_string(c.seq_len) + " but the dataset's sequences have " +
                    std::to_string(data.input_shape[0]) + " tokens",
                "model.seq_len");
  }
  const compat::SdpBackend sdp = c.attention == Attention::kFlash   ? compat::SdpBackend::kFlash
                                 : c.attention == Attention::kCudnn ? compat::SdpBackend::kCudnn
                                 : c.attention == Attention::kEfficient
                                     ? compat::SdpBackend::kEfficient
                                 : c.attention == Attention::kMath ? compat::SdpBackend::kMath
                                                                   : compat::SdpBackend::kAll;
  if (!compat::set_sdp_backend(sdp))
    log::warn(std::string("model.attention ") + to_string(c.attention) +
              " needs LibTorch 2.4 or later (this is " + compat::libtorch_version() +
              "): LibTorch chooses the attention kernel");
  return std::make_shared<Gpt>(c, data.input_shape[0]);
}

}  // namespace

namespace detail {
void register_gpt_models() {
  register_model(
      "gpt", &make_gpt,
      "GPT-2 decoder (model.n_layer, n_head, n_embd, vocab_size, seq_len), for "
      "token sequences",
      std::vector<std::string>{"model.n_layer", "model.n_head", "model.n_embd", "model.vocab_size",
                               "model.seq_len", "model.dropout", "model.attention",
                               "model.fused_kernels", "model.fused_mlp", "model.fused_head"});
}
}  // namespace detail

}  // namespace dtrain
