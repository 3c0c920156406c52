// Config: a run's settings, from YAML plus `section.key=value` overrides, validated against one
// schema and then resolved once against the world size.
// Invariants (tests/unit/test_config.cpp):
//   - every key a user can write is in the schema, so `--help`, parsing and the dump cannot
//     drift apart; a key's type, range and choices are written once, there;
//   - an unknown or duplicate key, a wrong type, a value outside its range or an unknown choice
//     is a dtrain::Error naming the key path and the YAML file:line (or the command-line
//     argument) it came from; so are an empty config, a key without a value, a key given twice
//     (in the file or on the command line) and a run.name that leaves run.dir;
//   - past the parser a choice is an enum, never a string (data.format: a DataFormat, one of the
//     formats src/config/data_formats.cpp lists);
//   - resolve() runs once, before training; nothing in dtrain changes a Config after it (the
//     Trainer holds it const, and the micro-batch that `auto` or out-of-memory recovery picks
//     lives in the step engine), so a run's config hashes the same from start to end and on
//     every rank that resolved the same values.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace dtrain {

// The choices of the config, as enums. to_string() gives the name a config file uses.
enum class DeviceKind { kAuto, kCpu, kCuda };  // run.device
// data.format: a data format by its name, one of those src/config/data_formats.cpp lists (`dtrain
// --help` names them; Note [data formats]). The constants name dtrain's own; a value compares
// by its name.
class DataFormat {
 public:
  // `name` outlives the value: a string literal, or a name config::data_formats() holds.
  constexpr explicit DataFormat(const char* name) : name_(name) {}
  const char* name() const { return name_; }
  friend bool operator==(const DataFormat& a, const DataFormat& b) {
    return std::string_view(a.name_) == std::string_view(b.name_);
  }
  friend bool operator!=(const DataFormat& a, const DataFormat& b) { return !(a == b); }
  static const DataFormat kIdx, kSynthetic, kTokens, kText, kCifar10, kCifar100, kCsv, kImageFolder;

 private:
  const char* name_;
};
inline constexpr DataFormat DataFormat::kIdx{"idx"};
inline constexpr DataFormat DataFormat::kSynthetic{"synthetic"};
inline constexpr DataFormat DataFormat::kTokens{"tokens"};
inline constexpr DataFormat DataFormat::kText{"text"};
inline constexpr DataFormat DataFormat::kCifar10{"cifar10"};
inline constexpr DataFormat DataFormat::kCifar100{"cifar100"};
inline constexpr DataFormat DataFormat::kCsv{"csv"};
inline constexpr DataFormat DataFormat::kImageFolder{"image_folder"};
enum class SyntheticTask { kRegression, kClassification, kImages, kTokens };  // data.synthetic_task
enum class OptimizerKind { kSgd, kAdam, kAdamW };                             // train.optimizer
enum class Schedule { kConstant, kCosine, kLinear, kStep };                   // train.schedule
enum class ResumeSchedule { kStretch, kRestart };  // train.resume_schedule
// train.monitor: an evaluation metric of the test split, or of the validation split
// (data.val_fraction)
enum class Monitor { kOff, kTestLoss, kTestAccuracy, kTestTop5, kValLoss, kValAccuracy, kValTop5 };
enum class LossKind { kCrossEntropy, kMse };           // train.loss
enum class Precision { kFp32, kBf16, kFp16 };          // train.precision
enum class GraphMode { kAuto, kOn, kOff };             // train.cuda_graph
enum class ActivationCheckpointing { kOff, kBlocks };  // train.activation_checkpointing
enum class Backend { kAuto, kNccl, kMpi };             // dist.backend
enum class GradDtype { kFp32, kBf16 };                 // dist.grad_dtype
// dist.shard_optimizer: nothing sharded (false), the optimizer state (true, ZeRO-1), or the
// optimizer state and the averaged gradients, each bucket's released once it is sent (gradients,
// ZeRO-2).
enum class ShardOptimizer { kOff, kState, kGradients };
enum class ProgressMode { kAuto, kLive, kLines, kOff };             // run.progress
enum class TokenDtype { kAuto, kUint16, kUint32 };                  // data.token_dtype
enum class Attention { kAuto, kFlash, kCudnn, kEfficient, kMath };  // model.attention
enum class CifarLabels { kFine, kCoarse };                          // data.cifar_labels
enum class CsvTask { kClassification, kRegression };                // data.csv_task
enum class DecodeMode { kCpu, kGpu, kAuto };                        // data.decode
enum class AsyncSave { kAuto, kOn, kOff };                          // checkpoint.async
// data.auto_augment: torchvision's TrivialAugmentWide, RandAugment, AutoAugment (ImageNet policy)
enum class AutoAugment { kNone, kTrivialAugmentWide, kRandAugment, kAutoAugment };

const char* to_string(DeviceKind v);
const char* to_string(DataFormat v);
const char* to_string(SyntheticTask v);
const char* to_string(OptimizerKind v);
const char* to_string(Schedule v);
const char* to_string(ResumeSchedule v);
const char* to_string(Monitor v);
const char* to_string(LossKind v);
const char* to_string(AutoAugment v);
const char* to_string(Precision v);
const char* to_string(GraphMode v);
const char* to_string(ActivationCheckpointing v);
const char* to_string(Backend v);
const char* to_string(GradDtype v);
const char* to_string(ShardOptimizer v);
const char* to_string(ProgressMode v);
const char* to_string(Attention v);
const char* to_string(TokenDtype v);
const char* to_string(CifarLabels v);
const char* to_string(DecodeMode v);
const char* to_string(CsvTask v);
const char* to_string(AsyncSave v);

struct RunConfig {
  std::string name = "run";
  std::string dir = "runs";  // the run directory is dir/name
  int64_t seed = 0;
  DeviceKind device = DeviceKind::kAuto;
  int64_t threads = 0;     // intra-op threads per rank; 0 = affinity CPUs / ranks sharing them
  int64_t log_every = 50;  // steps between progress lines; 0 = once per epoch
  double timeout_s = 600;  // a rank stuck this long in one step aborts the job
  bool quiet = false;
  // The progress line: live (redrawn in place), lines (timestamped), off; auto = live on a
  // terminal.
  ProgressMode progress = ProgressMode::kAuto;
  bool tf32 = false;  // fp32 matrix products on tensor cores in TF32 (Ampere and later GPUs)
  double gpu_memory_fraction = 0.0;  // cap the CUDA allocator at this share of the GPU (0 = off)
  int64_t profile_steps = 0;         // steps recorded by the profiler (0 = off)
  int64_t profile_start = 10;        // first recorded step (after warm-up)
  double gpu_sample_s = 0.5;         // seconds between NVML samples of each rank's GPU
  bool tensorboard = true;           // TensorBoard event files in the run directory
  bool timeline = false;  // a Chrome-trace timeline per rank (phases and buckets per step)

  // dir/name, where rank 0 writes the run's files; "" when dir is "" (write nothing).
  std::string run_dir() const;
};

struct ModelConfig {
  std::string name = "cnn";
  std::vector<int64_t> hidden = {256};       // mlp: widths of hidden layers
  std::vector<int64_t> channels = {16, 32};  // cnn: conv channels
  int64_t fc = 128;                          // cnn: width of the fully connected layer
  bool batch_norm = false;  // cnn: BatchNorm after each conv (its conv without a bias)
  double dropout = 0.0;
  bool channels_last = false;  // image models: NHWC memory layout (faster convolutions on GPUs)
  // models with BatchNorm (resnet18, resnet50, cnn with batch_norm): in training, each
  // BatchNorm's mean and variance over the global batch, every rank's samples (PyTorch's
  // SyncBatchNorm), instead of over this rank's (Model::set_batch_norm_sync)
  bool sync_batch_norm = false;
  // transformer (gpt) models
  int64_t n_layer = 12;
  int64_t n_head = 12;
  int64_t n_embd = 768;
  int64_t vocab_size = 50304;
  int64_t seq_len = 1024;
  // On CUDA, dtrain's fused kernels: gpt's (Note [fused residual LayerNorm], Note [Linear bias
  // gradient]) and the ResNets' BatchNorm + shortcut + ReLU (Note [fused BatchNorm]); false =
  // LibTorch's ops (the same values within rounding; for comparisons)
  bool fused_kernels = true;
  // gpt on CUDA under fp16/bf16 autocast, with fused_kernels: the MLP's GELU in its first
  // GEMM's epilogue (Note [MLP GEMM epilogues]); false = a GELU kernel after the GEMM
  bool fused_mlp = true;
  // gpt on CUDA, with fused_kernels: training steps run the tied head and the cross-entropy in
  // chunks of rows, never holding all the logits (Note [fused head and loss]).
  bool fused_head = true;
  // gpt on CUDA: the scaled-dot-product-attention kernel (LibTorch's backends); auto = LibTorch's
  // choice. Any other keeps the math kernel as the fallback for shapes the backend cannot take.
  Attention attention = Attention::kAuto;
  // a state_dict file (torch.save in Python, or a run's model.pt) loaded into the model before
  // training; "" = the model's own initialization
  std::string init_weights;
  // torchscript: the module Python saved with torch.jit.script(m).save(path)
  std::string path;
};

struct DataConfig {
  DataFormat format = DataFormat::kIdx;
  std::string path = "/usr/share/datasets/fashion-mnist";   // idx: folder with the 4 files
  std::string train_images = "train-images-idx3-ubyte.gz";  // relative to path
  std::string train_labels = "train-labels-idx1-ubyte.gz";
  std::string test_images = "t10k-images-idx3-ubyte.gz";
  std::string test_labels = "t10k-labels-idx1-ubyte.gz";
  bool normalize = true;
  // classification: the model's classes; 0 = the data's own (idx, csv: the train labels'
  // largest + 1; cifar: 10, 100 or 20; image_folder: its class folders; tokens: model.vocab_size;
  // text: 256; synthetic: data.synthetic_classes). Every train and test label must lie in
  // [0, num_classes).
  int64_t num_classes = 0;
  // classification (idx, cifar10 / cifar100, csv): the name of class i, one per class; written to
  // preprocess.json and named by `dtrain predict`. Empty: CIFAR's label-name file where the data
  // folder has it (batches.meta.txt, fine_label_names.txt, coarse_label_names.txt), else none.
  // Image folders name their classes by their folders.
  std::vector<std::string> class_names;
  int64_t workers = 2;   // loader threads per rank
  int64_t prefetch = 4;  // batches prepared ahead
  bool pin_memory = true;
  bool shuffle = true;
  // token files (format tokens), text files (text), CIFAR batches (cifar10, cifar100; "" = the
  // official names) and CSV files (csv): one or more glob patterns, comma-separated, relative to
  // data.path unless absolute (Note [token windows])
  std::string train_files;
  std::string test_files;  // tokens, csv: the evaluation files ("" = no test split / csv:
                           // data.test_fraction of the rows); cifar: "" = test_batch.bin
                           // or test.bin
  TokenDtype token_dtype = TokenDtype::kAuto;  // auto: llm.c's header says, else uint16
  int64_t seq_len = 0;         // tokens per sample; 0 = model.seq_len (Config::resolve)
  int64_t windows = 0;         // training windows per epoch; 0 = train tokens / (seq_len + 1)
  double test_fraction = 0.1;  // text: the last share of the bytes kept for evaluation; csv
                               // without test_files: a seeded random share of the rows
  CifarLabels cifar_labels = CifarLabels::kFine;  // cifar100: fine (100) or coarse (20) labels
  // cifar10 / cifar100, training: RandomCrop(32, padding=crop_padding) on zero-padded images
  // (Note [cifar augmentation]); 0 = off
  int64_t crop_padding = 0;
  // csv: a header of column names, then numeric rows (src/data/formats/csv.cpp)
  CsvTask csv_task = CsvTask::kClassification;
  std::string target_columns;   // csv: the target column(s), comma-separated names
  std::string feature_columns;  // csv: the input columns, comma-separated; "" = all the others
  // image folders (format image_folder, Note [image transforms]): data.path/<dir>/<class>/<image>
  std::string train_dir = "train";  // relative to data.path
  std::string test_dir = "val";     // "" = no test split
  int64_t image_size = 224;         // side of the square crop the model sees
  int64_t resize =
      0;  // evaluation: the shorter side before the center crop; 0 = image_size * 8 / 7
  std::vector<double> crop_scale = {0.08, 1.0};             // training crop: share of the area
  std::vector<double> crop_ratio = {3.0 / 4.0, 4.0 / 3.0};  // training crop: width / height
  // training: flip half of the images left to right (image_folder's crops; cifar10 / cifar100: a
  // config read from YAML that does not set it gets false, Note [cifar augmentation])
  bool hflip = true;
  bool scaled_decode = true;  // JPEG: decode at 1/2, 1/4 or 1/8 when that still covers the crop
  // where JPEGs are decoded and transformed: the loader threads' CPU (libjpeg-turbo), the GPU
  // (nvJPEG, src/data/images/gpu_decode.h), or auto: the GPU on a CUDA rank where nvJPEG loads
  // and fewer than 12 loader threads can decode at once, else the CPU
  DecodeMode decode = DecodeMode::kAuto;
  // normalize: (x / 255 - mean[c]) / std[c] per channel on the device (ImageNet's by default)
  std::vector<double> pixel_mean = {0.485, 0.456, 0.406};
  std::vector<double> pixel_std = {0.229, 0.224, 0.225};
  // image_folder, cifar, training images: automatic augmentation of each image (uint8, after the
  // crop and flip; on the GPU with data.decode gpu), torchvision's ops and op spaces
  AutoAugment auto_augment = AutoAugment::kNone;
  int64_t rand_augment_ops = 2;        // rand_augment: ops per image (RandAugment's num_ops)
  int64_t rand_augment_magnitude = 9;  // rand_augment: magnitude bin 0..30 (its magnitude)
  // training images: RandomErasing(p=random_erase) of the standardized inputs (value 0); 0 = off
  double random_erase = 0.0;
  // idx, cifar, tokens, csv: this share of the training set held out as a validation split
  // (data/splits.h: a fixed rule of run.seed), evaluated beside the test split; 0 = none
  double val_fraction = 0.0;
  // synthetic data
  SyntheticTask synthetic_task = SyntheticTask::kRegression;
  int64_t synthetic_size = 4096;
  int64_t synthetic_test_size = 1024;
  int64_t synthetic_features = 10;
  int64_t synthetic_classes = 10;
  double synthetic_noise = 0.01;
  // images: pixels held as uint8 0..255 and standardized on the device (Note [uint8 pixels])
  bool synthetic_uint8 = false;
  // images: one sample's shape, e.g. {3, 224, 224}; tokens: {sequence length}
  std::vector<int64_t> synthetic_shape = {};
};

struct TrainConfig {
  int64_t epochs = 1;
  int64_t max_steps = 0;       // 0 = no limit; else stop after this many optimizer steps
  int64_t global_batch = 256;  // samples per optimizer step, summed over all ranks
  int64_t micro_batch = 0;     // samples per forward/backward on one rank; 0 = the rank's batch,
                               // -1 = auto (largest that fits)
  OptimizerKind optimizer = OptimizerKind::kAdamW;
  double lr = 1e-3;
  double momentum = 0.0;
  double dampening = 0.0;  // sgd: momentum dampening (torch.optim.SGD's)
  bool nesterov = false;   // sgd: Nesterov momentum (needs momentum > 0, dampening 0)
  double weight_decay = 0.0;
  // weight decay only for parameters of 2 or more dimensions (matrices, conv kernels): every
  // 1-dimensional parameter (biases, normalization weights) and scalar is left undecayed
  bool no_decay_norm_bias = false;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  Schedule schedule = Schedule::kConstant;
  int64_t warmup_steps = 0;
  int64_t lr_step_size = 0;  // schedule step: steps (after warmup) between decays
  double lr_gamma = 0.1;     // schedule step: the factor of each decay
  // Training on after a run's end (more train.epochs or train.max_steps): stretch = the schedule
  // of a run planned to the new length, at the step reached; restart = a new schedule (warmup,
  // then the decay) over the added steps alone.
  ResumeSchedule resume_schedule = ResumeSchedule::kStretch;
  // The evaluation metric that says which model is best (lower test_loss, higher accuracy), for
  // checkpoint.keep_best and early stopping; off = none.
  Monitor monitor = Monitor::kOff;
  int64_t early_stop_patience =
      0;  // stop after this many evaluations without a better monitor; 0 = never
  LossKind loss = LossKind::kCrossEntropy;
  double label_smoothing = 0.0;  // cross_entropy: PyTorch's CrossEntropyLoss(label_smoothing=)
  // Mixup and CutMix of each rank's batch with itself rolled by one (train/batch_mix.h): the
  // Beta(alpha, alpha) draws' alphas, 0 = off; with both on, CutMix is chosen with cutmix_prob
  double mixup_alpha = 0.0;
  double cutmix_alpha = 0.0;
  double cutmix_prob = 0.5;
  double mix_prob = 1.0;  // the share of batches mixed at all
  // An exponential moving average of the weights and buffers (hooks/ema.h), torchvision's
  // reference rule: decay per image-ish, adjusted by global batch, ema_every and epochs; 0 = off
  double ema_decay = 0.0;
  int64_t ema_every = 32;         // optimizer steps between EMA updates
  int64_t ema_warmup_steps = -1;  // the EMA restarts from the model until then; -1 = warmup_steps
  bool ema_output = true;         // model.pt and best/ hold the EMA's weights (else the model's)
  double clip_grad_norm = 0.0;    // 0 = off
  Precision precision = Precision::kFp32;
  bool fused_optimizer = true;  // fused multi-tensor kernels where available (CUDA, 2.x)
  GraphMode cuda_graph = GraphMode::kAuto;  // replay the whole step as one CUDA graph
  // blocks: the model's blocks keep only their inputs in forward and run again in backward
  ActivationCheckpointing activation_checkpointing = ActivationCheckpointing::kOff;
  bool drop_last = true;         // drop the last global batch of an epoch if it is incomplete
  bool eval = true;              // evaluate on the test split after every epoch
  int64_t eval_every_steps = 0;  // evaluate every this many optimizer steps too; 0 = off
  bool skip_nonfinite = false;   // skip steps with a non-finite loss or gradient (else: stop)
};

struct CheckpointConfig {
  int64_t every_steps = 0;      // save every this many optimizer steps; 0 = off
  bool every_epoch = true;      // save at the end of every epoch
  int64_t keep = 3;             // complete checkpoints kept (the oldest beyond this are removed)
  bool keep_best = false;       // train.monitor: the best evaluation's weights in <run dir>/best/
  std::string dir;              // "" = <run dir>/checkpoints
  std::string resume = "auto";  // auto | none | a checkpoint's path
  // Write in the background while training goes on (Note [background saves]); auto: on CUDA
  // ranks.
  AsyncSave async = AsyncSave::kAuto;
  double write_mb_per_s = 0;  // the writer's pace per rank; 0 = as fast as the disk takes it
  // The folder checkpoints go to: dir, else <run dir>/checkpoints; "" when the run writes none.
  std::string folder(const RunConfig& run) const;
};

struct DistConfig {
  Backend backend = Backend::kAuto;
  double bucket_cap_mb = 25.0;
  double first_bucket_mb = 1.0;
  bool overlap = true;
  GradDtype grad_dtype = GradDtype::kFp32;  // gradient communication dtype
  bool find_unused_parameters = false;
  bool reduce_single_rank = false;  // run the gradient engine even with one rank (to measure it)
  // ZeRO-1 (kState): each rank keeps the optimizer state of its shard of the parameters, and
  // receives the averaged gradients of its shard only; ZeRO-2 (kGradients): besides, a rank keeps
  // no gradient beyond its shard past each bucket's reduce-scatter (Note [sharded optimizer],
  // src/dist/optimizer_shard.h). With one rank a warning, and nothing is sharded.
  ShardOptimizer shard_optimizer = ShardOptimizer::kOff;
};

// What the world size decides. Filled by resolve(); world 0 means "not resolved yet".
struct Resolved {
  int world = 0;
  int64_t rank_batch = 0;   // global_batch / world
  int64_t micro_batch = 0;  // resolved micro-batch (-1: `auto`, measured when training starts)
  int64_t accum_steps = 1;  // rank_batch / micro_batch (0 while `auto` is not measured)
};

class Config {
 public:
  RunConfig run;
  ModelConfig model;
  DataConfig data;
  TrainConfig train;
  DistConfig dist;
  CheckpointConfig checkpoint;
  Resolved resolved;

  // Parse a YAML file, then apply `section.key=value` overrides in order.
  static Config from_file(const std::string& path, const std::vector<std::string>& overrides = {});
  // Same from YAML text; `origin` names it in errors (a file name or "<string>").
  static Config from_string(const std::string& yaml, const std::string& origin = "<string>",
                            const std::vector<std::string>& overrides = {});

  // Apply one `section.key=value` override (before resolve()).
  void apply_override(const std::string& assignment);

  // Check the batch arithmetic for `world` ranks and fill `resolved`. Errors name the key. Once:
  // resolving a resolved config is an error (resolve a fresh copy for another world size).
  void resolve(int world);
  bool is_resolved() const { return resolved.world > 0; }

  // Every setting as YAML (schema order), with the resolved values in a trailing comment line:
  // settings_yaml() + "# " + resolved_note().
  std::string dump() const;
  // Every setting as YAML, nothing else: it loads again as the same config.
  std::string settings_yaml() const;
  // "resolved: world W, per-rank batch B, micro-batch M, accumulation steps A".
  std::string resolved_note() const;
  // FNV-1a over dump(): equal on every rank that resolved the same config.
  uint64_t hash() const;

  // Where a key's value came from ("x.yaml:12:5", "command line 'train.lr=0.1'", "default").
  std::string origin_of(const std::string& key) const;

  // The schema as help text (key, type, default, description), for `dtrain --help`.
  static std::string schema_help();
  // All key paths in the schema.
  static std::vector<std::string> keys();
  // Checks a number against the schema's range for `key` (a numeric key), throwing the same
  // Error the parser would; for code that takes settings from C++ rather than from a Config
  // (OptimizerOptions, DataConfig), so that each range is written once, in the schema.
  static void check_value(const std::string& key, double value);
  static void check_value(const std::string& key, const std::vector<int64_t>& value);

 private:
  std::map<std::string, std::string> origin_;
  friend struct ConfigAccess;
};

}  // namespace dtrain
