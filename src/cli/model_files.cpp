#include "cli/model_files.h"

#include <string>

#include "checkpoint/folder.h"
#include "dtrain/error.h"
#include "util/dir.h"
#include "util/fs.h"

namespace dtrain::cli {
namespace {

std::string dir_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

}  // namespace

std::string run_config(const std::string& given, std::vector<std::string>& overrides) {
  const std::string file = detail::join_path(given, "config.yaml");
  if (!detail::is_dir(given) || !detail::path_exists(file)) return given;
  std::string dir = given;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  const size_t cut = dir.find_last_of('/');
  const std::string parent = cut == std::string::npos ? "." : cut == 0 ? "/" : dir.substr(0, cut);
  const std::string name = cut == std::string::npos ? dir : dir.substr(cut + 1);
  for (const std::string& o : overrides)
    if (o.rfind("run.dir=", 0) == 0 || o.rfind("run.name=", 0) == 0)
      return file;  // the user's place
  overrides.insert(overrides.begin(), {"run.dir=" + parent, "run.name=" + name});
  return file;
}

std::string checkpoint_of(const std::string& given) {
  if (detail::has_marker(given)) return given;
  for (const std::string& dir : {given, detail::join_path(given, "checkpoints")}) {
    const std::string newest = detail::CheckpointFolder(dir).newest_complete();
    if (!newest.empty()) return newest;
  }
  return given;  // not a checkpoint: checked() says what is wrong with it
}

std::string weights_path(const Config& cfg, const std::string& weights, const std::string& given) {
  if (!weights.empty()) {
    if (!detail::path_exists(weights)) throw Error("no such file (--weights)", weights);
    return weights;
  }
  if (!given.empty()) {
    if (!detail::path_exists(given)) throw Error("no such checkpoint folder (--checkpoint)", given);
    const std::string checkpoint = checkpoint_of(given);
    detail::checked(checkpoint);  // complete, every file its recorded size and CRC-32
    const std::string path = detail::join_path(checkpoint, "model.pt");
    if (!detail::path_exists(path)) throw Error("no such file in the checkpoint", path);
    return path;
  }
  const std::string run_dir = cfg.run.run_dir();
  if (run_dir.empty())
    throw Error(
        "is empty, so the run wrote no model.pt: name the weights with --weights FILE or "
        "--checkpoint DIR",
        "run.dir");
  const std::string path = detail::join_path(run_dir, "model.pt");
  if (!detail::path_exists(path))
    throw Error(
        "no such file: the run named by run.dir/run.name has not finished training (its "
        "checkpoints: --checkpoint DIR), or name the weights with --weights FILE",
        path);
  return path;
}

std::string preprocess_path(const Config& cfg, const std::string& weights) {
  std::string path = detail::join_path(dir_of(weights), "preprocess.json");
  if (detail::path_exists(path)) return path;
  if (cfg.run.run_dir().empty()) return "";
  path = detail::join_path(cfg.run.run_dir(), "preprocess.json");
  return detail::path_exists(path) ? path : "";
}

}  // namespace dtrain::cli
