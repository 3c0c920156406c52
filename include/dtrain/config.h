// Config: a run's settings, from YAML plus `section.key=value` overrides, validated against one
// schema and then resolved against the world size.
// Invariants: every key a user can write is in the schema (so `--help`, parsing and the dump
// cannot drift apart); an unknown key, a wrong type or an impossible value is a dtrain::Error
// naming the key path and the YAML file:line (or the command-line argument) it came from; a
// resolved config is immutable and hashes the same on every rank that resolved the same values.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace dtrain {

enum class Precision { kFp32, kBf16, kFp16 };
const char* to_string(Precision p);

struct RunConfig {
  std::string name = "run";
  std::string dir = "runs";  // the run directory is dir/name
  int64_t seed = 0;
  std::string device = "auto";  // auto | cpu | cuda
  int64_t threads = 0;          // intra-op threads per rank; 0 = cores / ranks on this node
  int64_t log_every = 50;       // steps between progress lines; 0 = once per epoch
  double timeout_s = 600;       // a rank stuck this long in one step aborts the job
  bool quiet = false;
  bool tf32 = false;  // fp32 matrix products on tensor cores in TF32 (Ampere and later GPUs)
  double gpu_memory_fraction = 0.0;  // cap the CUDA allocator at this share of the GPU (0 = off)
  int64_t profile_steps = 0;   // steps recorded by the profiler (0 = off)
  int64_t profile_start = 10;  // first recorded step (after warm-up)
};

struct ModelConfig {
  std::string name = "cnn";
  std::vector<int64_t> hidden = {256};  // mlp: widths of hidden layers
  std::vector<int64_t> channels = {16, 32};  // cnn: conv channels
  int64_t fc = 128;                    // cnn: width of the fully connected layer
  double dropout = 0.0;
  bool channels_last = false;  // image models: NHWC memory layout (faster convolutions on GPUs)
  // transformer (gpt) models
  int64_t n_layer = 12;
  int64_t n_head = 12;
  int64_t n_embd = 768;
  int64_t vocab_size = 50304;
  int64_t seq_len = 1024;
};

struct DataConfig {
  std::string format = "idx";  // idx | synthetic
  std::string path = "/usr/share/datasets/fashion-mnist";  // idx: folder with the 4 files
  std::string train_images = "train-images-idx3-ubyte.gz";  // relative to path
  std::string train_labels = "train-labels-idx1-ubyte.gz";
  std::string test_images = "t10k-images-idx3-ubyte.gz";
  std::string test_labels = "t10k-labels-idx1-ubyte.gz";
  bool normalize = true;
  int64_t workers = 2;   // loader threads per rank
  int64_t prefetch = 4;  // batches prepared ahead
  bool pin_memory = true;
  bool shuffle = true;
  // synthetic data
  std::string synthetic_task = "regression";  // regression | classification | tokens
  int64_t synthetic_size = 4096;
  int64_t synthetic_test_size = 1024;
  int64_t synthetic_features = 10;
  int64_t synthetic_classes = 10;
  double synthetic_noise = 0.01;
  // images: one sample's shape, e.g. {3, 224, 224}; tokens: {sequence length}
  std::vector<int64_t> synthetic_shape = {};
};

struct TrainConfig {
  int64_t epochs = 1;
  int64_t max_steps = 0;       // 0 = no limit; else stop after this many optimizer steps
  int64_t global_batch = 256;  // samples per optimizer step, summed over all ranks
  int64_t micro_batch = 0;     // samples per forward/backward on one rank; 0 = the rank's batch,
                               // -1 = auto (largest that fits)
  std::string optimizer = "adamw";  // sgd | adamw | adam
  double lr = 1e-3;
  double momentum = 0.0;
  double weight_decay = 0.0;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  std::string schedule = "constant";  // constant | cosine
  int64_t warmup_steps = 0;
  std::string loss = "cross_entropy";  // cross_entropy | mse
  double clip_grad_norm = 0.0;         // 0 = off
  Precision precision = Precision::kFp32;
  bool fused_optimizer = true;  // fused multi-tensor kernels where available (CUDA, 2.x)
  std::string cuda_graph = "auto";  // auto | on | off: replay the whole step as one CUDA graph
  bool drop_last = true;  // drop the last global batch of an epoch if it is incomplete
  bool eval = true;       // evaluate on the test split after every epoch
};

struct DistConfig {
  std::string backend = "auto";  // auto | nccl | mpi
  double bucket_cap_mb = 25.0;
  double first_bucket_mb = 1.0;
  bool overlap = true;
  std::string grad_dtype = "fp32";  // fp32 | bf16 (gradient communication dtype)
  bool find_unused_parameters = false;
  bool reduce_single_rank = false;  // run the gradient engine even with one rank (to measure it)
};

// What the world size decides. Filled by resolve().
struct Resolved {
  int world = 1;
  int64_t rank_batch = 0;   // global_batch / world
  int64_t micro_batch = 0;  // resolved micro-batch (-1 while `auto` is not measured yet)
  int64_t accum_steps = 1;  // rank_batch / micro_batch
};

class Config {
 public:
  RunConfig run;
  ModelConfig model;
  DataConfig data;
  TrainConfig train;
  DistConfig dist;
  Resolved resolved;

  // Parse a YAML file, then apply `section.key=value` overrides in order.
  static Config from_file(const std::string& path, const std::vector<std::string>& overrides = {});
  // Same from YAML text; `origin` names it in errors (a file name or "<string>").
  static Config from_string(const std::string& yaml, const std::string& origin = "<string>",
                            const std::vector<std::string>& overrides = {});

  // Apply one `section.key=value` override.
  void apply_override(const std::string& assignment);

  // Check the batch arithmetic for `world` ranks and fill `resolved`. Errors name the key.
  void resolve(int world);
  // Set the micro-batch after `auto` measured it (keeps the invariants checked by resolve()).
  void set_micro_batch(int64_t micro);

  // Every setting as YAML (schema order), with the resolved values in a trailing comment block.
  std::string dump() const;
  // FNV-1a over dump(): equal on every rank that resolved the same config.
  uint64_t hash() const;

  // Where a key's value came from ("x.yaml:12:5", "command line 'train.lr=0.1'", "default").
  std::string origin_of(const std::string& key) const;

  // The schema as help text (key, type, default, description), for `dtrain --help`.
  static std::string schema_help();
  // All key paths in the schema.
  static std::vector<std::string> keys();

 private:
  std::map<std::string, std::string> origin_;
  friend struct ConfigAccess;
};

}  // namespace dtrain
