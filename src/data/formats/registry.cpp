#include "data/formats/registry.h"

#include <mutex>

#include "config/data_formats.h"
#include "dtrain/error.h"

namespace dtrain::detail {

// The built-in formats, each registered by its own file (Note [data formats]), in --help's order.
std::vector<FormatRegistration> idx_formats();           // formats/idx_splits.cpp
std::vector<FormatRegistration> synthetic_formats();     // formats/synthetic.cpp
std::vector<FormatRegistration> token_formats();         // formats/tokens.cpp: tokens, text
std::vector<FormatRegistration> cifar_formats();         // formats/cifar.cpp: cifar10, cifar100
std::vector<FormatRegistration> csv_formats();           // formats/csv.cpp
std::vector<FormatRegistration> image_folder_formats();  // formats/image_folder.cpp

namespace {

struct Registry {
  Registry() {
    for (auto* registrations : {idx_formats, synthetic_formats, token_formats, cifar_formats,
                                csv_formats, image_folder_formats})
      for (FormatRegistration& f : registrations()) formats.push_back(std::move(f));
  }
  std::mutex mu;
  std::vector<FormatRegistration>
      formats;  // the built-ins, then the others in the order registered
};
Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

void register_format(FormatRegistration r) {
  if (r.name.empty() || !r.make_splits) throw Error("register_format: empty name or make_splits");
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  for (FormatRegistration& f : reg.formats) {
    if (f.name == r.name) {
      f = std::move(r);
      return;
    }
  }
  reg.formats.push_back(std::move(r));
}

FormatRegistration registered_format(DataFormat format) {
  {
    Registry& reg = registry();
    std::lock_guard<std::mutex> lock(reg.mu);
    for (const FormatRegistration& f : reg.formats)
      if (f.name == format.name()) return f;
  }
  config::rules_of(format);  // a name no format has: the config's Error, naming the formats
  throw Error(
      std::string("data format '") + format.name() + "' has no reader registered (internal error)",
      "data.format");
}

std::vector<std::string> registered_format_names() {
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  std::vector<std::string> names;
  for (const FormatRegistration& f : reg.formats) names.push_back(f.name);
  return names;
}

}  // namespace dtrain::detail
