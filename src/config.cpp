// Config parsing, validation and resolution. The schema below is the single source of truth for
// every key: parsing, `--help`, the dump and the hash all walk it.
#include "dtrain/config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>

#include "dtrain/error.h"

namespace dtrain {

const char* to_string(Precision p) {
  switch (p) {
    case Precision::kFp32: return "fp32";
    case Precision::kBf16: return "bf16";
    case Precision::kFp16: return "fp16";
  }
  return "?";
}

namespace {

// ---- value formatting ------------------------------------------------------------------------
std::string format_double(double v) {
  char buf[64];
  for (int prec = 6; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*g", prec, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  std::string s = buf;
  // Keep a float looking like a float in YAML ("1" -> "1.0") so the dump re-parses identically.
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

std::string quote_if_needed(const std::string& s) {
  YAML::Emitter out;
  out << s;
  return out.c_str();
}

// ---- the schema ------------------------------------------------------------------------------
struct Field {
  std::string key;   // "section.name"
  std::string type;  // shown in --help
  std::string help;
  std::function<void(Config&, const YAML::Node&, const std::string& where)> set;
  std::function<std::string(const Config&)> get;
};

[[noreturn]] void bad_value(const std::string& key, const std::string& where,
                            const std::string& what) {
  throw Error(what + " (" + where + ")", key);
}

std::string scalar_text(const YAML::Node& n) {
  if (n.IsScalar()) return n.Scalar();
  if (n.IsNull()) return "null";
  YAML::Emitter out;
  out << YAML::Flow << n;
  return out.c_str();
}

// Typed parsers. Each throws an Error naming the key and the origin of the value.
int64_t parse_int(const std::string& key, const YAML::Node& n, const std::string& where) {
  if (!n.IsScalar()) bad_value(key, where, "expected an integer, got '" + scalar_text(n) + "'");
  const std::string& s = n.Scalar();
  try {
    size_t pos = 0;
    long long v = std::stoll(s, &pos, 10);
    if (pos == s.size()) return v;
  } catch (const std::exception&) {
  }
  // Allow integral floats written as 1e3 or 256.0.
  try {
    size_t pos = 0;
    double d = std::stod(s, &pos);
    if (pos == s.size() && std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e18)
      return static_cast<int64_t>(d);
  } catch (const std::exception&) {
  }
  bad_value(key, where, "expected an integer, got '" + s + "'");
}

double parse_double(const std::string& key, const YAML::Node& n, const std::string& where) {
  if (!n.IsScalar()) bad_value(key, where, "expected a number, got '" + scalar_text(n) + "'");
  const std::string& s = n.Scalar();
  try {
    size_t pos = 0;
    double v = std::stod(s, &pos);
    if (pos == s.size() && std::isfinite(v)) return v;
  } catch (const std::exception&) {
  }
  bad_value(key, where, "expected a finite number, got '" + s + "'");
}

bool parse_bool(const std::string& key, const YAML::Node& n, const std::string& where) {
  if (n.IsScalar()) {
    std::string s = n.Scalar();
    std::transform(s.begin(), s.end(), s.begin(), ::tolower);
    if (s == "true" || s == "yes" || s == "on" || s == "1") return true;
    if (s == "false" || s == "no" || s == "off" || s == "0") return false;
  }
  bad_value(key, where, "expected true or false, got '" + scalar_text(n) + "'");
}

std::string parse_string(const std::string& key, const YAML::Node& n, const std::string& where) {
  if (!n.IsScalar()) bad_value(key, where, "expected a string, got '" + scalar_text(n) + "'");
  return n.Scalar();
}

std::vector<int64_t> parse_int_list(const std::string& key, const YAML::Node& n,
                                    const std::string& where) {
  std::vector<int64_t> out;
  if (n.IsSequence()) {
    for (const auto& e : n) out.push_back(parse_int(key, e, where));
  } else if (n.IsScalar()) {
    // "64,32" or "[64, 32]" from the command line
    std::string s = n.Scalar();
    s.erase(std::remove_if(s.begin(), s.end(), [](char c) { return c == '[' || c == ']'; }),
            s.end());
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, ',')) {
      item.erase(0, item.find_first_not_of(" \t"));
      item.erase(item.find_last_not_of(" \t") + 1);
      if (!item.empty()) out.push_back(parse_int(key, YAML::Node(item), where));
    }
  } else if (!n.IsNull()) {
    bad_value(key, where, "expected a list of integers, got '" + scalar_text(n) + "'");
  }
  return out;
}

std::string join(const std::vector<std::string>& v, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
  return out;
}

// Value checks.
template <class T>
using Check = std::function<void(const std::string& key, const T& v, const std::string& where)>;

Check<int64_t> at_least(int64_t lo) {
  return [lo](const std::string& key, const int64_t& v, const std::string& where) {
    if (v < lo) bad_value(key, where, "must be >= " + std::to_string(lo) + ", got " +
                                          std::to_string(v));
  };
}
Check<double> positive() {
  return [](const std::string& key, const double& v, const std::string& where) {
    if (!(v > 0)) bad_value(key, where, "must be > 0, got " + format_double(v));
  };
}
Check<double> non_negative() {
  return [](const std::string& key, const double& v, const std::string& where) {
    if (v < 0) bad_value(key, where, "must be >= 0, got " + format_double(v));
  };
}
Check<double> in_range(double lo, double hi) {  // [lo, hi)
  return [lo, hi](const std::string& key, const double& v, const std::string& where) {
    if (v < lo || v >= hi)
      bad_value(key, where, "must be in [" + format_double(lo) + ", " + format_double(hi) +
                                "), got " + format_double(v));
  };
}
Check<std::string> one_of(std::vector<std::string> choices) {
  return [choices](const std::string& key, const std::string& v, const std::string& where) {
    if (std::find(choices.begin(), choices.end(), v) == choices.end())
      bad_value(key, where, "must be one of " + join(choices, " | ") + ", got '" + v + "'");
  };
}
Check<std::vector<int64_t>> all_positive(bool allow_empty) {
  return [allow_empty](const std::string& key, const std::vector<int64_t>& v,
                       const std::string& where) {
    if (v.empty() && !allow_empty) bad_value(key, where, "must not be empty");
    for (int64_t x : v)
      if (x <= 0) bad_value(key, where, "every entry must be > 0, got " + std::to_string(x));
  };
}

template <class T>
T parse_as(const std::string& key, const YAML::Node& n, const std::string& where);
template <>
int64_t parse_as<int64_t>(const std::string& k, const YAML::Node& n, const std::string& w) {
  return parse_int(k, n, w);
}
template <>
double parse_as<double>(const std::string& k, const YAML::Node& n, const std::string& w) {
  return parse_double(k, n, w);
}
template <>
bool parse_as<bool>(const std::string& k, const YAML::Node& n, const std::string& w) {
  return parse_bool(k, n, w);
}
template <>
std::string parse_as<std::string>(const std::string& k, const YAML::Node& n,
                                  const std::string& w) {
  return parse_string(k, n, w);
}
template <>
std::vector<int64_t> parse_as<std::vector<int64_t>>(const std::string& k, const YAML::Node& n,
                                                    const std::string& w) {
  return parse_int_list(k, n, w);
}

std::string show(int64_t v) { return std::to_string(v); }
std::string show(double v) { return format_double(v); }
std::string show(bool v) { return v ? "true" : "false"; }
std::string show(const std::string& v) { return quote_if_needed(v); }
std::string show(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

const char* type_name(int64_t*) { return "int"; }
const char* type_name(double*) { return "float"; }
const char* type_name(bool*) { return "bool"; }
const char* type_name(std::string*) { return "string"; }
const char* type_name(std::vector<int64_t>*) { return "int list"; }

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
  return f;
}

template <class S>
Field choice(const std::string& key, S Config::*section, std::string S::*member,
             std::vector<std::string> choices, const std::string& help) {
  Field f = field(key, section, member, help + " (" + join(choices, " | ") + ")",
                  one_of(choices));
  f.type = "choice";
  return f;
}

const std::vector<Field>& schema() {
  static const std::vector<Field> fields = [] {
    std::vector<Field> s;
    using C = Config;
    // run
    s.push_back(field("run.name", &C::run, &RunConfig::name, "name of the run (run directory is run.dir/run.name)"));
    s.push_back(field("run.dir", &C::run, &RunConfig::dir, "parent folder of run directories"));
    s.push_back(field("run.seed", &C::run, &RunConfig::seed, "seed for initialization, shuffling and synthetic data", at_least(0)));
    s.push_back(choice("run.device", &C::run, &RunConfig::device, {"auto", "cpu", "cuda"}, "where each rank computes; auto = GPU local_rank if CUDA is present"));
    s.push_back(field("run.threads", &C::run, &RunConfig::threads, "intra-op CPU threads per rank; 0 = cores / ranks on the node", at_least(0)));
    s.push_back(field("run.log_every", &C::run, &RunConfig::log_every, "steps between progress lines; 0 = once per epoch", at_least(0)));
    s.push_back(field("run.timeout_s", &C::run, &RunConfig::timeout_s, "abort the whole job if one step or collective takes longer than this", positive()));
    s.push_back(field("run.tf32", &C::run, &RunConfig::tf32, "let fp32 matrix products use TF32 tensor cores (faster, ~1e-3 relative error)"));
    s.push_back(field("run.gpu_memory_fraction", &C::run, &RunConfig::gpu_memory_fraction, "cap the CUDA caching allocator at this share of the GPU's memory (0 = no cap), e.g. to act like a smaller card", in_range(0.0, 1.0000001)));
    s.push_back(field("run.profile_steps", &C::run, &RunConfig::profile_steps, "record this many training steps with the profiler: a Chrome trace per rank (run directory, trace.rank<R>.json) and a summary of where the time went; 0 = off", at_least(0)));
    s.push_back(field("run.profile_start", &C::run, &RunConfig::profile_start, "first step the profiler records (let warm-up pass first)", at_least(0)));
    s.push_back(field("run.quiet", &C::run, &RunConfig::quiet, "print only the summary"));
    // model
    s.push_back(field("model.name", &C::model, &ModelConfig::name, "registered model name (dtrain --help lists them)"));
    s.push_back(field("model.hidden", &C::model, &ModelConfig::hidden, "mlp: hidden layer widths", all_positive(true)));
    s.push_back(field("model.channels", &C::model, &ModelConfig::channels, "cnn: channels of each conv block", all_positive(false)));
    s.push_back(field("model.fc", &C::model, &ModelConfig::fc, "cnn: width of the fully connected layer", at_least(1)));
    s.push_back(field("model.dropout", &C::model, &ModelConfig::dropout, "dropout probability", in_range(0.0, 1.0)));
    s.push_back(field("model.channels_last", &C::model, &ModelConfig::channels_last, "image models: channels-last memory layout (faster convolutions on GPUs)"));
    s.push_back(field("model.n_layer", &C::model, &ModelConfig::n_layer, "gpt: transformer blocks", at_least(1)));
    s.push_back(field("model.n_head", &C::model, &ModelConfig::n_head, "gpt: attention heads", at_least(1)));
    s.push_back(field("model.n_embd", &C::model, &ModelConfig::n_embd, "gpt: embedding width", at_least(1)));
    s.push_back(field("model.vocab_size", &C::model, &ModelConfig::vocab_size, "gpt: vocabulary size", at_least(2)));
    s.push_back(field("model.seq_len", &C::model, &ModelConfig::seq_len, "gpt: context length", at_least(1)));
    // data
    s.push_back(choice("data.format", &C::data, &DataConfig::format, {"idx", "synthetic"}, "dataset format"));
    s.push_back(field("data.path", &C::data, &DataConfig::path, "idx: folder holding the files below"));
    s.push_back(field("data.train_images", &C::data, &DataConfig::train_images, "idx: training images (plain or .gz), relative to data.path"));
    s.push_back(field("data.train_labels", &C::data, &DataConfig::train_labels, "idx: training labels"));
    s.push_back(field("data.test_images", &C::data, &DataConfig::test_images, "idx: test images"));
    s.push_back(field("data.test_labels", &C::data, &DataConfig::test_labels, "idx: test labels"));
    s.push_back(field("data.normalize", &C::data, &DataConfig::normalize, "standardize inputs with the training split's mean and std"));
    s.push_back(field("data.workers", &C::data, &DataConfig::workers, "loader threads per rank (0 = load on the training thread)", at_least(0)));
    s.push_back(field("data.prefetch", &C::data, &DataConfig::prefetch, "batches prepared ahead per rank", at_least(1)));
    s.push_back(field("data.pin_memory", &C::data, &DataConfig::pin_memory, "pin host batches for asynchronous copies to the GPU"));
    s.push_back(field("data.shuffle", &C::data, &DataConfig::shuffle, "reshuffle the training set every epoch"));
    s.push_back(choice("data.synthetic_task", &C::data, &DataConfig::synthetic_task, {"regression", "classification", "images", "tokens"}, "synthetic: what to generate"));
    s.push_back(field("data.synthetic_shape", &C::data, &DataConfig::synthetic_shape, "synthetic images: sample shape (e.g. [3, 224, 224]); tokens: [sequence length]", all_positive(true)));
    s.push_back(field("data.synthetic_size", &C::data, &DataConfig::synthetic_size, "synthetic: training samples", at_least(1)));
    s.push_back(field("data.synthetic_test_size", &C::data, &DataConfig::synthetic_test_size, "synthetic: test samples (0 = no test split)", at_least(0)));
    s.push_back(field("data.synthetic_features", &C::data, &DataConfig::synthetic_features, "synthetic: input features", at_least(1)));
    s.push_back(field("data.synthetic_classes", &C::data, &DataConfig::synthetic_classes, "synthetic: classes (classification)", at_least(2)));
    s.push_back(field("data.synthetic_noise", &C::data, &DataConfig::synthetic_noise, "synthetic: noise on regression targets", non_negative()));
    // train
    s.push_back(field("train.epochs", &C::train, &TrainConfig::epochs, "passes over the training set", at_least(1)));
    s.push_back(field("train.max_steps", &C::train, &TrainConfig::max_steps, "stop after this many optimizer steps (0 = no limit)", at_least(0)));
    s.push_back(field("train.global_batch", &C::train, &TrainConfig::global_batch, "samples per optimizer step, over all ranks", at_least(1)));
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
        int64_t v = parse_int("train.micro_batch", n, w);
        if (v < 0) bad_value("train.micro_batch", w, "must be >= 0 or auto, got " + std::to_string(v));
        c.train.micro_batch = v;
      };
      f.get = [](const Config& c) {
        return c.train.micro_batch < 0 ? std::string("auto") : std::to_string(c.train.micro_batch);
      };
      s.push_back(f);
    }
    s.push_back(choice("train.optimizer", &C::train, &TrainConfig::optimizer, {"sgd", "adam", "adamw"}, "optimizer"));
    s.push_back(field("train.lr", &C::train, &TrainConfig::lr, "peak learning rate", positive()));
    s.push_back(field("train.momentum", &C::train, &TrainConfig::momentum, "sgd: momentum", in_range(0.0, 1.0)));
    s.push_back(field("train.weight_decay", &C::train, &TrainConfig::weight_decay, "weight decay (decoupled for adamw)", non_negative()));
    s.push_back(field("train.beta1", &C::train, &TrainConfig::beta1, "adam/adamw: beta1", in_range(0.0, 1.0)));
    s.push_back(field("train.beta2", &C::train, &TrainConfig::beta2, "adam/adamw: beta2", in_range(0.0, 1.0)));
    s.push_back(field("train.eps", &C::train, &TrainConfig::eps, "adam/adamw: epsilon", positive()));
    s.push_back(choice("train.schedule", &C::train, &TrainConfig::schedule, {"constant", "cosine"}, "learning-rate schedule after warmup"));
    s.push_back(field("train.warmup_steps", &C::train, &TrainConfig::warmup_steps, "linear warmup steps", at_least(0)));
    s.push_back(choice("train.loss", &C::train, &TrainConfig::loss, {"cross_entropy", "mse"}, "loss function"));
    s.push_back(field("train.clip_grad_norm", &C::train, &TrainConfig::clip_grad_norm, "clip the global gradient norm to this (0 = off)", non_negative()));
    {
      Field f;
      f.key = "train.precision";
      f.type = "choice";
      f.help = "compute precision (fp32 | bf16 | fp16); master weights stay fp32";
      f.set = [](Config& c, const YAML::Node& n, const std::string& w) {
        std::string v = parse_string("train.precision", n, w);
        one_of({"fp32", "bf16", "fp16"})("train.precision", v, w);
        c.train.precision = v == "bf16" ? Precision::kBf16 : v == "fp16" ? Precision::kFp16 : Precision::kFp32;
      };
      f.get = [](const Config& c) { return std::string(to_string(c.train.precision)); };
      s.push_back(f);
    }
    s.push_back(field("train.fused_optimizer", &C::train, &TrainConfig::fused_optimizer, "use fused multi-tensor optimizer kernels where LibTorch has them (CUDA, 2.x); else multi-tensor (foreach) ops"));
    s.push_back(choice("train.cuda_graph", &C::train, &TrainConfig::cuda_graph, {"auto", "on", "off"}, "capture the whole training step (forward, backward, optimizer) in a CUDA graph after warm-up and replay it: one launch per step. Needs one rank on CUDA, equal batch shapes, a fused optimizer, no fp16 loss scaling; auto = whenever that holds"));
    s.push_back(field("train.drop_last", &C::train, &TrainConfig::drop_last, "drop an epoch's last incomplete global batch"));
    s.push_back(field("train.eval", &C::train, &TrainConfig::eval, "evaluate on the test split after every epoch"));
    // dist
    s.push_back(choice("dist.backend", &C::dist, &DistConfig::backend, {"auto", "nccl", "mpi"}, "gradient communication; auto = NCCL on GPUs, MPI on CPUs"));
    s.push_back(field("dist.bucket_cap_mb", &C::dist, &DistConfig::bucket_cap_mb, "gradient bucket size in MB", positive()));
    s.push_back(field("dist.first_bucket_mb", &C::dist, &DistConfig::first_bucket_mb, "size of the first (last-layer) bucket in MB", positive()));
    s.push_back(field("dist.overlap", &C::dist, &DistConfig::overlap, "all-reduce buckets while backward runs (false: after backward, for debugging)"));
    s.push_back(choice("dist.grad_dtype", &C::dist, &DistConfig::grad_dtype, {"fp32", "bf16"}, "dtype of gradients on the wire"));
    s.push_back(field("dist.find_unused_parameters", &C::dist, &DistConfig::find_unused_parameters, "allow parameters that get no gradient in a step"));
    s.push_back(field("dist.reduce_single_rank", &C::dist, &DistConfig::reduce_single_rank, "run the bucketed all-reduce even with one rank (to measure its cost)"));
    return s;
  }();
  return fields;
}

const Field* find_field(const std::string& key) {
  for (const auto& f : schema())
    if (f.key == key) return &f;
  return nullptr;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string suggestion(const std::string& key) {
  std::string best;
  size_t best_d = 4;
  for (const auto& f : schema()) {
    size_t d = edit_distance(key, f.key);
    if (d < best_d) best_d = d, best = f.key;
    // right key in the wrong section: "lr" under model
    auto dot = f.key.find('.');
    auto kdot = key.find('.');
    if (kdot != std::string::npos && f.key.substr(dot) == key.substr(kdot) && best.empty())
      best = f.key;
  }
  return best.empty() ? "" : "; did you mean '" + best + "'?";
}

const std::vector<std::string>& sections() {
  static const std::vector<std::string> s = {"run", "model", "data", "train", "dist"};
  return s;
}

std::string mark_of(const std::string& origin, const YAML::Node& n) {
  const YAML::Mark m = n.Mark();
  if (m.line < 0) return origin;
  return origin + ":" + std::to_string(m.line + 1) + ":" + std::to_string(m.column + 1);
}

}  // namespace

struct ConfigAccess {
  static void load_node(Config& c, const YAML::Node& root, const std::string& origin) {
    if (root.IsNull()) return;  // empty file: all defaults
    if (!root.IsMap())
      throw Error("the top level must be a map of sections (" + join(sections(), ", ") + ")",
                  mark_of(origin, root));
    for (const auto& sec : root) {
      const std::string name = sec.first.as<std::string>();
      const std::string sec_where = mark_of(origin, sec.first);
      if (std::find(sections().begin(), sections().end(), name) == sections().end())
        throw Error("unknown section '" + name + "' (" + sec_where + "); sections are " +
                        join(sections(), ", "),
                    name);
      if (sec.second.IsNull()) continue;
      if (!sec.second.IsMap())
        throw Error("expected a map of keys under '" + name + "' (" + sec_where + ")", name);
      for (const auto& kv : sec.second) {
        const std::string key = name + "." + kv.first.as<std::string>();
        const std::string where = mark_of(origin, kv.first);
        const Field* f = find_field(key);
        if (!f) throw Error("unknown key (" + where + ")" + suggestion(key), key);
        f->set(c, kv.second, where);
        c.origin_[key] = where;
      }
    }
  }
};

Config Config::from_string(const std::string& yaml, const std::string& origin,
                           const std::vector<std::string>& overrides) {
  Config c;
  YAML::Node root;
  try {
    root = YAML::Load(yaml);
  } catch (const YAML::Exception& e) {
    std::string where = origin;
    if (e.mark.line >= 0)
      where += ":" + std::to_string(e.mark.line + 1) + ":" + std::to_string(e.mark.column + 1);
    throw Error("malformed YAML: " + e.msg, where);
  }
  ConfigAccess::load_node(c, root, origin);
  for (const auto& o : overrides) c.apply_override(o);
  return c;
}

Config Config::from_file(const std::string& path, const std::vector<std::string>& overrides) {
  std::ifstream in(path);
  if (!in) throw Error("cannot open the config file", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return from_string(ss.str(), path, overrides);
}

void Config::apply_override(const std::string& assignment) {
  const std::string where = "command line '" + assignment + "'";
  auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    throw Error("an override must look like section.key=value", where);
  const std::string key = assignment.substr(0, eq);
  const std::string value = assignment.substr(eq + 1);
  const Field* f = find_field(key);
  if (!f) throw Error("unknown key (" + where + ")" + suggestion(key), key);
  YAML::Node n;
  try {
    n = YAML::Load(value);
  } catch (const YAML::Exception& e) {
    n = YAML::Node(value);  // take it as a plain string; the field's parser judges it
  }
  if (n.IsNull() && !value.empty()) n = YAML::Node(value);
  f->set(*this, n, where);
  origin_[key] = where;
}

void Config::resolve(int world) {
  if (world < 1) throw Error("world size must be >= 1, got " + std::to_string(world));
  resolved.world = world;
  const int64_t g = train.global_batch;
  if (g % world != 0) {
    throw Error("global batch " + std::to_string(g) + " is not divisible by the world size " +
                    std::to_string(world) + " (" + origin_of("train.global_batch") +
                    "); use a multiple of " + std::to_string(world),
                "train.global_batch");
  }
  resolved.rank_batch = g / world;
  if (train.micro_batch < 0) {  // auto: measured later by the trainer
    resolved.micro_batch = -1;
    resolved.accum_steps = 0;
    return;
  }
  set_micro_batch(train.micro_batch == 0 ? resolved.rank_batch : train.micro_batch);
}

void Config::set_micro_batch(int64_t micro) {
  const int64_t rb = resolved.rank_batch;
  if (micro <= 0 || micro > rb || rb % micro != 0) {
    std::vector<std::string> valid;
    for (int64_t d = 1; d <= rb; ++d)
      if (rb % d == 0) valid.push_back(std::to_string(d));
    throw Error("micro-batch " + std::to_string(micro) + " does not divide the per-rank batch " +
                    std::to_string(rb) + " (global batch " + std::to_string(train.global_batch) +
                    " / world " + std::to_string(resolved.world) + ", " +
                    origin_of("train.micro_batch") + "); valid choices: " + join(valid, ", ") +
                    ", 0 or auto",
                "train.micro_batch");
  }
  resolved.micro_batch = micro;
  resolved.accum_steps = rb / micro;
}

std::string Config::dump() const {
  std::string out;
  std::string section;
  for (const auto& f : schema()) {
    const std::string sec = f.key.substr(0, f.key.find('.'));
    if (sec != section) {
      out += sec + ":\n";
      section = sec;
    }
    out += "  " + f.key.substr(f.key.find('.') + 1) + ": " + f.get(*this) + "\n";
  }
  out += "# resolved: world " + std::to_string(resolved.world) + ", per-rank batch " +
         std::to_string(resolved.rank_batch) + ", micro-batch " +
         std::to_string(resolved.micro_batch) + ", accumulation steps " +
         std::to_string(resolved.accum_steps) + "\n";
  return out;
}

uint64_t Config::hash() const {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : dump()) {
    h ^= ch;
    h *= 1099511628211ull;
  }
  return h;
}

std::string Config::origin_of(const std::string& key) const {
  auto it = origin_.find(key);
  return it == origin_.end() ? "default" : it->second;
}

std::string Config::schema_help() {
  std::string out;
  std::string section;
  Config defaults;
  for (const auto& f : schema()) {
    const std::string sec = f.key.substr(0, f.key.find('.'));
    if (sec != section) {
      out += "\n  " + sec + ":\n";
      section = sec;
    }
    std::string left = "    " + f.key + " (" + f.type + ", default " + f.get(defaults) + ")";
    out += left + "\n        " + f.help + "\n";
  }
  return out;
}

std::vector<std::string> Config::keys() {
  std::vector<std::string> k;
  for (const auto& f : schema()) k.push_back(f.key);
  return k;
}

}  // namespace dtrain
