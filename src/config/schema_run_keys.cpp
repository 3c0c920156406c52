// The schema's rows of the run, model, dist and checkpoint sections (config/schema_rows.h).
#include "config/schema_rows.h"

namespace dtrain::config {

void add_run_keys(std::vector<Field>& s) {
  using C = Config;
  s.push_back(field("run.name", &C::run, &RunConfig::name,
                    "name of the run (run directory is run.dir/run.name)")
                  .always()
                  .may_change());
  s.push_back(field("run.dir", &C::run, &RunConfig::dir, "parent folder of run directories")
                  .always()
                  .may_change());
  s.push_back(field("run.seed", &C::run, &RunConfig::seed,
                    "seed for initialization, shuffling and synthetic data", at_least(0))
                  .always()
                  .must_match());
  s.push_back(choice("run.device", &C::run, &RunConfig::device,
                     "where each rank computes; auto = GPU local_rank if CUDA is present")
                  .always()
                  .may_change());
  s.push_back(
      field("run.threads", &C::run, &RunConfig::threads,
            "intra-op CPU threads per rank; 0 = the CPUs this process may use (its affinity mask) "
            "/ the ranks of the node sharing them; more than those CPUs is capped, with a warning",
            at_least(0))
          .always()
          .may_change());
  s.push_back(field("run.log_every", &C::run, &RunConfig::log_every,
                    "steps between progress lines; 0 = once per epoch", at_least(0))
                  .always()
                  .may_change());
  s.push_back(field("run.timeout_s", &C::run, &RunConfig::timeout_s,
                    "abort the whole job if one step or collective takes longer than this",
                    positive())
                  .always()
                  .may_change());
  s.push_back(field("run.tf32", &C::run, &RunConfig::tf32,
                    "let fp32 matrix products use TF32 tensor cores (faster, ~1e-3 relative error)")
                  .always()
                  .may_change());
  s.push_back(field("run.gpu_memory_fraction", &C::run, &RunConfig::gpu_memory_fraction,
                    "cap the CUDA caching allocator at this share of the GPU's memory (0 = no "
                    "cap), e.g. to act like a smaller card",
                    in_range(0.0, 1.0000001))
                  .always()
                  .may_change());
  s.push_back(
      field("run.profile_steps", &C::run, &RunConfig::profile_steps,
            "record this many training steps with the profiler: a Chrome trace per rank (run "
            "directory, trace.rank<R>.json) and a summary of where the time went; 0 = off",
            at_least(0))
          .always()
          .may_change());
  s.push_back(field("run.profile_start", &C::run, &RunConfig::profile_start,
                    "first step the profiler records (let warm-up pass first)", at_least(0))
                  .always()
                  .may_change());
  s.push_back(
      field("run.gpu_sample_s", &C::run, &RunConfig::gpu_sample_s,
            "seconds between samples of each rank's GPU (NVML: utilization, memory, power, clocks)",
            in_range(0.01, 60.0))
          .always()
          .may_change());
  s.push_back(
      field("run.tensorboard", &C::run, &RunConfig::tensorboard,
            "write TensorBoard event files into the run directory (tensorboard --logdir runs/)")
          .always()
          .may_change());
  s.push_back(field("run.timeline", &C::run, &RunConfig::timeline,
                    "write a Chrome-trace / Perfetto timeline per rank into the run directory "
                    "(timeline.rank<R>.json, and timeline.json merged): each step's phases and "
                    "each bucket's all-reduce")
                  .always()
                  .may_change());
  s.push_back(field("run.quiet", &C::run, &RunConfig::quiet, "print only the summary")
                  .always()
                  .may_change());
  s.push_back(
      choice("run.progress", &C::run, &RunConfig::progress,
             "rank 0's progress: live = one line redrawn in place at every step (epoch, step, "
             "loss, samples/s, GPU use, elapsed, ETA); lines = the same as a timestamped line "
             "every run.log_every steps (for files and Slurm logs); off = none (the evaluations "
             "and the summary still print); auto = live when stdout and stderr are one terminal, "
             "else lines (under mpirun stderr is a pipe: lines)")
          .always()
          .may_change());
}

void add_model_keys(std::vector<Field>& s) {
  using C = Config;
  s.push_back(field("model.name", &C::model, &ModelConfig::name,
                    "registered model name (dtrain --help lists them)")
                  .always()
                  .must_match());
  s.push_back(field("model.hidden", &C::model, &ModelConfig::hidden, "mlp: hidden layer widths",
                    all_positive(true))
                  .by_model()
                  .must_match()
                  .sizes_model());
  s.push_back(field("model.channels", &C::model, &ModelConfig::channels,
                    "cnn: channels of each conv block", all_positive(false))
                  .by_model()
                  .must_match()
                  .sizes_model());
  s.push_back(field("model.fc", &C::model, &ModelConfig::fc,
                    "cnn: width of the fully connected layer", at_least(1))
                  .by_model()
                  .must_match()
                  .sizes_model());
  s.push_back(field("model.batch_norm", &C::model, &ModelConfig::batch_norm,
                    "cnn: a BatchNorm after each conv (before its ReLU; the conv then has no "
                    "bias), as torchvision's conv-BN-ReLU")
                  .by_model()
                  .must_match()
                  .sizes_model());
  s.push_back(field("model.dropout", &C::model, &ModelConfig::dropout, "dropout probability",
                    in_range(0.0, 1.0))
                  .by_model()
                  .must_match());
  s.push_back(field("model.channels_last", &C::model, &ModelConfig::channels_last,
                    "image models: channels-last memory layout (faster convolutions on GPUs)")
                  .by_model()
                  .must_match());
  s.push_back(
      field("model.sync_batch_norm", &C::model, &ModelConfig::sync_batch_norm,
            "models with BatchNorm (resnet18, resnet50, cnn with model.batch_norm): in training, "
            "each BatchNorm's mean and variance over the global batch, every rank's samples of the "
            "micro-batch, as PyTorch's SyncBatchNorm (one all-gather of the statistics forward, "
            "one all-reduce of two sums backward, per BatchNorm), so that N ranks train as one "
            "rank on the same global batch; false = over this rank's samples (the running "
            "statistics are averaged over the ranks before each evaluation and save)")
          .by_model()
          .must_match());
  s.push_back(field("model.n_layer", &C::model, &ModelConfig::n_layer, "gpt: transformer blocks",
                    at_least(1))
                  .by_model()
                  .must_match()
                  .sizes_model());
  s.push_back(
      field("model.n_head", &C::model, &ModelConfig::n_head, "gpt: attention heads", at_least(1))
          .by_model()
          .must_match());
  s.push_back(
      field("model.n_embd", &C::model, &ModelConfig::n_embd, "gpt: embedding width", at_least(1))
          .by_model()
          .must_match()
          .sizes_model());
  s.push_back(field("model.vocab_size", &C::model, &ModelConfig::vocab_size, "gpt: vocabulary size",
                    at_least(2))
                  .by_model()
                  .must_match()
                  .sizes_model());
  s.push_back(
      field("model.seq_len", &C::model, &ModelConfig::seq_len, "gpt: context length", at_least(1))
          .by_model()
          .must_match()
          .sizes_model());
  s.push_back(
      choice("model.attention", &C::model, &ModelConfig::attention,
             "gpt on CUDA: the attention kernel (LibTorch's scaled-dot-product backends; auto = "
             "LibTorch's choice; the others fall back to math where they cannot run)")
          .by_model()
          .must_match());
  s.push_back(field("model.fused_kernels", &C::model, &ModelConfig::fused_kernels,
                    "on CUDA, dtrain's fused kernels: gpt's residual adds with the LayerNorm after "
                    "them and Linear bias gradients summed straight into fp32; resnet18/resnet50's "
                    "BatchNorms (channels-last) with the shortcut add and ReLU after them, one "
                    "reduction and one pointwise pass each way, and their stem's max-pool; false = "
                    "LibTorch's ops (the same values within rounding, for comparison)")
                  .by_model()
                  .must_match());
  s.push_back(field("model.fused_mlp", &C::model, &ModelConfig::fused_mlp,
                    "gpt on CUDA under bf16/fp16, with model.fused_kernels: the MLP's bias + GELU "
                    "computed in the epilogue of its first GEMM (cuBLASLt); false = a GELU kernel "
                    "after the GEMM (the same values within rounding, for comparison)")
                  .by_model()
                  .must_match());
  s.push_back(field("model.fused_head", &C::model, &ModelConfig::fused_head,
                    "gpt on CUDA, with model.fused_kernels: training steps compute the tied head "
                    "and the cross-entropy in chunks of rows, with their gradients, so the (B*T, "
                    "vocab) logits are never held at once; false = the whole logits, then the loss "
                    "(the same values within rounding, for comparison)")
                  .by_model()
                  .must_match());
  s.push_back(field("model.path", &C::model, &ModelConfig::path,
                    "torchscript: the file of a module saved in Python with "
                    "torch.jit.script(module).save(path); its forward(x) returns logits (or "
                    "regression outputs) for a batch; its parameters are trained and checkpointed "
                    "like a built-in model's, under the names of its state_dict()")
                  .by_model()
                  .must_match());
  s.push_back(field("model.init_weights", &C::model, &ModelConfig::init_weights,
                    "start from these weights: a state_dict file written by Python's "
                    "torch.save(model.state_dict(), path) for the model's PyTorch twin "
                    "(python/dtrain_models.py) or a run's model.pt; loaded strictly (every name, "
                    "shape and dtype must match); empty = the model's own initialization")
                  .always()
                  .must_match());
}

void add_dist_keys(std::vector<Field>& s) {
  using C = Config;
  s.push_back(choice("dist.backend", &C::dist, &DistConfig::backend,
                     "gradient communication; auto = NCCL on GPUs, MPI on CPUs")
                  .always()
                  .may_change());
  s.push_back(field("dist.bucket_cap_mb", &C::dist, &DistConfig::bucket_cap_mb,
                    "gradient bucket size in MB", positive())
                  .always()
                  .may_change());
  s.push_back(field("dist.first_bucket_mb", &C::dist, &DistConfig::first_bucket_mb,
                    "size of the first (last-layer) bucket in MB", positive())
                  .always()
                  .may_change());
  s.push_back(field("dist.overlap", &C::dist, &DistConfig::overlap,
                    "all-reduce buckets while backward runs (false: after backward, for debugging)")
                  .always()
                  .may_change());
  s.push_back(
      choice("dist.grad_dtype", &C::dist, &DistConfig::grad_dtype, "dtype of gradients on the wire")
          .always()
          .may_change());
  s.push_back(field("dist.find_unused_parameters", &C::dist, &DistConfig::find_unused_parameters,
                    "allow parameters that get no gradient in a step")
                  .always()
                  .may_change());
  s.push_back(field("dist.reduce_single_rank", &C::dist, &DistConfig::reduce_single_rank,
                    "run the bucketed all-reduce even with one rank (to measure its cost)")
                  .always()
                  .may_change());
  s.push_back(
      choice(
          "dist.shard_optimizer", &C::dist, &DistConfig::shard_optimizer,
          "true = ZeRO-1: each rank keeps the optimizer state (moments, momentum) of 1/world of "
          "the parameters' values, a flat shard that holds pieces of the tensors it crosses; the "
          "gradients are reduce-scattered into the shards (each rank receives the averages of its "
          "own values only), each rank updates its shard and broadcasts the updated values to "
          "every rank after every step. gradients = ZeRO-2: besides, each bucket's gradients and "
          "its buffer are released as soon as its reduce-scatter is sent, so past backward a rank "
          "holds no gradient beyond its shard. Checkpoints hold the whole state, so a run resumes "
          "on any number of ranks, sharded or not, at any stage. false = every rank keeps "
          "everything. One rank: a warning, nothing sharded; a rank left with no values (fewer "
          "values than ranks, or 5 on 4): an error")
          .always()
          .may_change());
}

void add_checkpoint_keys(std::vector<Field>& s) {
  using C = Config;
  s.push_back(field("checkpoint.every_steps", &C::checkpoint, &CheckpointConfig::every_steps,
                    "save a checkpoint every this many optimizer steps (0 = off)", at_least(0))
                  .always()
                  .may_change());
  s.push_back(field("checkpoint.every_epoch", &C::checkpoint, &CheckpointConfig::every_epoch,
                    "save a checkpoint at the end of every epoch")
                  .always()
                  .may_change());
  s.push_back(field("checkpoint.keep_best", &C::checkpoint, &CheckpointConfig::keep_best,
                    "after each evaluation with a better train.monitor than before, the model's "
                    "weights in <run dir>/best/ (model.pt, preprocess.json, best.json with the "
                    "metric, its value and the step): dtrain eval --weights runs/x/best/model.pt")
                  .when(monitored)
                  .may_change());
  s.push_back(
      field("checkpoint.keep", &C::checkpoint, &CheckpointConfig::keep,
            "complete checkpoints kept; older ones are removed once a newer one is complete",
            at_least(1))
          .always()
          .may_change());
  s.push_back(field("checkpoint.dir", &C::checkpoint, &CheckpointConfig::dir,
                    "folder of the checkpoints, shared by all ranks; empty = <run dir>/checkpoints")
                  .always()
                  .may_change());
  s.push_back(field("checkpoint.resume", &C::checkpoint, &CheckpointConfig::resume,
                    "auto = continue from the newest complete checkpoint in the folder if there is "
                    "one; none = start fresh; or the path of a checkpoint to continue from")
                  .always()
                  .may_change());
  s.push_back(choice("checkpoint.async", &C::checkpoint, &CheckpointConfig::async,
                     "write checkpoints in the background: the saving step copies the state into "
                     "host memory (page-locked on a GPU, allocated once and reused) and training "
                     "goes on while a thread encodes and writes it; the COMPLETE marker still "
                     "comes last, once every rank's files are written (a few steps later); a save "
                     "that comes while the previous one is being written waits for it, as do the "
                     "end of training and a signal's stop; auto = on for CUDA ranks, off on CPUs")
                  .when(saving)
                  .may_change());
  s.push_back(field("checkpoint.write_mb_per_s", &C::checkpoint, &CheckpointConfig::write_mb_per_s,
                    "the pace of each rank's checkpoint writer in MB/s, to spare a shared file "
                    "system or the loader's reads (with checkpoint.async the writes stretch out in "
                    "the background); 0 = as fast as the disk takes them",
                    in_range(0.0, 1e9))
                  .when(saving)
                  .may_change());
}

}  // namespace dtrain::config
