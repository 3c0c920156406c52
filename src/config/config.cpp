// Config: loading YAML and overrides through the schema, resolving against the world size once,
// and the dump, hash and help that walk the same schema.
#include "dtrain/config.h"

#include <yaml-cpp/yaml.h>

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "config/data_formats.h"
#include "config/schema.h"
#include "config/values.h"
#include "dtrain/error.h"
#include "util/fs.h"
#include "util/hash.h"
#include "util/spelling.h"

namespace dtrain {
namespace {

using config::Field;
using config::find_field;
using config::join;
using config::schema;
using config::sections;

// The names PyTorch, Lightning and torchvision's scripts give some of dtrain's keys.
const std::pair<const char*, const char*> kOtherNames[] = {
    {"learning_rate", "lr"},    {"batch_size", "global_batch"},          {"max_epochs", "epochs"},
    {"num_workers", "workers"}, {"gradient_clip_val", "clip_grad_norm"}, {"seed", "seed"}};

std::string suggestion(const std::string& key) {
  const size_t kdot = key.find('.');
  const std::string name = kdot == std::string::npos ? key : key.substr(kdot + 1);
  // A key without its section ("max_steps=5"), in another section ("model.lr"), or another
  // framework's name for one ("train.learning_rate").
  std::string wanted = name;
  for (const auto& [other, ours] : kOtherNames)
    if (name == other) wanted = ours;
  std::string named;
  for (const auto& f : schema())
    if (f.key.substr(f.key.find('.') + 1) == wanted && named.empty())
      named = f.key;  // another section's
  if (!named.empty())
    return "; did you mean '" + named + "'?" +
           (kdot == std::string::npos ? " (overrides are section.key=value)" : "");
  std::string best;
  size_t best_d = 4;
  for (const auto& f : schema()) {
    size_t d = detail::edit_distance(key, f.key);
    if (d < best_d) best_d = d, best = f.key;
    // right key in the wrong section: "lr" under model
    auto dot = f.key.find('.');
    auto kdot = key.find('.');
    if (kdot != std::string::npos && f.key.substr(dot) == key.substr(kdot) && best.empty())
      best = f.key;
  }
  return best.empty() ? "" : "; did you mean '" + best + "'?";
}

std::string mark_of(const std::string& origin, const YAML::Node& n) {
  const YAML::Mark m = n.Mark();
  if (m.line < 0) return origin;
  return origin + ":" + std::to_string(m.line + 1) + ":" + std::to_string(m.column + 1);
}

const Field& known_field(const std::string& key, const std::string& where) {
  const Field* f = find_field(key);
  if (!f) throw Error("unknown key (" + where + ")" + suggestion(key), key);
  return *f;
}

// run.name names a folder inside run.dir: a relative path of plain names ("exp1", "sweep/lr0.1"),
// never one that leaves run.dir ("..", "a/../../b", "/abs") or an empty one while files are
// written.
void check_run_name(const RunConfig& run, const std::string& where) {
  const std::string& name = run.name;
  auto bad = [&](const std::string& why) {
    throw Error("'" + name + "' " + why + " (" + where +
                    "); the run directory is run.dir/run.name " +
                    "and must stay inside run.dir: use plain names, e.g. exp1 or sweep/lr0.1",
                "run.name");
  };
  if (name.empty()) {
    if (!run.dir.empty()) bad("is empty while run.dir is set");
    return;
  }
  if (name.front() == '/') bad("is an absolute path");
  size_t begin = 0;
  while (begin <= name.size()) {
    size_t end = name.find('/', begin);
    if (end == std::string::npos) end = name.size();
    const std::string part = name.substr(begin, end - begin);
    if (part == "..") bad("has a '..' component");
    if (part == ".") bad("has a '.' component");
    if (part.empty()) bad("has an empty component ('//' or a trailing '/')");
    begin = end + 1;
  }
  for (char ch : name)
    if (static_cast<unsigned char>(ch) < 0x20) bad("holds a control character");
}

// A key of a YAML map as text; a key that is itself a list or a map is an error.
std::string key_text(const YAML::Node& k, const std::string& where, const std::string& in) {
  if (!k.IsScalar())
    throw Error("a key " + in + " must be a plain name, got '" + config::scalar_text(k) + "' (" +
                    where + ")",
                where);
  return k.Scalar();
}

}  // namespace

struct ConfigAccess {
  static void load_node(Config& c, const YAML::Node& root, const std::string& origin) {
    if (root.IsNull())
      throw Error(
          "the config is empty (no sections, only comments or nothing): write at least "
          "one section (" +
              join(sections(), ", ") +
              "); an empty config is not taken "
              "to mean all defaults",
          origin);
    if (!root.IsMap())
      throw Error("the top level must be a map of sections (" + join(sections(), ", ") + ")",
                  mark_of(origin, root));
    std::map<std::string, std::string> seen;  // section or key -> where it first stood
    auto once = [&](const std::string& name, const std::string& where, const char* what) {
      auto [it, fresh] = seen.emplace(name, where);
      if (!fresh)
        throw Error(std::string("duplicate ") + what + " (" + where + "; first at " + it->second +
                        "): write each once",
                    name);
    };
    for (const auto& sec : root) {
      const std::string sec_where = mark_of(origin, sec.first);
      const std::string name = key_text(sec.first, sec_where, "at the top level");
      if (std::find(sections().begin(), sections().end(), name) == sections().end())
        throw Error("unknown section '" + name + "' (" + sec_where + "); sections are " +
                        join(sections(), ", "),
                    name);
      once(name, sec_where, "section");
      if (sec.second.IsNull()) continue;
      if (!sec.second.IsMap())
        throw Error("expected a map of keys under '" + name + "' (" + sec_where + ")", name);
      for (const auto& kv : sec.second) {
        const std::string where = mark_of(origin, kv.first);
        const std::string key = name + "." + key_text(kv.first, where, "under '" + name + "'");
        const Field& f = known_field(key, where);
        once(key, where, "key");
        if (kv.second.IsNull())
          throw Error("no value (" + where + "); write a value or remove the key", key);
        f.set(c, kv.second, where);
        c.origin_[key] = where;
      }
    }
  }
};

Config Config::from_string(const std::string& yaml, const std::string& origin,
                           const std::vector<std::string>& overrides) {
  Config c;
  std::vector<YAML::Node> docs;
  try {
    docs = YAML::LoadAll(yaml);
  } catch (const YAML::Exception& e) {
    std::string where = origin;
    if (e.mark.line >= 0)
      where += ":" + std::to_string(e.mark.line + 1) + ":" + std::to_string(e.mark.column + 1);
    throw Error("malformed YAML: " + e.msg, where);
  }
  if (docs.size() > 1)
    throw Error("the config holds " + std::to_string(docs.size()) +
                    " YAML documents (separated by '---'; the second at " +
                    mark_of(origin, docs[1]) + "); write one",
                origin);
  ConfigAccess::load_node(c, docs.empty() ? YAML::Node() : docs[0], origin);
  // The same key twice on the command line is as ambiguous as twice in a file.
  std::map<std::string, std::string> given;
  for (const auto& o : overrides) {
    const std::string key = o.substr(0, o.find('='));
    auto [it, fresh] = given.emplace(key, o);
    if (!fresh && o.find('=') != std::string::npos)
      throw Error("set twice on the command line ('" + it->second + "', then '" + o +
                      "'): give each key once",
                  key);
    c.apply_override(o);
  }
  // The format's defaults for keys the config leaves unset (config/data_formats.h).
  if (const auto& on_read = config::rules_of(c.data.format).on_read) on_read(c);
  return c;
}

Config Config::from_file(const std::string& path, const std::vector<std::string>& overrides) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw Error(std::string("cannot open the config file: ") + std::strerror(errno), path);
  if (S_ISDIR(st.st_mode)) throw Error("is a directory, not a config file", path);
  std::ifstream in(path);
  if (!in) throw Error(std::string("cannot open the config file: ") + std::strerror(errno), path);
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw Error("cannot read the config file", path);
  return from_string(ss.str(), path, overrides);
}

namespace config {

void set_from_text(Config& c, const std::string& key, const std::string& value,
                   const std::string& where) {
  if (std::find(sections().begin(), sections().end(), key) != sections().end())
    throw Error(
        "'" + key + "' is a section; an override sets one key, section.key=value (" + where + ")",
        key);
  const Field& f = known_field(key, where);
  if (value.find_first_not_of(" \t") == std::string::npos)
    throw Error("empty value (" + where + "); " +
                    (f.type.find("list") != std::string::npos
                         ? "for an empty list write " + key + "=[]"
                         : "for an empty string write " + key +
                               "=\"''\" on a command line (the shell keeps the inner quotes; " +
                               key + "='' alone reaches dtrain empty)"),
                key);
  YAML::Node n;
  try {
    n = YAML::Load(value);
  } catch (const YAML::Exception& e) {
    n = YAML::Node(value);  // take it as a plain string; the field's parser judges it
  }
  if (n.IsNull() && !value.empty()) n = YAML::Node(value);
  f.set(c, n, where);
}

}  // namespace config

void Config::apply_override(const std::string& assignment) {
  const std::string where = "command line '" + assignment + "'";
  if (is_resolved())
    throw Error("an override after the config was resolved (internal error)", where);
  auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    throw Error("an override must look like section.key=value", where);
  const std::string key = assignment.substr(0, eq);
  config::set_from_text(*this, key, assignment.substr(eq + 1), where);
  origin_[key] = where;
}

void Config::resolve(int world) {
  if (world < 1) throw Error("world size must be >= 1, got " + std::to_string(world));
  if (is_resolved())
    throw Error("the config was already resolved for world " + std::to_string(resolved.world) +
                "; resolve a fresh copy for world " + std::to_string(world) + " (internal error)");
  check_run_name(run, origin_of("run.name"));
  // The format's keys derived from others (config/data_formats.h: token windows from the model,
  // an image folder's evaluation resize from its crop).
  if (const auto& on_resolve = config::rules_of(data.format).on_resolve) on_resolve(*this);
  const int64_t g = train.global_batch;
  if (g % world != 0) {
    throw Error("global batch " + std::to_string(g) + " is not divisible by the world size " +
                    std::to_string(world) + " (" + origin_of("train.global_batch") +
                    "); use a multiple of " + std::to_string(world),
                "train.global_batch");
  }
  Resolved r;
  r.world = world;
  r.rank_batch = g / world;
  if (train.micro_batch < 0) {  // auto: measured when training starts
    r.micro_batch = -1;
    r.accum_steps = 0;
    resolved = r;
    return;
  }
  const int64_t micro = train.micro_batch == 0 ? r.rank_batch : train.micro_batch;
  if (micro > r.rank_batch || r.rank_batch % micro != 0) {
    std::vector<std::string> valid;
    for (int64_t d = 1; d <= r.rank_batch; ++d)
      if (r.rank_batch % d == 0) valid.push_back(std::to_string(d));
    throw Error("micro-batch " + std::to_string(micro) + " does not divide the per-rank batch " +
                    std::to_string(r.rank_batch) + " (global batch " + std::to_string(g) +
                    " / world " + std::to_string(world) + ", " + origin_of("train.micro_batch") +
                    "); valid choices: " + join(valid, ", ") + ", 0 or auto",
                "train.micro_batch");
  }
  r.micro_batch = micro;
  r.accum_steps = r.rank_batch / micro;
  resolved = r;
}

std::string Config::dump() const { return settings_yaml() + "# " + resolved_note() + "\n"; }

std::string Config::resolved_note() const {
  return "resolved: world " + std::to_string(resolved.world) + ", per-rank batch " +
         std::to_string(resolved.rank_batch) + ", micro-batch " +
         std::to_string(resolved.micro_batch) + ", accumulation steps " +
         std::to_string(resolved.accum_steps);
}

std::string Config::settings_yaml() const {
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
  return out;
}

uint64_t Config::hash() const { return detail::fnv1a(dump()); }

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

void Config::check_value(const std::string& key, double value) {
  const Field* f = find_field(key);
  if (!f || !f->check_number)
    throw Error("Config::check_value: '" + key + "' is not a numeric config key (internal error)");
  f->check_number(value, "given in C++");
}

void Config::check_value(const std::string& key, const std::vector<int64_t>& value) {
  const Field* f = find_field(key);
  if (!f || !f->check_list)
    throw Error("Config::check_value: '" + key +
                "' is not an integer-list config key (internal error)");
  f->check_list(value, "given in C++");
}

std::string RunConfig::run_dir() const { return dir.empty() ? "" : detail::join_path(dir, name); }

std::string CheckpointConfig::folder(const RunConfig& run) const {
  if (!dir.empty()) return dir;
  const std::string rd = run.run_dir();
  return rd.empty() ? "" : detail::join_path(rd, "checkpoints");
}

}  // namespace dtrain
