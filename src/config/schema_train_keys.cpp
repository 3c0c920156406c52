// The schema's rows of the train section (config/schema_rows.h).
#include "config/schema_rows.h"

namespace dtrain::config {

void add_train_keys(std::vector<Field>& s) {
  using C = Config;
  s.push_back(field("train.epochs", &C::train, &TrainConfig::epochs, "passes over the training set",
                    at_least(1))
                  .always()
                  .may_change());
  s.push_back(field("train.max_steps", &C::train, &TrainConfig::max_steps,
                    "stop after this many optimizer steps (0 = no limit)", at_least(0))
                  .always()
                  .may_change());
  s.push_back(field("train.global_batch", &C::train, &TrainConfig::global_batch,
                    "samples per optimizer step, over all ranks", at_least(1))
                  .always()
                  .must_match());
  {
    Field f;
    f.key = "train.micro_batch";
    f.type = "int|auto";
    f.help =
        "samples per forward/backward on one rank; 0 = the whole rank batch, auto = largest that "
        "fits";
    f.set = [](Config& c, const YAML::Node& n, const std::string& w) {
      if (n.IsScalar() && n.Scalar() == "auto") {
        c.train.micro_batch = -1;
        return;
      }
      int64_t v = parse_as<int64_t>("train.micro_batch", n, w);
      if (v < 0)
        bad_value("train.micro_batch", w, "must be >= 0 or auto, got " + std::to_string(v));
      c.train.micro_batch = v;
    };
    f.get = [](const Config& c) {
      return c.train.micro_batch < 0 ? std::string("auto") : std::to_string(c.train.micro_batch);
    };
    s.push_back(f.always().may_change());
  }
  s.push_back(choice("train.optimizer", &C::train, &TrainConfig::optimizer, "optimizer")
                  .always()
                  .must_match());
  s.push_back(field("train.lr", &C::train, &TrainConfig::lr, "peak learning rate", positive())
                  .always()
                  .may_change());
  s.push_back(field("train.momentum", &C::train, &TrainConfig::momentum, "sgd: momentum",
                    in_range(0.0, 1.0))
                  .when(sgd_only)
                  .may_change());
  s.push_back(field("train.dampening", &C::train, &TrainConfig::dampening,
                    "sgd with momentum: dampening of the gradient added to the momentum buffer "
                    "after the first step (torch.optim.SGD's)",
                    in_range(0.0, 1.0))
                  .when(sgd_only)
                  .may_change());
  s.push_back(field("train.nesterov", &C::train, &TrainConfig::nesterov,
                    "sgd: Nesterov momentum (torch.optim.SGD's nesterov); needs train.momentum > 0 "
                    "and train.dampening 0")
                  .when(sgd_only)
                  .may_change());
  s.push_back(field("train.weight_decay", &C::train, &TrainConfig::weight_decay,
                    "weight decay (decoupled for adamw)", non_negative())
                  .always()
                  .may_change());
  s.push_back(field("train.no_decay_norm_bias", &C::train, &TrainConfig::no_decay_norm_bias,
                    "sgd, adam, adamw: no weight decay for biases and normalization weights; the "
                    "rule (nanoGPT's and timm's): every parameter of fewer than 2 dimensions is "
                    "left undecayed, every matrix and conv kernel is decayed")
                  .when(with_weight_decay)
                  .may_change());
  s.push_back(
      field("train.beta1", &C::train, &TrainConfig::beta1, "adam/adamw: beta1", in_range(0.0, 1.0))
          .when(adam_only)
          .may_change());
  s.push_back(
      field("train.beta2", &C::train, &TrainConfig::beta2, "adam/adamw: beta2", in_range(0.0, 1.0))
          .when(adam_only)
          .may_change());
  s.push_back(field("train.eps", &C::train, &TrainConfig::eps, "adam/adamw: epsilon", positive())
                  .when(adam_only)
                  .may_change());
  s.push_back(choice("train.schedule", &C::train, &TrainConfig::schedule,
                     "learning-rate schedule after warmup: constant, cosine (to zero at the last "
                     "step), linear (to zero at the last step, torch's LinearLR), step (times "
                     "train.lr_gamma every train.lr_step_size steps, StepLR)")
                  .always()
                  .may_change());
  s.push_back(
      choice(
          "train.resume_schedule", &C::train, &TrainConfig::resume_schedule,
          "training on from the checkpoint at a finished run's last step (with more train.epochs "
          "or train.max_steps): stretch = the schedule of a run planned to the new length, at the "
          "step reached (a decayed cosine or linear rate rises to that run's value there); restart "
          "= a new schedule over the added steps alone: train.warmup_steps of warmup, then the "
          "decay from train.lr to the new end (a warm restart); the log says the rate before and "
          "after; a run resumed before its end continues its schedule either way")
          .always()
          .may_change());
  s.push_back(choice("train.monitor", &C::train, &TrainConfig::monitor,
                     "the evaluation metric that says which model is best, for "
                     "checkpoint.keep_best and train.early_stop_patience: test_loss (lower is "
                     "better), test_accuracy or test_top5_accuracy (higher); off = none")
                  .always()
                  .may_change());
  s.push_back(field("train.early_stop_patience", &C::train, &TrainConfig::early_stop_patience,
                    "stop training, the run's end (exit 0, model.pt and a final checkpoint "
                    "written), after this many evaluations in a row without a better train.monitor "
                    "than the best so far; 0 = never",
                    at_least(0))
                  .when(monitored)
                  .may_change());
  s.push_back(field("train.warmup_steps", &C::train, &TrainConfig::warmup_steps,
                    "linear warmup steps", at_least(0))
                  .always()
                  .may_change());
  s.push_back(field("train.lr_step_size", &C::train, &TrainConfig::lr_step_size,
                    "schedule step: optimizer steps after warmup between decays (as torch's StepLR "
                    "step_size)",
                    at_least(0))
                  .when(step_schedule)
                  .may_change());
  s.push_back(field("train.lr_gamma", &C::train, &TrainConfig::lr_gamma,
                    "schedule step: the learning rate's factor at each decay (StepLR's gamma)",
                    in_range(0.0, 1.0))
                  .when(step_schedule)
                  .may_change());
  s.push_back(
      choice("train.loss", &C::train, &TrainConfig::loss, "loss function").always().must_match());
  s.push_back(field("train.label_smoothing", &C::train, &TrainConfig::label_smoothing,
                    "cross_entropy in training: the targets' probabilities times 1 - e plus e / "
                    "classes (PyTorch's CrossEntropyLoss(label_smoothing=e)); evaluations report "
                    "the plain cross-entropy; 0 = off",
                    in_range(0.0, 0.9999))
                  .when(cross_entropy)
                  .may_change());
  s.push_back(field("train.mixup_alpha", &C::train, &TrainConfig::mixup_alpha,
                    "image classification: Mixup of each rank's batch with itself rolled by one, "
                    "lambda ~ Beta(alpha, alpha), inputs and one-hot targets mixed alike "
                    "(torchvision's RandomMixup / v2.MixUp); 0 = off",
                    non_negative())
                  .when(cross_entropy)
                  .may_change());
  s.push_back(
      field(
          "train.cutmix_alpha", &C::train, &TrainConfig::cutmix_alpha,
          "image classification: CutMix of each rank's batch with itself rolled by one, a box of "
          "area 1 - lambda, lambda ~ Beta(alpha, alpha), pasted from the rolled batch, the targets "
          "mixed by the box's true share (torchvision's RandomCutmix / v2.CutMix); 0 = off",
          non_negative())
          .when(cross_entropy)
          .may_change());
  s.push_back(
      field("train.cutmix_prob", &C::train, &TrainConfig::cutmix_prob,
            "with train.mixup_alpha and train.cutmix_alpha both on: the probability that a batch "
            "takes CutMix rather than Mixup (torchvision's RandomChoice of the two: 0.5)",
            in_range(0.0, 1.0000001))
          .when(mixing_both)
          .may_change());
  s.push_back(
      field("train.mix_prob", &C::train, &TrainConfig::mix_prob,
            "the probability that a batch is mixed at all (timm's mixup_prob); 1 = every batch",
            in_range(0.0, 1.0000001))
          .when(mixing)
          .may_change());
  s.push_back(
      field("train.ema_decay", &C::train, &TrainConfig::ema_decay,
            "an exponential moving average of the weights and buffers, torchvision's reference "
            "rule (--model-ema-decay): every train.ema_every steps ema = d ema + (1 - d) model, "
            "with d = 1 - min(1, (1 - ema_decay) global_batch ema_every / epochs); evaluations "
            "report the model and its EMA; checkpoints carry it; 0 = off",
            in_range(0.0, 0.9999999999))
          .always()
          .may_change());
  s.push_back(field("train.ema_every", &C::train, &TrainConfig::ema_every,
                    "optimizer steps between EMA updates (torchvision's --model-ema-steps)",
                    at_least(1))
                  .when(with_ema)
                  .may_change());
  s.push_back(
      field("train.ema_warmup_steps", &C::train, &TrainConfig::ema_warmup_steps,
            "until this step each EMA update copies the model instead of averaging (torchvision "
            "resets its EMA during the learning-rate warmup); -1 = train.warmup_steps",
            at_least(-1))
          .when(with_ema)
          .may_change());
  s.push_back(field("train.ema_output", &C::train, &TrainConfig::ema_output,
                    "model.pt and best/ hold the EMA's weights and train.monitor reads the EMA's "
                    "evaluation (model.json and best.json say so); false = the trained model's")
                  .when(with_ema)
                  .may_change());
  s.push_back(field("train.clip_grad_norm", &C::train, &TrainConfig::clip_grad_norm,
                    "clip the global gradient norm to this (0 = off)", non_negative())
                  .always()
                  .may_change());
  s.push_back(choice("train.precision", &C::train, &TrainConfig::precision,
                     "compute precision; master weights stay fp32")
                  .always()
                  .may_change());
  s.push_back(field("train.fused_optimizer", &C::train, &TrainConfig::fused_optimizer,
                    "use fused multi-tensor optimizer kernels where LibTorch has them (CUDA, 2.x); "
                    "else multi-tensor (foreach) ops")
                  .always()
                  .may_change());
  s.push_back(choice("train.cuda_graph", &C::train, &TrainConfig::cuda_graph,
                     "capture the whole training step (forward, backward, optimizer) in a CUDA "
                     "graph after warm-up and replay it: one launch per step. Needs CUDA, "
                     "gradients over NCCL when there are several ranks (the bucketed all-reduce is "
                     "captured too), equal batch shapes, a fused optimizer and no loss scaler "
                     "(fp16, train.skip_nonfinite); auto = whenever that holds")
                  .always()
                  .may_change());
  s.push_back(choice("train.activation_checkpointing", &C::train,
                     &TrainConfig::activation_checkpointing,
                     "blocks = activation checkpointing: in training, each of the model's blocks "
                     "(gpt: every transformer block; resnet18/50: every residual block) keeps only "
                     "its inputs in the forward pass and runs again in the backward pass, for its "
                     "gradients: less GPU memory for activations (a larger train.micro_batch fits) "
                     "for about one more forward pass of compute; the same gradients, dropout's "
                     "included. A model without blocks refuses blocks. off = keep every activation")
                  .always()
                  .may_change());
  s.push_back(field("train.drop_last", &C::train, &TrainConfig::drop_last,
                    "drop an epoch's last incomplete global batch")
                  .always()
                  .must_match());
  s.push_back(field("train.eval", &C::train, &TrainConfig::eval,
                    "evaluate on the test split after every epoch")
                  .always()
                  .may_change());
  s.push_back(field("train.eval_every_steps", &C::train, &TrainConfig::eval_every_steps,
                    "evaluate on the test split every this many optimizer steps as well, inside "
                    "epochs (0 = off; a step that ends an epoch evaluated by train.eval is "
                    "evaluated once); the data needs a test split",
                    at_least(0))
                  .always()
                  .may_change());
  s.push_back(field("train.skip_nonfinite", &C::train, &TrainConfig::skip_nonfinite,
                    "skip an optimizer step whose loss or gradients are not finite (one host sync "
                    "per step); false = stop the run with an error naming the step")
                  .always()
                  .may_change());
}

}  // namespace dtrain::config
