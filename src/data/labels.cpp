#include "data/labels.h"

#include "dtrain/config.h"
#include "dtrain/error.h"
#include "dtrain/log.h"

namespace dtrain::detail {

LabelSpace label_space(const DataConfig& cfg, int64_t fallback, const std::string& fallback_rule) {
  if (cfg.num_classes > 0) return {cfg.num_classes, "set by data.num_classes"};
  return {fallback, fallback_rule};
}

int64_t first_bad_label(const at::Tensor& targets, int64_t classes, int64_t* count) {
  const at::Tensor bad = (targets < 0).logical_or_(targets >= classes).nonzero();
  *count = bad.size(0);
  return *count == 0 ? -1 : bad[0][0].item<int64_t>();
}

std::string label_error(int64_t label, const std::string& sample, int64_t count,
                        const LabelSpace& space) {
  return "label " + std::to_string(label) + " of " + sample +
         (count > 0 ? " (" + std::to_string(count) + " such label(s))" : std::string()) +
         " is outside the model's classes [0, " + std::to_string(space.classes) + "), " +
         space.rule;
}

std::vector<std::string> class_names(const DataConfig& cfg, const LabelSpace& space,
                                     const std::vector<std::string>& shipped,
                                     const std::string& shipped_file) {
  const auto count = [](const std::vector<std::string>& v) {
    return static_cast<int64_t>(v.size());
  };
  if (!cfg.class_names.empty()) {
    if (count(cfg.class_names) != space.classes)
      throw Error("gives " + std::to_string(cfg.class_names.size()) + " names for the model's " +
                      std::to_string(space.classes) + " classes (" + space.rule +
                      "): name each class once, class 0 first",
                  "data.class_names");
    return cfg.class_names;
  }
  if (shipped.empty() || count(shipped) == space.classes) return shipped;
  log::warn(shipped_file + " names " + std::to_string(shipped.size()) + " classes, the model has " +
            std::to_string(space.classes) + " (" + space.rule +
            "): its names are not used; set data.class_names");
  return {};
}

void warn_empty_classes(const at::Tensor& targets, int64_t classes, const std::string& file) {
  if (targets.numel() == 0) return;
  const at::Tensor counts = at::bincount(targets, {}, classes);
  const int64_t empty = (counts == 0).sum().item<int64_t>();
  if (empty > 0)
    log::warn(std::to_string(empty) + " of the " + std::to_string(classes) +
              " classes taken from the train labels (" + file +
              ") have no training sample; set data.num_classes if that is not meant");
}

}  // namespace dtrain::detail
