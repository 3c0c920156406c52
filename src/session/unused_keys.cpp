#include "session/unused_keys.h"

#include <algorithm>

namespace dtrain::detail {
namespace {

bool builtin_model(const std::string& name) {
  for (const char* m : {"linear", "mlp", "cnn", "gpt", "resnet18", "resnet50", "torchscript"})
    if (name == m) return true;
  return false;
}

}  // namespace

std::vector<std::string> unused_keys(const Config& cfg) {
  std::vector<std::string> out;
  auto check = [&](const std::string& key, bool used, const std::string& why) {
    const std::string from = cfg.origin_of(key);
    if (!used && from != "default")
      out.push_back(key + " is set (" + from + ") but not used: " + why);
  };
  const std::string& model = cfg.model.name;
  if (builtin_model(model)) {
    const std::string why = "model.name is " + model;
    check("model.hidden", model == "mlp", why);
    for (const char* k : {"model.channels", "model.fc"}) check(k, model == "cnn", why);
    for (const char* k : {"model.n_layer", "model.n_head", "model.n_embd", "model.vocab_size", "model.seq_len",
                        "model.fused_kernels", "model.fused_mlp", "model.attention"})
      check(k, model == "gpt", why);
    check("model.dropout", model == "mlp" || model == "cnn" || model == "gpt", why);
    check("model.path", model == "torchscript", why);
  }
  const DataFormat format = cfg.data.format;
  const std::string why_format = std::string("data.format is ") + to_string(format);
  const bool idx = format == DataFormat::kIdx, synthetic = format == DataFormat::kSynthetic;
  const bool tokens = format == DataFormat::kTokens, text = format == DataFormat::kText;
  const bool cifar = format == DataFormat::kCifar10 || format == DataFormat::kCifar100;
  const bool csv = format == DataFormat::kCsv;
  const bool images = format == DataFormat::kImageFolder;
  check("data.path", !synthetic, why_format);
  for (const char* k : {"data.train_images", "data.train_labels", "data.test_images",
                        "data.test_labels"})
    check(k, idx, why_format);
  check("data.normalize", idx || cifar || csv || images, why_format);
  check("data.cifar_labels", format == DataFormat::kCifar100, why_format);
  for (const char* k : {"data.csv_task", "data.target_columns", "data.feature_columns"}) check(k, csv, why_format);
  for (const char* k : {"data.train_dir", "data.test_dir", "data.image_size", "data.resize", "data.crop_scale",
                        "data.crop_ratio", "data.scaled_decode", "data.pixel_mean", "data.pixel_std"})
    check(k, images, why_format);
  check("data.hflip", images || cifar, why_format);
  check("data.crop_padding", cifar, why_format);
  for (const char* k : {"data.synthetic_task", "data.synthetic_shape", "data.synthetic_size",
                        "data.synthetic_test_size", "data.synthetic_features",
                        "data.synthetic_classes", "data.synthetic_noise", "data.synthetic_uint8"})
    check(k, synthetic, why_format);
  check("data.train_files", tokens || text || cifar || csv, why_format);
  for (const char* k : {"data.seq_len", "data.windows"}) check(k, tokens || text, why_format);
  check("data.test_files", tokens || cifar || csv, why_format);
  check("data.token_dtype", tokens, why_format);
  check("data.test_fraction", text || (csv && cfg.data.test_files.empty()),
        csv ? "data.test_files names the test split" : why_format);
  for (const char* k : {"train.lr_step_size", "train.lr_gamma"})
    check(k, cfg.train.schedule == Schedule::kStep, std::string("train.schedule is ") + to_string(cfg.train.schedule));
  const OptimizerKind opt = cfg.train.optimizer;
  for (const char* k : {"train.momentum", "train.dampening", "train.nesterov"})
    check(k, opt == OptimizerKind::kSgd, std::string("train.optimizer is ") + to_string(opt));
  check("train.no_decay_norm_bias", cfg.train.weight_decay > 0, "train.weight_decay is 0");
  for (const char* k : {"train.beta1", "train.beta2", "train.eps"})
    check(k, opt != OptimizerKind::kSgd, "train.optimizer is sgd");
  return out;
}

}  // namespace dtrain::detail
