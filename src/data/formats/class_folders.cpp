// The class folders of data.format image_folder (formats/class_folders.h).
#include "data/formats/class_folders.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>

#include "data/files.h"
#include "dtrain/error.h"
#include "dtrain/log.h"

namespace dtrain::detail {

std::string other_files(int64_t n) {
  return std::to_string(n) + (n == 1 ? " other file" : " other files");
}

namespace {

bool is_image_name(const std::string& name) {
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  for (const char* ext : {".jpg", ".jpeg", ".png"}) {
    const size_t n = std::strlen(ext);
    if (lower.size() > n && lower.compare(lower.size() - n, n, ext) == 0) return true;
  }
  return false;
}

}  // namespace

// The classes and images under `root` (data.path/<key's value>). With `known` (the training
// folder's classes), a class is numbered by its place there.
Folder scan_class_folders(const std::string& root, const std::string& key,
                          const std::vector<std::string>* known) {
  struct stat st {};
  if (::stat(root.c_str(), &st) != 0)
    throw Error("no folder " + root + " (" + std::strerror(errno) +
                    "): data.format image_folder reads " + root + "/<class>/<image>",
                key);
  if (!S_ISDIR(st.st_mode)) throw Error(root + " is not a folder", key);
  Folder f;
  f.root = root;
  for (const auto& [name, folder] : folder_entries(root, key))
    if (folder) f.classes.push_back(name);
  if (f.classes.empty())
    throw Error(root + " holds no class folders: data.format image_folder reads " + root +
                    "/<class>/<image>",
                key);
  for (size_t c = 0; c < f.classes.size(); ++c) {
    int64_t label = static_cast<int64_t>(c);
    if (known != nullptr) {
      const auto it = std::find(known->begin(), known->end(), f.classes[c]);
      if (it == known->end())
        throw Error(
            root + "/" + f.classes[c] + " is a class the training folder does not have (its " +
                std::to_string(known->size()) + " classes are the subfolders of data.train_dir)",
            key);
      label = it - known->begin();
    }
    const std::string dir = root + "/" + f.classes[c];
    auto tree = walk_folder(dir, key);
    std::sort(tree.begin(), tree.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    const size_t before = f.samples.size();
    int64_t skipped = 0;
    for (const auto& [folder, files] : tree) {
      for (const auto& name : files) {
        if (is_image_name(name)) {
          f.samples.push_back(Sample{folder + "/" + name, label});
        } else {
          ++skipped;
        }
      }
    }
    if (f.samples.size() == before)
      throw Error(dir + ": a class folder without a .jpg, .jpeg or .png file" +
                      (skipped > 0 ? " (" + other_files(skipped) + ")" : std::string()),
                  key);
    f.skipped += skipped;
  }
  return f;
}

// The image files under `dir` (its subfolders too), sorted by path.
std::vector<std::string> image_files_under(const std::string& dir) {
  const auto tree = walk_folder(dir, "--input");
  std::vector<std::string> files;
  int64_t skipped = 0;
  for (const auto& [folder, names] : tree)
    for (const auto& name : names) {
      if (is_image_name(name)) {
        files.push_back(folder + "/" + name);
      } else {
        ++skipped;
      }
    }
  if (files.empty())
    throw Error(dir + ": a folder without a .jpg, .jpeg or .png file" +
                    (skipped > 0 ? " (" + other_files(skipped) + ")" : std::string()),
                "--input");
  std::sort(files.begin(), files.end());
  if (skipped > 0)
    log::info(dir + ": " + std::to_string(files.size()) + " image(s); " + other_files(skipped) +
              " skipped (not .jpg, .jpeg or .png)");
  return files;
}

}  // namespace dtrain::detail
