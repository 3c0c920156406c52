// The schema: every config key with its type, help, parser, range and dump, in one table
// assembled from the rows of each section (config/schema_rows.h); the conditions the rows
// share; and the names of the config's choices as to_string() gives them.
#include "config/schema.h"

#include <utility>

#include "config/data_formats.h"
#include "config/schema_rows.h"
#include "dtrain/config.h"

namespace dtrain {
namespace config {

// data.format: one of the formats config/data_formats.h lists, by name.
Field format_choice(const std::string& key) {
  Field f;
  f.key = key;
  f.type = "choice";
  f.help = "dataset format: " + format_help() + " (" + format_names(" | ") + ")";
  f.set = [key](Config& c, const YAML::Node& n, const std::string& w) {
    const std::string v = parse_as<std::string>(key, n, w);
    const FormatRules* format = find_format(v);
    if (format == nullptr)
      bad_value(key, w, "must be one of " + format_names(" | ") + ", got '" + v + "'");
    c.data.format = DataFormat(format->name);
  };
  f.get = [](const Config& c) { return std::string(c.data.format.name()); };
  return f;
}

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
  return c.train.optimizer == OptimizerKind::kSgd
             ? ""
             : std::string("train.optimizer is ") + name_of(c.train.optimizer);
}
std::string adam_only(const Config& c) {
  return c.train.optimizer != OptimizerKind::kSgd ? "" : "train.optimizer is sgd";
}
std::string with_weight_decay(const Config& c) {
  return c.train.weight_decay > 0 ? "" : "train.weight_decay is 0";
}
std::string saving(const Config& c) {
  return c.checkpoint.folder(c.run).empty() ? "run.dir and checkpoint.dir are empty" : "";
}
std::string monitored(const Config& c) {
  return c.train.monitor != Monitor::kOff ? "" : "train.monitor is off";
}
std::string cross_entropy(const Config& c) {
  return c.train.loss == LossKind::kCrossEntropy
             ? ""
             : std::string("train.loss is ") + name_of(c.train.loss);
}
std::string mixing(const Config& c) {
  return c.train.mixup_alpha > 0 || c.train.cutmix_alpha > 0
             ? ""
             : "train.mixup_alpha and train.cutmix_alpha are 0";
}
std::string mixing_both(const Config& c) {
  return c.train.mixup_alpha > 0 && c.train.cutmix_alpha > 0
             ? ""
             : "train.mixup_alpha or train.cutmix_alpha is 0";
}
std::string with_ema(const Config& c) {
  return c.train.ema_decay > 0 ? "" : "train.ema_decay is 0";
}
std::string rand_augment(const Config& c) {
  return c.data.auto_augment == AutoAugment::kRandAugment
             ? ""
             : std::string("data.auto_augment is ") + name_of(c.data.auto_augment);
}
std::string step_schedule(const Config& c) {
  return c.train.schedule == Schedule::kStep
             ? ""
             : std::string("train.schedule is ") + name_of(c.train.schedule);
}

const std::vector<Field>& schema() {
  static const std::vector<Field> fields = [] {
    std::vector<Field> s;
    add_run_keys(s);
    add_model_keys(s);
    add_data_keys(s);
    add_train_keys(s);
    add_dist_keys(s);
    add_checkpoint_keys(s);
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
const char* to_string(AsyncSave v) { return config::name_of(v); }
const char* to_string(ProgressMode v) { return config::name_of(v); }

}  // namespace dtrain
