#include <map>
#include <mutex>

#include "dtrain/error.h"
#include "dtrain/models.h"
#include "util/spelling.h"

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
// Whether this thread is registering the built-in models (their register_model calls must not
// wait for themselves).
thread_local bool registering_builtins = false;
void ensure_builtins() {
  static std::once_flag once;
  std::call_once(once, [] {
    registering_builtins = true;
    detail::register_builtin_models();
    registering_builtins = false;
  });
}
}  // namespace

void register_model(const std::string& name, ModelFactory factory, std::string description,
                    std::optional<std::vector<std::string>> reads) {
  if (name.empty() || !factory) throw Error("register_model: empty name or factory");
  // The built-ins first, so that a program's model of a built-in's name replaces it for good.
  if (!registering_builtins) ensure_builtins();
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

namespace {
// The unknown-model Error: the known names, and the closest one when it looks like a slip.
// The caller holds the registry's lock.
Error unknown_model(const std::string& name) {
  std::string names;
  std::vector<std::string> all;
  for (const auto& kv : registry())
    names += (names.empty() ? "" : ", ") + kv.first, all.push_back(kv.first);
  const std::string near = detail::closest(name, all, 3);
  return Error("unknown model '" + name + "'" +
                   (near.empty() ? "" : " (did you mean '" + near + "'?)") +
                   "; registered models: " + names,
               "model.name");
}
}  // namespace

void require_model(const std::string& name) {
  ensure_builtins();
  std::lock_guard<std::mutex> lock(registry_mu());
  if (registry().find(name) == registry().end()) throw unknown_model(name);
}

std::shared_ptr<Model> make_model(const std::string& name, const ModelConfig& cfg,
                                  const DataSpec& data) {
  ensure_builtins();
  ModelFactory factory;
  {
    std::lock_guard<std::mutex> lock(registry_mu());
    auto it = registry().find(name);
    if (it == registry().end()) throw unknown_model(name);
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
