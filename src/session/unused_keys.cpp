#include "session/unused_keys.h"

#include <algorithm>
#include <optional>

#include "config/schema.h"
#include "dtrain/models.h"

namespace dtrain::detail {

std::vector<std::string> unused_keys(const Config& cfg) {
  std::vector<std::string> out;
  const std::optional<std::vector<std::string>> model_reads = model_keys(cfg.model.name);
  static const Config defaults;
  for (const config::Field& f : config::schema()) {
    const std::string from = cfg.origin_of(f.key);
    // A key at its default says nothing, set or not: a run's own config.yaml lists every key.
    if (from == "default" || f.get(cfg) == f.get(defaults)) continue;
    std::string why;
    if (f.applies == config::Applies::kWhen) {
      why = f.unused_because(cfg);
    } else if (f.applies == config::Applies::kModel && model_reads &&
               std::find(model_reads->begin(), model_reads->end(), f.key) == model_reads->end()) {
      why = "model.name is " + cfg.model.name;
    }
    if (!why.empty()) out.push_back(f.key + " is set (" + from + ") but not used: " + why);
  }
  return out;
}

}  // namespace dtrain::detail
