#include <map>
#include <mutex>

#include "dtrain/error.h"
#include "dtrain/models.h"

namespace dtrain {
namespace detail {
void register_builtin_models();  // models/builtin.cpp
}

namespace {
struct Entry {
  ModelFactory factory;
  std::string description;
  std::optional<std::vector<std::string>> reads;
};
std::mutex& registry_mu() {
  static std::mutex mu;
  return mu;
}
std::map<std::string, Entry>& registry() {
  static std::map<std::string, Entry> r;
  return r;
}
void ensure_builtins() {
  static std::once_flag once;
  std::call_once(once, [] { detail::register_builtin_models(); });
}
}  // namespace

void register_model(const std::string& name, ModelFactory factory, std::string description,
                    std::optional<std::vector<std::string>> reads) {
  if (name.empty() || !factory) throw Error("register_model: empty name or factory");
  if (reads)
    for (const auto& key : *reads)
      if (key.rfind("model.", 0) != 0)
        throw Error("register_model('" + name + "'): '" + key + "' is not a model.* key");
  std::lock_guard<std::mutex> lock(registry_mu());
  registry()[name] = Entry{std::move(factory), std::move(description), std::move(reads)};
}

std::optional<std::vector<std::string>> model_keys(const std::string& name) {
  ensure_builtins();
  std::lock_guard<std::mutex> lock(registry_mu());
  const auto it = registry().find(name);
  if (it == registry().end()) return std::nullopt;
  return it->second.reads;
}

std::shared_ptr<Model> make_model(const std::string& name, const ModelConfig& cfg,
                                  const DataSpec& data) {
  ensure_builtins();
  ModelFactory factory;
  {
    std::lock_guard<std::mutex> lock(registry_mu());
    auto it = registry().find(name);
    if (it == registry().end()) {
      std::string names;
      for (const auto& kv : registry()) names += (names.empty() ? "" : ", ") + kv.first;
      throw Error("unknown model '" + name + "'; registered models: " + names, "model.name");
    }
    factory = it->second.factory;
  }
  return factory(cfg, data);
}

std::vector<std::pair<std::string, std::string>> registered_models() {
  ensure_builtins();
  std::lock_guard<std::mutex> lock(registry_mu());
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& kv : registry()) out.emplace_back(kv.first, kv.second.description);
  return out;
}

}  // namespace dtrain
