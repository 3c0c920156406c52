// The schema: every config key with its type, help, parser, range and dump, in one table; and
// the names of the config's choices (the enums of config.h), written once each.
#include "config/schema.h"

#include <type_traits>
#include <utility>

#include "config/data_formats.h"
#include "config/values.h"
#include "dtrain/config.h"

namespace dtrain {
namespace config {
namespace {

// The names of each enum's choices, in the order --help lists them.
template <class E>
struct Names;
#define DTRAIN_CHOICE_NAMES(E, ...)                                   \
  template <>                                                         \
  struct Names<E> {                                                   \
    static const std::vector<std::pair<const char*, E>>& list() {     \
      static const std::vector<std::pair<const char*, E>> l = __VA_ARGS__; \
      return l;                                                       \
    }                                                                 \
  };
DTRAIN_CHOICE_NAMES(DeviceKind, {{"auto", DeviceKind::kAuto}, {"cpu", DeviceKind::kCpu}, {"cuda", DeviceKind::kCuda}})
DTRAIN_CHOICE_NAMES(CifarLabels, {{"fine", CifarLabels::kFine}, {"coarse", CifarLabels::kCoarse}})
DTRAIN_CHOICE_NAMES(DecodeMode, {{"cpu", DecodeMode::kCpu}, {"gpu", DecodeMode::kGpu}, {"auto", DecodeMode::kAuto}})
DTRAIN_CHOICE_NAMES(CsvTask, {{"classification", CsvTask::kClassification}, {"regression", CsvTask::kRegression}})
DTRAIN_CHOICE_NAMES(TokenDtype, {{"auto", TokenDtype::kAuto}, {"uint16", TokenDtype::kUint16}, {"uint32", TokenDtype::kUint32}})
DTRAIN_CHOICE_NAMES(SyntheticTask, {{"regression", SyntheticTask::kRegression}, {"classification", SyntheticTask::kClassification},
                                    {"images", SyntheticTask::kImages}, {"tokens", SyntheticTask::kTokens}})
DTRAIN_CHOICE_NAMES(OptimizerKind, {{"sgd", OptimizerKind::kSgd}, {"adam", OptimizerKind::kAdam}, {"adamw", OptimizerKind::kAdamW}})
DTRAIN_CHOICE_NAMES(Schedule, {{"constant", Schedule::kConstant}, {"cosine", Schedule::kCosine},
                               {"linear", Schedule::kLinear}, {"step", Schedule::kStep}})
DTRAIN_CHOICE_NAMES(ResumeSchedule, {{"stretch", ResumeSchedule::kStretch}, {"restart", ResumeSchedule::kRestart}})
DTRAIN_CHOICE_NAMES(Monitor, {{"off", Monitor::kOff}, {"test_loss", Monitor::kTestLoss}, {"test_accuracy", Monitor::kTestAccuracy},
                              {"test_top5_accuracy", Monitor::kTestTop5}, {"val_loss", Monitor::kValLoss},
                              {"val_accuracy", Monitor::kValAccuracy}, {"val_top5_accuracy", Monitor::kValTop5}})
DTRAIN_CHOICE_NAMES(AutoAugment, {{"none", AutoAugment::kNone}, {"trivial_augment_wide", AutoAugment::kTrivialAugmentWide},
                                  {"rand_augment", AutoAugment::kRandAugment}, {"auto_augment", AutoAugment::kAutoAugment}})
DTRAIN_CHOICE_NAMES(LossKind, {{"cross_entropy", LossKind::kCrossEntropy}, {"mse", LossKind::kMse}})
DTRAIN_CHOICE_NAMES(Precision, {{"fp32", Precision::kFp32}, {"bf16", Precision::kBf16}, {"fp16", Precision::kFp16}})
DTRAIN_CHOICE_NAMES(GraphMode, {{"auto", GraphMode::kAuto}, {"on", GraphMode::kOn}, {"off", GraphMode::kOff}})
DTRAIN_CHOICE_NAMES(ActivationCheckpointing, {{"off", ActivationCheckpointing::kOff}, {"blocks", ActivationCheckpointing::kBlocks}})
DTRAIN_CHOICE_NAMES(Backend, {{"auto", Backend::kAuto}, {"nccl", Backend::kNccl}, {"mpi", Backend::kMpi}})
DTRAIN_CHOICE_NAMES(GradDtype, {{"fp32", GradDtype::kFp32}, {"bf16", GradDtype::kBf16}})
DTRAIN_CHOICE_NAMES(ShardOptimizer, {{"false", ShardOptimizer::kOff}, {"true", ShardOptimizer::kState},
                                     {"gradients", ShardOptimizer::kGradients}})
DTRAIN_CHOICE_NAMES(ProgressMode, {{"auto", ProgressMode::kAuto}, {"live", ProgressMode::kLive}, {"lines", ProgressMode::kLines}, {"off", ProgressMode::kOff}})
DTRAIN_CHOICE_NAMES(Attention, {{"auto", Attention::kAuto}, {"flash", Attention::kFlash}, {"cudnn", Attention::kCudnn},
                                {"efficient", Attention::kEfficient}, {"math", Attention::kMath}})
#undef DTRAIN_CHOICE_NAMES

template <class E>
const char* name_of(E v) {
  for (const auto& [name, value] : Names<E>::list())
    if (value == v) return name;
  return "?";
}

template <class E>
std::string names_of() {
  std::vector<std::string> n;
  for (const auto& kv : Names<E>::list()) n.emplace_back(kv.first);
  return join(n, " | ");
}

template <class T>
struct IsNumber : std::false_type {};
template <>
struct IsNumber<int64_t> : std::true_type {};
template <>
struct IsNumber<double> : std::true_type {};

template <class S, class T>
Field field(const std::string& key, S Config::*section, T S::*member, std::string help,
            Check<T> check = {}) {
  Field f;
  f.key = key;
  f.type = type_name(static_cast<T*>(nullptr));
  f.help = std::move(help);
  f.set = [key, section, member, check](Config& c, const YAML::Node& n, const std::string& w) {
    T v = parse_as<T>(key, n, w);
    if (check) check(key, v, w);
    (c.*section).*member = std::move(v);
  };
  f.get = [section, member](const Config& c) { return show((c.*section).*member); };
  if constexpr (IsNumber<T>::value) {
    f.check_number = [key, check](double v, const std::string& w) {
      if (check) check(key, static_cast<T>(v), w);
    };
  } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
    f.check_list = [key, check](const std::vector<int64_t>& v, const std::string& w) {
      if (check) check(key, v, w);
    };
  }
  return f;
}

// A key whose value is one of an enum's names.
template <class S, class E>
Field choice(const std::string& key, S Config::*section, E S::*member, const std::string& help) {
  Field f;
  f.key = key;
  f.type = "choice";
  f.help = help + " (" + names_of<E>() + ")";
  f.set = [key, section, member](Config& c, const YAML::Node& n, const std::string& w) {
    const std::string v = parse_as<std::string>(key, n, w);
    for (const auto& [name, value] : Names<E>::list()) {
      if (v == name) {
        (c.*section).*member = value;
        return;
      }
    }
    bad_value(key, w, "must be one of " + names_of<E>() + ", got '" + v + "'");
  };
  f.get = [section, member](const Config& c) { return std::string(name_of((c.*section).*member)); };
  return f;
}

// data.format: one of the formats config/data_formats.h lists, by name.
Field format_choice(const std::string& key) {
  Field f;
  f.key = key;
  f.type = "choice";
  f.help = "dataset format: " + format_help() + " (" + format_names(" | ") + ")";
  f.set = [key](Config& c, const YAML::Node& n, const std::string& w) {
    const std::string v = parse_as<std::string>(key, n, w);
    const FormatRules* format = find_format(v);
    if (format == nullptr) bad_value(key, w, "must be one of " + format_names(" | ") + ", got '" + v + "'");
    c.data.format = DataFormat(format->name);
  };
  f.get = [](const Config& c) { return std::string(c.data.format.name()); };
  return f;
}

// The conditions of Field::when(): "" when a run with the config reads the key, else why not.
// data.class_names where the format reads data.csv_task: a classification task's only.
std::string classifying(const Config& c) {
  return unread_by_format(c, "data.csv_task").empty() && c.data.csv_task == CsvTask::kRegression
             ? "data.csv_task is regression"
             : "";
}
// data.test_fraction where the format reads data.test_files too: only without them.
std::string without_test_files(const Config& c) {
  return unread_by_format(c, "data.test_files").empty() && !c.data.test_files.empty()
             ? "data.test_files names the test split"
             : "";
}
std::string sgd_only(const Config& c) {
  return c.train.optimizer == OptimizerKind::kSgd ? "" : std::string("train.optimizer is ") + name_of(c.train.optimizer);
}
std::string adam_only(const Config& c) {
  return c.train.optimizer != OptimizerKind::kSgd ? "" : "train.optimizer is sgd";
}
std::string with_weight_decay(const Config& c) { return c.train.weight_decay > 0 ? "" : "train.weight_decay is 0"; }
std::string monitored(const Config& c) { return c.train.monitor != Monitor::kOff ? "" : "train.monitor is off"; }
std::string cross_entropy(const Config& c) {
  return c.train.loss == LossKind::kCrossEntropy ? "" : std::string("train.loss is ") + name_of(c.train.loss);
}
std::string mixing(const Config& c) {
  return c.train.mixup_alpha > 0 || c.train.cutmix_alpha > 0 ? "" : "train.mixup_alpha and train.cutmix_alpha are 0";
}
std::string mixing_both(const Config& c) {
  return c.train.mixup_alpha > 0 && c.train.cutmix_alpha > 0 ? "" : "train.mixup_alpha or train.cutmix_alpha is 0";
}
std::string with_ema(const Config& c) { return c.train.ema_decay > 0 ? "" : "train.ema_decay is 0"; }
std::string rand_augment(const Config& c) {
  return c.data.auto_augment == AutoAugment::kRandAugment ? "" : std::string("data.auto_augment is ") + name_of(c.data.auto_augment);
}
std::string step_schedule(const Config& c) {
  return c.train.schedule == Schedule::kStep ? "" : std::string("train.schedule is ") + name_of(c.train.schedule);
}

}  // namespace

const std::vector<Field>& schema() {
  static const std::vector<Field> fields = [] {
    std::vector<Field> s;
    using C = Config;
    // run
    s.push_back(field("run.name", &C::run, &RunConfig::name, "name of the run (run directory is run.dir/run.name)").always().may_change());
    s.push_back(field("run.dir", &C::run, &RunConfig::dir, "parent folder of run directories").always().may_change());
    s.push_back(field("run.seed", &C::run, &RunConfig::seed, "seed for initialization, shuffling and synthetic data", at_least(0)).always().must_match());
    s.push_back(choice("run.device", &C::run, &RunConfig::device, "where each rank computes; auto = GPU local_rank if CUDA is present").always().may_change());
    s.push_back(field("run.threads", &C::run, &RunConfig::threads, "intra-op CPU threads per rank; 0 = the CPUs this process may use (its affinity mask) / the ranks of the node sharing them; more than those CPUs is capped, with a warning", at_least(0)).always().may_change());
    s.push_back(field("run.log_every", &C::run, &RunConfig::log_every, "steps between progress lines; 0 = once per epoch", at_least(0)).always().may_change());
    s.push_back(field("run.timeout_s", &C::run, &RunConfig::timeout_s, "abort the whole job if one step or collective takes longer than this", positive()).always().may_change());
    s.push_back(field("run.tf32", &C::run, &RunConfig::tf32, "let fp32 matrix products use TF32 tensor cores (faster, ~1e-3 relative error)").always().may_change());
    s.push_back(field("run.gpu_memory_fraction", &C::run, &RunConfig::gpu_memory_fraction, "cap the CUDA caching allocator at this share of the GPU's memory (0 = no cap), e.g. to act like a smaller card", in_range(0.0, 1.0000001)).always().may_change());
    s.push_back(field("run.profile_steps", &C::run, &RunConfig::profile_steps, "record this many training steps with the profiler: a Chrome trace per rank (run directory, trace.rank<R>.json) and a summary of where the time went; 0 = off", at_least(0)).always().may_change());
    s.push_back(field("run.profile_start", &C::run, &RunConfig::profile_start, "first step the profiler records (let warm-up pass first)", at_least(0)).always().may_change());
    s.push_back(field("run.gpu_sample_s", &C::run, &RunConfig::gpu_sample_s, "seconds between samples of each rank's GPU (NVML: utilization, memory, power, clocks)", in_range(0.01, 60.0)).always().may_change());
    s.push_back(field("run.tensorboard", &C::run, &RunConfig::tensorboard, "write TensorBoard event files into the run directory (tensorboard --logdir runs/)").always().may_change());
    s.push_back(field("run.timeline", &C::run, &RunConfig::timeline, "write a Chrome-trace / Perfetto timeline per rank into the run directory (timeline.rank<R>.json, and timeline.json merged): each step's phases and each bucket's all-reduce").always().may_change());
    s.push_back(field("run.quiet", &C::run, &RunConfig::quiet, "print only the summary").always().may_change());
    s.push_back(choice("run.progress", &C::run, &RunConfig::progress, "rank 0's progress: live = one line redrawn in place at every step (epoch, step, loss, samples/s, GPU use, elapsed, ETA); lines = the same as a timestamped line every run.log_every steps (for files and Slurm logs); off = none (the evaluations and the summary still print); auto = live when stdout and stderr are one terminal, else lines (under mpirun stderr is a pipe: lines)").always().may_change());
    // model
    s.push_back(field("model.name", &C::model, &ModelConfig::name, "registered model name (dtrain --help lists them)").always().must_match());
    s.push_back(field("model.hidden", &C::model, &ModelConfig::hidden, "mlp: hidden layer widths", all_positive(true)).by_model().must_match().sizes_model());
    s.push_back(field("model.channels", &C::model, &ModelConfig::channels, "cnn: channels of each conv block", all_positive(false)).by_model().must_match().sizes_model());
    s.push_back(field("model.fc", &C::model, &ModelConfig::fc, "cnn: width of the fully connected layer", at_least(1)).by_model().must_match().sizes_model());
    s.push_back(field("model.batch_norm", &C::model, &ModelConfig::batch_norm, "cnn: a BatchNorm after each conv (before its ReLU; the conv then has no bias), as torchvision's conv-BN-ReLU").by_model().must_match().sizes_model());
    s.push_back(field("model.dropout", &C::model, &ModelConfig::dropout, "dropout probability", in_range(0.0, 1.0)).by_model().must_match());
    s.push_back(field("model.channels_last", &C::model, &ModelConfig::channels_last, "image models: channels-last memory layout (faster convolutions on GPUs)").by_model().must_match());
    s.push_back(field("model.sync_batch_norm", &C::model, &ModelConfig::sync_batch_norm, "models with BatchNorm (resnet18, resnet50, cnn with model.batch_norm): in training, each BatchNorm's mean and variance over the global batch, every rank's samples of the micro-batch, as PyTorch's SyncBatchNorm (one all-gather of the statistics forward, one all-reduce of two sums backward, per BatchNorm), so that N ranks train as one rank on the same global batch; false = over this rank's samples (the running statistics are averaged over the ranks before each evaluation and save)").by_model().must_match());
    s.push_back(field("model.n_layer", &C::model, &ModelConfig::n_layer, "gpt: transformer blocks", at_least(1)).by_model().must_match().sizes_model());
    s.push_back(field("model.n_head", &C::model, &ModelConfig::n_head, "gpt: attention heads", at_least(1)).by_model().must_match());
    s.push_back(field("model.n_embd", &C::model, &ModelConfig::n_embd, "gpt: embedding width", at_least(1)).by_model().must_match().sizes_model());
    s.push_back(field("model.vocab_size", &C::model, &ModelConfig::vocab_size, "gpt: vocabulary size", at_least(2)).by_model().must_match().sizes_model());
    s.push_back(field("model.seq_len", &C::model, &ModelConfig::seq_len, "gpt: context length", at_least(1)).by_model().must_match().sizes_model());
    s.push_back(choice("model.attention", &C::model, &ModelConfig::attention, "gpt on CUDA: the attention kernel (LibTorch's scaled-dot-product backends; auto = LibTorch's choice; the others fall back to math where they cannot run)").by_model().must_match());
    s.push_back(field("model.fused_kernels", &C::model, &ModelConfig::fused_kernels, "on CUDA, dtrain's fused kernels: gpt's residual adds with the LayerNorm after them and Linear bias gradients summed straight into fp32; resnet18/resnet50's BatchNorms (channels-last) with the shortcut add and ReLU after them, one reduction and one pointwise pass each way, and their stem's max-pool; false = LibTorch's ops (the same values within rounding, for comparison)").by_model().must_match());
    s.push_back(field("model.fused_mlp", &C::model, &ModelConfig::fused_mlp, "gpt on CUDA under bf16/fp16, with model.fused_kernels: the MLP's bias + GELU computed in the epilogue of its first GEMM (cuBLASLt); false = a GELU kernel after the GEMM (the same values within rounding, for comparison)").by_model().must_match());
    s.push_back(field("model.fused_head", &C::model, &ModelConfig::fused_head, "gpt on CUDA, with model.fused_kernels: training steps compute the tied head and the cross-entropy in chunks of rows, with their gradients, so the (B*T, vocab) logits are never held at once; false = the whole logits, then the loss (the same values within rounding, for comparison)").by_model().must_match());
    s.push_back(field("model.path", &C::model, &ModelConfig::path, "torchscript: the file of a module saved in Python with torch.jit.script(module).save(path); its forward(x) returns logits (or regression outputs) for a batch; its parameters are trained and checkpointed like a built-in model's, under the names of its state_dict()").by_model().must_match());
    s.push_back(field("model.init_weights", &C::model, &ModelConfig::init_weights, "start from these weights: a state_dict file written by Python's torch.save(model.state_dict(), path) for the model's PyTorch twin (python/dtrain_models.py) or a run's model.pt; loaded strictly (every name, shape and dtype must match); empty = the model's own initialization").always().must_match());
    // data
    s.push_back(format_choice("data.format").always().must_match());
    s.push_back(field("data.path", &C::data, &DataConfig::path, "idx, tokens, text, cifar10, cifar100, csv, image_folder: folder holding the data files (relative names are under it); cifar: the folder of the .bin files, or the one the official archive was unpacked in (holding cifar-10-batches-bin or cifar-100-binary)").by_format().must_match().sizes_data());
    s.push_back(field("data.train_images", &C::data, &DataConfig::train_images, "idx: training images (plain or .gz), relative to data.path").by_format().must_match().sizes_data());
    s.push_back(field("data.train_labels", &C::data, &DataConfig::train_labels, "idx: training labels").by_format().must_match());
    s.push_back(field("data.test_images", &C::data, &DataConfig::test_images, "idx: test images").by_format().must_match().sizes_data());
    s.push_back(field("data.test_labels", &C::data, &DataConfig::test_labels, "idx: test labels").by_format().must_match());
    s.push_back(field("data.normalize", &C::data, &DataConfig::normalize, "standardize inputs with the training split's mean and std (idx: over all pixels; image_folder: with data.pixel_mean and data.pixel_std, on the device; cifar: per channel, on the device; csv: per feature column); false: idx and cifar pixels scaled to [0, 1], csv features as written").by_format().must_match());
    s.push_back(field("data.num_classes", &C::data, &DataConfig::num_classes, "classification: the model's classes; 0 = from the train labels (largest + 1; cifar: 10, 100 or 20); every train and test label must be in [0, num_classes)", at_least(0)).always().must_match());
    s.push_back(field("data.workers", &C::data, &DataConfig::workers, "loader threads per rank (0 = load on the training thread)", at_least(0)).always().may_change());
    s.push_back(field("data.prefetch", &C::data, &DataConfig::prefetch, "batches prepared ahead per rank", at_least(1)).always().may_change());
    s.push_back(field("data.pin_memory", &C::data, &DataConfig::pin_memory, "pin host batches for asynchronous copies to the GPU").always().may_change());
    s.push_back(field("data.shuffle", &C::data, &DataConfig::shuffle, "reshuffle the training set every epoch").always().must_match());
    s.push_back(field("data.train_files", &C::data, &DataConfig::train_files, "tokens, text, cifar10, cifar100, csv: training files, glob patterns separated by commas (nanoGPT's train.bin, llm.c's shards, text files, CIFAR batches, CSV files); cifar: empty = data_batch_1.bin .. data_batch_5.bin (cifar10) or train.bin (cifar100)").by_format().must_match().sizes_data());
    s.push_back(field("data.test_files", &C::data, &DataConfig::test_files, "tokens: evaluation files, read in order in windows of seq_len + 1 (\"\" = no test split); cifar: empty = test_batch.bin (cifar10) or test.bin (cifar100); csv: empty = data.test_fraction of the train rows").by_format().must_match().sizes_data());
    s.push_back(choice("data.token_dtype", &C::data, &DataConfig::token_dtype, "tokens: token width of headerless files (auto: llm.c's header says, else uint16 as nanoGPT writes)").by_format().must_match());
    s.push_back(field("data.seq_len", &C::data, &DataConfig::seq_len, "tokens, text: tokens per sample (0 = model.seq_len)", at_least(0)).by_format().must_match());
    s.push_back(field("data.windows", &C::data, &DataConfig::windows, "tokens, text: training windows per epoch at seeded random positions (0 = train tokens / (seq_len + 1))", at_least(0)).by_format().must_match());
    s.push_back(field("data.test_fraction", &C::data, &DataConfig::test_fraction, "text: the share of the bytes (the end) kept for evaluation; csv without data.test_files: the share of the train files' rows, drawn with run.seed, kept for evaluation", in_range(0.0, 0.9)).by_format(without_test_files).must_match());
    s.push_back(field("data.crop_padding", &C::data, &DataConfig::crop_padding, "cifar10, cifar100, training: RandomCrop(32, padding=P): each image padded by P pixels of value 0 on every side and cropped back to 32x32 at a random place, i.e. moved by up to P pixels each way with zeros shifted in (the CIFAR recipe's 4, with data.hflip); 0 = off; evaluation images are never cropped", int_range(0, 31, "a padding of 32 or more can crop the image away entirely")).by_format().must_match());
    s.push_back(choice("data.cifar_labels", &C::data, &DataConfig::cifar_labels, "cifar100: the fine labels (100 classes) or the coarse ones (20 superclasses)").by_format().must_match());
    s.push_back(field("data.class_names", &C::data, &DataConfig::class_names, "idx, cifar10, cifar100, csv classification: the classes' names, class 0 first, exactly one per class (e.g. Fashion-MNIST's [T-shirt/top, Trouser, ...]); written to preprocess.json, and dtrain predict names the class beside its index; empty = cifar: the names the data folder ships (batches.meta.txt; fine_label_names.txt or coarse_label_names.txt), else none. Image folders name their classes by their folders", distinct_names()).by_format(classifying).must_match());
    s.push_back(choice("data.csv_task", &C::data, &DataConfig::csv_task, "csv: classification (one target column of class ids 0, 1, ...: whole numbers, 3 and 3.0 alike; train.loss cross_entropy) or regression (one or more float target columns; train.loss mse)").by_format().must_match());
    s.push_back(field("data.target_columns", &C::data, &DataConfig::target_columns, "csv: the target column(s) by header name, comma-separated: one for classification, one or more for regression").by_format().must_match());
    s.push_back(field("data.feature_columns", &C::data, &DataConfig::feature_columns, "csv: the input columns by header name, comma-separated, in this order; empty = every column that is not a target, in file order").by_format().must_match());
    s.push_back(field("data.train_dir", &C::data, &DataConfig::train_dir, "image_folder: the training images, <train_dir>/<class>/<file>.jpg|jpeg|png as torchvision's ImageFolder reads them (classes: the sorted subfolder names), relative to data.path").by_format().must_match().sizes_data());
    s.push_back(field("data.test_dir", &C::data, &DataConfig::test_dir, "image_folder: the evaluation images, laid out alike; its classes are looked up by name among the training classes (\"\" = no test split)").by_format().must_match().sizes_data());
    s.push_back(field("data.image_size", &C::data, &DataConfig::image_size, "image_folder: side of the square crop the model sees (torchvision's RandomResizedCrop / CenterCrop size)", at_least(1)).by_format().must_match());
    s.push_back(field("data.resize", &C::data, &DataConfig::resize, "image_folder, evaluation: the shorter side is resized to this before the center crop (0 = data.image_size x 8/7 rounded: 256 for 224)", at_least(0)).by_format().must_match());
    s.push_back(field("data.crop_scale", &C::data, &DataConfig::crop_scale, "image_folder, training: [low, high] share of the image's area a random crop covers (RandomResizedCrop's scale)", ordered_pair(0.0, 1.0)).by_format().must_match());
    s.push_back(field("data.crop_ratio", &C::data, &DataConfig::crop_ratio, "image_folder, training: [low, high] aspect ratio (width / height) of a random crop, drawn log-uniformly (RandomResizedCrop's ratio)", ordered_pair(0.0, 1e6)).by_format().must_match());
    s.push_back(field("data.hflip", &C::data, &DataConfig::hflip, "image_folder, cifar10, cifar100, training: flip half of the images left to right (RandomHorizontalFlip), after the crop; default on for image_folder, off for cifar10 / cifar100 unless set").by_format().must_match());
    s.push_back(field("data.scaled_decode", &C::data, &DataConfig::scaled_decode, "image_folder: decode a JPEG at 1/2, 1/4 or 1/8 of its size (libjpeg-turbo's reduced IDCTs), the smallest that keeps the crop at least data.image_size (evaluation: the shorter side at least data.resize): a fraction of the work for photos several times larger than the crop, pixels a few levels from a full-size decode's; false = always full size, as PIL").by_format().must_match());
    s.push_back(choice("data.decode", &C::data, &DataConfig::decode, "image_folder: where JPEGs are decoded and transformed: cpu = libjpeg-turbo and PIL's resampling in the loader threads; gpu = nvJPEG's batched decoder (the GPU's hardware JPEG decoder where it has one) and the same crops, flips and resampling in CUDA kernels, the loader threads only reading files (a CUDA rank with libnvjpeg, else an error); auto (the default) = gpu where that is possible and fewer than 12 loader threads can decode at once (data.workers, at most the rank's CPUs but one), else cpu, the log saying why. PNG, progressive, CMYK and other JPEGs nvJPEG cannot take decode on the CPU (counted in the log)").by_format().may_change());
    s.push_back(field("data.pixel_mean", &C::data, &DataConfig::pixel_mean, "image_folder with data.normalize: per-channel mean of x / 255, subtracted on the device (ImageNet's by default)", count_of(3)).by_format().must_match());
    s.push_back(field("data.pixel_std", &C::data, &DataConfig::pixel_std, "image_folder with data.normalize: per-channel std of x / 255, divided by on the device (ImageNet's by default)", count_of(3, positive())).by_format().must_match());
    s.push_back(choice("data.auto_augment", &C::data, &DataConfig::auto_augment, "training images: an automatic augmentation of each image after its crop and flip, on its uint8 pixels (on the GPU with data.decode gpu), torchvision's op for op: trivial_augment_wide = TrivialAugmentWide() (one op of 14, a random magnitude of 31 bins), rand_augment = RandAugment(num_ops=data.rand_augment_ops, magnitude=data.rand_augment_magnitude), auto_augment = AutoAugment(AutoAugmentPolicy.IMAGENET); nearest interpolation, fill 0; none = off").by_format().must_match());
    s.push_back(field("data.rand_augment_ops", &C::data, &DataConfig::rand_augment_ops, "rand_augment: ops applied to each image (RandAugment's num_ops)", int_range(1, 14, "RandAugment draws from 14 ops")).by_format(rand_augment).must_match());
    s.push_back(field("data.rand_augment_magnitude", &C::data, &DataConfig::rand_augment_magnitude, "rand_augment: the magnitude bin of every op, of 31 (RandAugment's magnitude)", int_range(0, 30, "RandAugment has 31 magnitude bins, 0..30")).by_format(rand_augment).must_match());
    s.push_back(field("data.random_erase", &C::data, &DataConfig::random_erase, "training images: the probability of erasing a random box of each standardized image to 0 (torchvision's RandomErasing(p, scale=(0.02, 0.33), ratio=(0.3, 3.3), value=0) after Normalize, as its reference recipe); 0 = off", in_range(0.0, 1.0000001)).by_format().must_match());
    s.push_back(field("data.val_fraction", &C::data, &DataConfig::val_fraction, "idx, cifar10, cifar100, csv, tokens: hold out this share of the training set as a validation split, by a fixed rule of run.seed (the same samples on any number of ranks and on resume), evaluated beside the test split; train.monitor val_loss, val_accuracy and val_top5_accuracy choose on it; 0 = none", in_range(0.0, 0.5)).by_format().must_match());
    s.push_back(choice("data.synthetic_task", &C::data, &DataConfig::synthetic_task, "synthetic: what to generate").by_format().must_match());
    s.push_back(field("data.synthetic_shape", &C::data, &DataConfig::synthetic_shape, "synthetic images: sample shape (e.g. [3, 224, 224]); tokens: [sequence length]", all_positive(true)).by_format().must_match().sizes_data());
    s.push_back(field("data.synthetic_size", &C::data, &DataConfig::synthetic_size, "synthetic: training samples", at_least(1)).by_format().must_match().sizes_data());
    s.push_back(field("data.synthetic_test_size", &C::data, &DataConfig::synthetic_test_size, "synthetic: test samples (0 = no test split)", at_least(0)).by_format().must_match().sizes_data());
    s.push_back(field("data.synthetic_features", &C::data, &DataConfig::synthetic_features, "synthetic: input features", at_least(1)).by_format().must_match().sizes_data());
    s.push_back(field("data.synthetic_classes", &C::data, &DataConfig::synthetic_classes, "synthetic: classes (classification)", at_least(2)).by_format().must_match());
    s.push_back(field("data.synthetic_noise", &C::data, &DataConfig::synthetic_noise, "synthetic: noise on regression targets", non_negative()).by_format().must_match());
    s.push_back(field("data.synthetic_uint8", &C::data, &DataConfig::synthetic_uint8, "synthetic images: hold pixels as uint8 0..255, standardized on the device (a quarter of the host memory and of the copy to the GPU)").by_format().must_match());
    // train
    s.push_back(field("train.epochs", &C::train, &TrainConfig::epochs, "passes over the training set", at_least(1)).always().may_change());
    s.push_back(field("train.max_steps", &C::train, &TrainConfig::max_steps, "stop after this many optimizer steps (0 = no limit)", at_least(0)).always().may_change());
    s.push_back(field("train.global_batch", &C::train, &TrainConfig::global_batch, "samples per optimizer step, over all ranks", at_least(1)).always().must_match());
    {
      Field f;
      f.key = "train.micro_batch";
      f.type = "int|auto";
      f.help = "samples per forward/backward on one rank; 0 = the whole rank batch, auto = largest that fits";
      f.set = [](Config& c, const YAML::Node& n, const std::string& w) {
        if (n.IsScalar() && n.Scalar() == "auto") {
          c.train.micro_batch = -1;
          return;
        }
        int64_t v = parse_as<int64_t>("train.micro_batch", n, w);
        if (v < 0) bad_value("train.micro_batch", w, "must be >= 0 or auto, got " + std::to_string(v));
        c.train.micro_batch = v;
      };
      f.get = [](const Config& c) {
        return c.train.micro_batch < 0 ? std::string("auto") : std::to_string(c.train.micro_batch);
      };
      s.push_back(f.always().may_change());
    }
    s.push_back(choice("train.optimizer", &C::train, &TrainConfig::optimizer, "optimizer").always().must_match());
    s.push_back(field("train.lr", &C::train, &TrainConfig::lr, "peak learning rate", positive()).always().may_change());
    s.push_back(field("train.momentum", &C::train, &TrainConfig::momentum, "sgd: momentum", in_range(0.0, 1.0)).when(sgd_only).may_change());
    s.push_back(field("train.dampening", &C::train, &TrainConfig::dampening, "sgd with momentum: dampening of the gradient added to the momentum buffer after the first step (torch.optim.SGD's)", in_range(0.0, 1.0)).when(sgd_only).may_change());
    s.push_back(field("train.nesterov", &C::train, &TrainConfig::nesterov, "sgd: Nesterov momentum (torch.optim.SGD's nesterov); needs train.momentum > 0 and train.dampening 0").when(sgd_only).may_change());
    s.push_back(field("train.weight_decay", &C::train, &TrainConfig::weight_decay, "weight decay (decoupled for adamw)", non_negative()).always().may_change());
    s.push_back(field("train.no_decay_norm_bias", &C::train, &TrainConfig::no_decay_norm_bias, "sgd, adam, adamw: no weight decay for biases and normalization weights; the rule (nanoGPT's and timm's): every parameter of fewer than 2 dimensions is left undecayed, every matrix and conv kernel is decayed").when(with_weight_decay).may_change());
    s.push_back(field("train.beta1", &C::train, &TrainConfig::beta1, "adam/adamw: beta1", in_range(0.0, 1.0)).when(adam_only).may_change());
    s.push_back(field("train.beta2", &C::train, &TrainConfig::beta2, "adam/adamw: beta2", in_range(0.0, 1.0)).when(adam_only).may_change());
    s.push_back(field("train.eps", &C::train, &TrainConfig::eps, "adam/adamw: epsilon", positive()).when(adam_only).may_change());
    s.push_back(choice("train.schedule", &C::train, &TrainConfig::schedule, "learning-rate schedule after warmup: constant, cosine (to zero at the last step), linear (to zero at the last step, torch's LinearLR), step (times train.lr_gamma every train.lr_step_size steps, StepLR)").always().may_change());
    s.push_back(choice("train.resume_schedule", &C::train, &TrainConfig::resume_schedule, "training on from the checkpoint at a finished run's last step (with more train.epochs or train.max_steps): stretch = the schedule of a run planned to the new length, at the step reached (a decayed cosine or linear rate rises to that run's value there); restart = a new schedule over the added steps alone: train.warmup_steps of warmup, then the decay from train.lr to the new end (a warm restart); the log says the rate before and after; a run resumed before its end continues its schedule either way").always().may_change());
    s.push_back(choice("train.monitor", &C::train, &TrainConfig::monitor, "the evaluation metric that says which model is best, for checkpoint.keep_best and train.early_stop_patience: test_loss (lower is better), test_accuracy or test_top5_accuracy (higher); off = none").always().may_change());
    s.push_back(field("train.early_stop_patience", &C::train, &TrainConfig::early_stop_patience, "stop training, the run's end (exit 0, model.pt and a final checkpoint written), after this many evaluations in a row without a better train.monitor than the best so far; 0 = never", at_least(0)).when(monitored).may_change());
    s.push_back(field("train.warmup_steps", &C::train, &TrainConfig::warmup_steps, "linear warmup steps", at_least(0)).always().may_change());
    s.push_back(field("train.lr_step_size", &C::train, &TrainConfig::lr_step_size, "schedule step: optimizer steps after warmup between decays (as torch's StepLR step_size)", at_least(0)).when(step_schedule).may_change());
    s.push_back(field("train.lr_gamma", &C::train, &TrainConfig::lr_gamma, "schedule step: the learning rate's factor at each decay (StepLR's gamma)", in_range(0.0, 1.0)).when(step_schedule).may_change());
    s.push_back(choice("train.loss", &C::train, &TrainConfig::loss, "loss function").always().must_match());
    s.push_back(field("train.label_smoothing", &C::train, &TrainConfig::label_smoothing, "cross_entropy in training: the targets' probabilities times 1 - e plus e / classes (PyTorch's CrossEntropyLoss(label_smoothing=e)); evaluations report the plain cross-entropy; 0 = off", in_range(0.0, 0.9999)).when(cross_entropy).may_change());
    s.push_back(field("train.mixup_alpha", &C::train, &TrainConfig::mixup_alpha, "image classification: Mixup of each rank's batch with itself rolled by one, lambda ~ Beta(alpha, alpha), inputs and one-hot targets mixed alike (torchvision's RandomMixup / v2.MixUp); 0 = off", non_negative()).when(cross_entropy).may_change());
    s.push_back(field("train.cutmix_alpha", &C::train, &TrainConfig::cutmix_alpha, "image classification: CutMix of each rank's batch with itself rolled by one, a box of area 1 - lambda, lambda ~ Beta(alpha, alpha), pasted from the rolled batch, the targets mixed by the box's true share (torchvision's RandomCutmix / v2.CutMix); 0 = off", non_negative()).when(cross_entropy).may_change());
    s.push_back(field("train.cutmix_prob", &C::train, &TrainConfig::cutmix_prob, "with train.mixup_alpha and train.cutmix_alpha both on: the probability that a batch takes CutMix rather than Mixup (torchvision's RandomChoice of the two: 0.5)", in_range(0.0, 1.0000001)).when(mixing_both).may_change());
    s.push_back(field("train.mix_prob", &C::train, &TrainConfig::mix_prob, "the probability that a batch is mixed at all (timm's mixup_prob); 1 = every batch", in_range(0.0, 1.0000001)).when(mixing).may_change());
    s.push_back(field("train.ema_decay", &C::train, &TrainConfig::ema_decay, "an exponential moving average of the weights and buffers, torchvision's reference rule (--model-ema-decay): every train.ema_every steps ema = d ema + (1 - d) model, with d = 1 - min(1, (1 - ema_decay) global_batch ema_every / epochs); evaluations report the model and its EMA; checkpoints carry it; 0 = off", in_range(0.0, 0.9999999999)).always().may_change());
    s.push_back(field("train.ema_every", &C::train, &TrainConfig::ema_every, "optimizer steps between EMA updates (torchvision's --model-ema-steps)", at_least(1)).when(with_ema).may_change());
    s.push_back(field("train.ema_warmup_steps", &C::train, &TrainConfig::ema_warmup_steps, "until this step each EMA update copies the model instead of averaging (torchvision resets its EMA during the learning-rate warmup); -1 = train.warmup_steps", at_least(-1)).when(with_ema).may_change());
    s.push_back(field("train.ema_output", &C::train, &TrainConfig::ema_output, "model.pt and best/ hold the EMA's weights and train.monitor reads the EMA's evaluation (model.json and best.json say so); false = the trained model's").when(with_ema).may_change());
    s.push_back(field("train.clip_grad_norm", &C::train, &TrainConfig::clip_grad_norm, "clip the global gradient norm to this (0 = off)", non_negative()).always().may_change());
    s.push_back(choice("train.precision", &C::train, &TrainConfig::precision, "compute precision; master weights stay fp32").always().may_change());
    s.push_back(field("train.fused_optimizer", &C::train, &TrainConfig::fused_optimizer, "use fused multi-tensor optimizer kernels where LibTorch has them (CUDA, 2.x); else multi-tensor (foreach) ops").always().may_change());
    s.push_back(choice("train.cuda_graph", &C::train, &TrainConfig::cuda_graph, "capture the whole training step (forward, backward, optimizer) in a CUDA graph after warm-up and replay it: one launch per step. Needs CUDA, gradients over NCCL when there are several ranks (the bucketed all-reduce is captured too), equal batch shapes, a fused optimizer and no loss scaler (fp16, train.skip_nonfinite); auto = whenever that holds").always().may_change());
    s.push_back(choice("train.activation_checkpointing", &C::train, &TrainConfig::activation_checkpointing, "blocks = activation checkpointing: in training, each of the model's blocks (gpt: every transformer block; resnet18/50: every residual block) keeps only its inputs in the forward pass and runs again in the backward pass, for its gradients: less GPU memory for activations (a larger train.micro_batch fits) for about one more forward pass of compute; the same gradients, dropout's included. A model without blocks refuses blocks. off = keep every activation").always().may_change());
    s.push_back(field("train.drop_last", &C::train, &TrainConfig::drop_last, "drop an epoch's last incomplete global batch").always().must_match());
    s.push_back(field("train.eval", &C::train, &TrainConfig::eval, "evaluate on the test split after every epoch").always().may_change());
    s.push_back(field("train.eval_every_steps", &C::train, &TrainConfig::eval_every_steps, "evaluate on the test split every this many optimizer steps as well, inside epochs (0 = off; a step that ends an epoch evaluated by train.eval is evaluated once); the data needs a test split", at_least(0)).always().may_change());
    s.push_back(field("train.skip_nonfinite", &C::train, &TrainConfig::skip_nonfinite, "skip an optimizer step whose loss or gradients are not finite (one host sync per step); false = stop the run with an error naming the step").always().may_change());
    // dist
    s.push_back(choice("dist.backend", &C::dist, &DistConfig::backend, "gradient communication; auto = NCCL on GPUs, MPI on CPUs").always().may_change());
    s.push_back(field("dist.bucket_cap_mb", &C::dist, &DistConfig::bucket_cap_mb, "gradient bucket size in MB", positive()).always().may_change());
    s.push_back(field("dist.first_bucket_mb", &C::dist, &DistConfig::first_bucket_mb, "size of the first (last-layer) bucket in MB", positive()).always().may_change());
    s.push_back(field("dist.overlap", &C::dist, &DistConfig::overlap, "all-reduce buckets while backward runs (false: after backward, for debugging)").always().may_change());
    s.push_back(choice("dist.grad_dtype", &C::dist, &DistConfig::grad_dtype, "dtype of gradients on the wire").always().may_change());
    s.push_back(field("dist.find_unused_parameters", &C::dist, &DistConfig::find_unused_parameters, "allow parameters that get no gradient in a step").always().may_change());
    s.push_back(field("dist.reduce_single_rank", &C::dist, &DistConfig::reduce_single_rank, "run the bucketed all-reduce even with one rank (to measure its cost)").always().may_change());
    s.push_back(choice("dist.shard_optimizer", &C::dist, &DistConfig::shard_optimizer, "true = ZeRO-1: each rank keeps the optimizer state (moments, momentum) of 1/world of the parameters' values, a flat shard that holds pieces of the tensors it crosses; the gradients are reduce-scattered into the shards (each rank receives the averages of its own values only), each rank updates its shard and broadcasts the updated values to every rank after every step. gradients = ZeRO-2: besides, each bucket's gradients and its buffer are released as soon as its reduce-scatter is sent, so past backward a rank holds no gradient beyond its shard. Checkpoints hold the whole state, so a run resumes on any number of ranks, sharded or not, at any stage. false = every rank keeps everything. One rank: a warning, nothing sharded; fewer values than ranks: an error").always().may_change());
    // checkpoint
    s.push_back(field("checkpoint.every_steps", &C::checkpoint, &CheckpointConfig::every_steps, "save a checkpoint every this many optimizer steps (0 = off)", at_least(0)).always().may_change());
    s.push_back(field("checkpoint.every_epoch", &C::checkpoint, &CheckpointConfig::every_epoch, "save a checkpoint at the end of every epoch").always().may_change());
    s.push_back(field("checkpoint.keep_best", &C::checkpoint, &CheckpointConfig::keep_best, "after each evaluation with a better train.monitor than before, the model's weights in <run dir>/best/ (model.pt, preprocess.json, best.json with the metric, its value and the step): dtrain eval --weights runs/x/best/model.pt").when(monitored).may_change());
    s.push_back(field("checkpoint.keep", &C::checkpoint, &CheckpointConfig::keep, "complete checkpoints kept; older ones are removed once a newer one is complete", at_least(1)).always().may_change());
    s.push_back(field("checkpoint.dir", &C::checkpoint, &CheckpointConfig::dir, "folder of the checkpoints, shared by all ranks; empty = <run dir>/checkpoints").always().may_change());
    s.push_back(field("checkpoint.resume", &C::checkpoint, &CheckpointConfig::resume, "auto = continue from the newest complete checkpoint in the folder if there is one; none = start fresh; or the path of a checkpoint to continue from").always().may_change());
    return s;
  }();
  return fields;
}

Field& Field::by_format(std::function<std::string(const Config&)> also) {
  read_by_formats = true;
  return when([key = key, also = std::move(also)](const Config& c) {
    std::string why = unread_by_format(c, key);
    return why.empty() && also ? also(c) : why;
  });
}

const Field* find_field(const std::string& key) {
  for (const auto& f : schema())
    if (f.key == key) return &f;
  return nullptr;
}

const std::vector<std::string>& sections() {
  static const std::vector<std::string> s = {"run", "model", "data", "train", "dist", "checkpoint"};
  return s;
}

}  // namespace config

const char* to_string(DeviceKind v) { return config::name_of(v); }
const char* to_string(SyntheticTask v) { return config::name_of(v); }
const char* to_string(OptimizerKind v) { return config::name_of(v); }
const char* to_string(Schedule v) { return config::name_of(v); }
const char* to_string(ResumeSchedule v) { return config::name_of(v); }
const char* to_string(Monitor v) { return config::name_of(v); }
const char* to_string(LossKind v) { return config::name_of(v); }
const char* to_string(AutoAugment v) { return config::name_of(v); }
const char* to_string(Precision v) { return config::name_of(v); }
const char* to_string(GraphMode v) { return config::name_of(v); }
const char* to_string(ActivationCheckpointing v) { return config::name_of(v); }
const char* to_string(Backend v) { return config::name_of(v); }
const char* to_string(GradDtype v) { return config::name_of(v); }
const char* to_string(ShardOptimizer v) { return config::name_of(v); }
const char* to_string(Attention v) { return config::name_of(v); }
const char* to_string(TokenDtype v) { return config::name_of(v); }
const char* to_string(CifarLabels v) { return config::name_of(v); }
const char* to_string(DecodeMode v) { return config::name_of(v); }
const char* to_string(CsvTask v) { return config::name_of(v); }
const char* to_string(ProgressMode v) { return config::name_of(v); }

}  // namespace dtrain
