// The rows of the schema (config/schema.h), written in one file per part of the config
// (schema_run_keys.cpp: run, model, dist, checkpoint; schema_data_keys.cpp; schema_train_keys.cpp)
// from the builders here: field() for a typed key with its range check, choice() for one of an
// enum's names (each enum's names written once, below), format_choice() for data.format; and
// the conditions of Field::when() that the rows share (defined in schema.cpp).
#pragma once

#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "config/schema.h"
#include "config/values.h"
#include "dtrain/config.h"

namespace dtrain::config {

// The names of each enum's choices, in the order --help lists them.
template <class E>
struct Names;
#define DTRAIN_CHOICE_NAMES(E, ...)                                        \
  template <>                                                              \
  struct Names<E> {                                                        \
    static const std::vector<std::pair<const char*, E>>& list() {          \
      static const std::vector<std::pair<const char*, E>> l = __VA_ARGS__; \
      return l;                                                            \
    }                                                                      \
  };
DTRAIN_CHOICE_NAMES(DeviceKind, {{"auto", DeviceKind::kAuto},
                                 {"cpu", DeviceKind::kCpu},
                                 {"cuda", DeviceKind::kCuda}})
DTRAIN_CHOICE_NAMES(CifarLabels, {{"fine", CifarLabels::kFine}, {"coarse", CifarLabels::kCoarse}})
DTRAIN_CHOICE_NAMES(DecodeMode, {{"cpu", DecodeMode::kCpu},
                                 {"gpu", DecodeMode::kGpu},
                                 {"auto", DecodeMode::kAuto}})
DTRAIN_CHOICE_NAMES(AsyncSave,
                    {{"auto", AsyncSave::kAuto}, {"on", AsyncSave::kOn}, {"off", AsyncSave::kOff}})
DTRAIN_CHOICE_NAMES(CsvTask, {{"classification", CsvTask::kClassification},
                              {"regression", CsvTask::kRegression}})
DTRAIN_CHOICE_NAMES(TokenDtype, {{"auto", TokenDtype::kAuto},
                                 {"uint16", TokenDtype::kUint16},
                                 {"uint32", TokenDtype::kUint32}})
DTRAIN_CHOICE_NAMES(SyntheticTask, {{"regression", SyntheticTask::kRegression},
                                    {"classification", SyntheticTask::kClassification},
                                    {"images", SyntheticTask::kImages},
                                    {"tokens", SyntheticTask::kTokens}})
DTRAIN_CHOICE_NAMES(OptimizerKind, {{"sgd", OptimizerKind::kSgd},
                                    {"adam", OptimizerKind::kAdam},
                                    {"adamw", OptimizerKind::kAdamW}})
DTRAIN_CHOICE_NAMES(Schedule, {{"constant", Schedule::kConstant},
                               {"cosine", Schedule::kCosine},
                               {"linear", Schedule::kLinear},
                               {"step", Schedule::kStep}})
DTRAIN_CHOICE_NAMES(ResumeSchedule,
                    {{"stretch", ResumeSchedule::kStretch}, {"restart", ResumeSchedule::kRestart}})
DTRAIN_CHOICE_NAMES(Monitor, {{"off", Monitor::kOff},
                              {"test_loss", Monitor::kTestLoss},
                              {"test_accuracy", Monitor::kTestAccuracy},
                              {"test_top5_accuracy", Monitor::kTestTop5},
                              {"val_loss", Monitor::kValLoss},
                              {"val_accuracy", Monitor::kValAccuracy},
                              {"val_top5_accuracy", Monitor::kValTop5}})
DTRAIN_CHOICE_NAMES(AutoAugment, {{"none", AutoAugment::kNone},
                                  {"trivial_augment_wide", AutoAugment::kTrivialAugmentWide},
                                  {"rand_augment", AutoAugment::kRandAugment},
                                  {"auto_augment", AutoAugment::kAutoAugment}})
DTRAIN_CHOICE_NAMES(LossKind, {{"cross_entropy", LossKind::kCrossEntropy}, {"mse", LossKind::kMse}})
DTRAIN_CHOICE_NAMES(Precision, {{"fp32", Precision::kFp32},
                                {"bf16", Precision::kBf16},
                                {"fp16", Precision::kFp16}})
DTRAIN_CHOICE_NAMES(GraphMode,
                    {{"auto", GraphMode::kAuto}, {"on", GraphMode::kOn}, {"off", GraphMode::kOff}})
DTRAIN_CHOICE_NAMES(ActivationCheckpointing, {{"off", ActivationCheckpointing::kOff},
                                              {"blocks", ActivationCheckpointing::kBlocks}})
DTRAIN_CHOICE_NAMES(Backend,
                    {{"auto", Backend::kAuto}, {"nccl", Backend::kNccl}, {"mpi", Backend::kMpi}})
DTRAIN_CHOICE_NAMES(GradDtype, {{"fp32", GradDtype::kFp32}, {"bf16", GradDtype::kBf16}})
DTRAIN_CHOICE_NAMES(ShardOptimizer, {{"false", ShardOptimizer::kOff},
                                     {"true", ShardOptimizer::kState},
                                     {"gradients", ShardOptimizer::kGradients}})
DTRAIN_CHOICE_NAMES(ProgressMode, {{"auto", ProgressMode::kAuto},
                                   {"live", ProgressMode::kLive},
                                   {"lines", ProgressMode::kLines},
                                   {"off", ProgressMode::kOff}})
DTRAIN_CHOICE_NAMES(Attention, {{"auto", Attention::kAuto},
                                {"flash", Attention::kFlash},
                                {"cudnn", Attention::kCudnn},
                                {"efficient", Attention::kEfficient},
                                {"math", Attention::kMath}})
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
Field format_choice(const std::string& key);

// The conditions of Field::when(): "" when a run with the config reads the key, else why not.
std::string classifying(const Config& c);         // data.csv_task is classification
std::string without_test_files(const Config& c);  // data.test_files is empty
std::string sgd_only(const Config& c);
std::string adam_only(const Config& c);
std::string with_weight_decay(const Config& c);
std::string monitored(const Config& c);
std::string saving(const Config& c);  // the run writes checkpoints
std::string cross_entropy(const Config& c);
std::string mixing(const Config& c);       // mixup or cutmix on
std::string mixing_both(const Config& c);  // mixup and cutmix on
std::string with_ema(const Config& c);
std::string rand_augment(const Config& c);
std::string step_schedule(const Config& c);

// The rows of each section, appended in the order --help lists them.
void add_run_keys(std::vector<Field>& s);
void add_model_keys(std::vector<Field>& s);
void add_data_keys(std::vector<Field>& s);
void add_train_keys(std::vector<Field>& s);
void add_dist_keys(std::vector<Field>& s);
void add_checkpoint_keys(std::vector<Field>& s);

}  // namespace dtrain::config
