// Models: a process-wide registry from name to factory. dtrain registers linear, mlp, cnn, gpt,
// resnet18, resnet50 and torchscript (a module scripted in Python, model.path) on first use
// (`dtrain --help` lists them); users register their own from C++ before training starts
// (examples/custom_model.cpp).
// Invariants (tests/unit/test_registry.cpp): a factory called with the same config and data spec
// builds the same architecture (parameter names, shapes, order), so every rank builds the same
// model and then takes rank 0's values (the Trainer checks and broadcasts); an unknown name is an
// Error naming model.name and the registered names.
#pragma once

#include <torch/nn/module.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dtrain/comm.h"
#include "dtrain/config.h"
#include "dtrain/data/dataset.h"

namespace dtrain {

// A trainable model: inputs (N, ...) -> outputs (N, classes) or (N, target_dim).
class Model : public torch::nn::Module {
 public:
  Model() = default;
  // `name` becomes Module::name(). dtrain's built-in models are named "dtrain.<model>"; the name
  // selects the PyTorch twin's weight names when weights are saved for Python or loaded from it
  // (model.pt, model.init_weights).
  explicit Model(std::string name) : torch::nn::Module(std::move(name)) {}
  virtual at::Tensor forward(const at::Tensor& inputs) = 0;
  // FLOPs of one training sample (forward and backward, multiply-adds counted as 2), for MFU;
  // 0 when unknown. dtrain's GPT and ResNets know theirs.
  virtual double train_flops_per_sample() const { return 0; }
  // The same counted as llm.c counts a GPT's (every parameter in N, attention 6·L·C·T per token
  // instead of PaLM's 12·L·C·T), to compare MFU with llm.c; 0 for models without that count.
  virtual double train_flops_per_sample_llmc() const { return 0; }
  // Whether the loss's backward may overwrite the outputs with their gradient (saving one
  // outputs-sized buffer at the step's peak): true only when no operation of forward saved the
  // outputs for its own backward (a final matmul or linear saves its inputs; ReLU, tanh, sigmoid
  // or softmax save their outputs and must answer false). dtrain's GPT answers true.
  virtual bool loss_can_reuse_outputs() const { return false; }
  // The mean cross-entropy of forward(inputs) for class-id `targets`, from a model that computes
  // it without holding all of its outputs at once: the same value and gradients. dtrain calls it
  // for training steps with train.loss=cross_entropy; an undefined tensor (the default) means the
  // model has no such path, and dtrain calls forward and computes the loss itself. dtrain's GPT
  // on CUDA runs its tied head and the loss in chunks of rows (Note [fused head and loss]).
  // `label_smoothing`: train.label_smoothing, PyTorch's cross_entropy(label_smoothing=).
  virtual at::Tensor forward_cross_entropy(const at::Tensor& inputs, const at::Tensor& targets,
                                           double label_smoothing) {
    (void)inputs;
    (void)targets;
    (void)label_smoothing;
    return {};
  }
  // train.activation_checkpointing. kBlocks: while autograd records (training), each of the
  // model's blocks keeps only its inputs for backward and runs its forward again inside the
  // backward pass to get its gradients (Note [activation checkpointing] in
  // src/models/activation_checkpoint.h): the same gradients and parameter updates, fewer
  // activations held. kOff: every activation is kept. Returns false when the model has no such
  // blocks (the default for any mode but kOff); the Trainer then refuses the run with an Error
  // naming the key. dtrain's GPT checkpoints each transformer block, its ResNets each residual
  // block.
  virtual bool set_activation_checkpointing(ActivationCheckpointing mode) {
    return mode == ActivationCheckpointing::kOff;
  }
  // Whether the model has such blocks: what set_activation_checkpointing(kBlocks) would answer,
  // asked without setting anything (the memory ladder's advice). False by default.
  virtual bool has_blocks() const { return false; }
  // Whether a block that backward runs again draws random numbers (dropout while training): the
  // recompute restores the generators' states so that it draws the same ones, which a CUDA graph
  // capture cannot do, so such a step is not captured (train.cuda_graph). False by default.
  virtual bool recompute_draws_random_numbers() const { return false; }
  // model.sync_batch_norm (Note [BatchNorm on N ranks], src/dist/batch_norm_buffers.h). With
  // `comm` (a run of several ranks), each BatchNorm's training forward takes its mean and variance
  // over the samples of every rank of `comm` (the global batch of that micro-batch), as PyTorch's
  // SyncBatchNorm: one all-gather of each rank's statistics in forward, one all-reduce of two sums
  // in backward, per BatchNorm, on every rank in the same order; the running statistics are then
  // the same on every rank. nullptr: over this rank's samples alone (the default). Evaluation uses
  // the running statistics and communicates nothing. Returns false when the model has no
  // BatchNorm it synchronizes (the default); dtrain then refuses model.sync_batch_norm with an
  // Error naming the key. dtrain's ResNets answer true, its cnn with model.batch_norm too.
  virtual bool set_batch_norm_sync(Communicator* comm) {
    (void)comm;
    return false;
  }
  // How forward may take standardized uint8 pixels (Note [uint8 pixels]) while a training step
  // runs under autocast (train.precision bf16 or fp16). in_autocast_dtype: already in the
  // autocast dtype, for a model whose first operation autocast runs in it anyway (a
  // convolution): the values are those autocast would make, and no fp32 copy of the batch stays
  // alive through the forward pass. layout: the memory format forward wants them in. The default
  // (fp32, contiguous) suits any model; dtrain's ResNets answer the autocast dtype and their
  // layout (model.channels_last).
  struct PixelInputs {
    bool in_autocast_dtype = false;
    at::MemoryFormat layout = at::MemoryFormat::Contiguous;
  };
  virtual PixelInputs pixel_inputs() const { return {}; }
};

using ModelFactory =
    std::function<std::shared_ptr<Model>(const ModelConfig& cfg, const DataSpec& data)>;

// Register `factory` under `name` (replacing an earlier one with that name). `reads`: the model.*
// keys the factory reads (model.name and model.init_weights apply to every model and are not
// listed); a run that sets another model.* key is warned that it is not used. nullopt: the model
// does not say, and no model.* key is warned about.
void register_model(const std::string& name, ModelFactory factory, std::string description = {},
                    std::optional<std::vector<std::string>> reads = std::nullopt);
// The model.* keys a registered model declared it reads; nullopt when it did not declare them or
// no model has that name.
std::optional<std::vector<std::string>> model_keys(const std::string& name);
// An Error naming model.name, the known names and the closest one, when no model is registered
// as `name` (checked before any data is read; make_model says the same).
void require_model(const std::string& name);
// Build a registered model; an unknown name is an Error naming model.name and the known names.
std::shared_ptr<Model> make_model(const std::string& name, const ModelConfig& cfg,
                                  const DataSpec& data);
// Registered names with their descriptions, sorted by name.
std::vector<std::pair<std::string, std::string>> registered_models();

}  // namespace dtrain
