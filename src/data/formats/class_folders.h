// The class folders of data.format image_folder, read as torchvision's ImageFolder reads them
// (Note [image transforms], formats/image_folder.cpp): every subfolder of the root is a class,
// sorted by name; a class's samples are the .jpg, .jpeg and .png files below its folder (any
// case, subfolders too, symbolic links followed), in sorted order; other files are counted.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dtrain::detail {

struct Sample {
  std::string path;
  int64_t label = 0;
};

struct Folder {
  std::string root;
  std::vector<std::string> classes;  // sorted
  std::vector<Sample> samples;
  int64_t skipped = 0;  // files without an image extension
};

// "1 other file", "3 other files".
std::string other_files(int64_t n);

// The classes and images under `root` (data.path/<key's value>); errors name `key`. With `known`
// (the training folder's classes), a class is numbered by its place there, and a class not among
// them is an error. No class folder, or a class folder without an image, is an error naming it.
Folder scan_class_folders(const std::string& root, const std::string& key,
                          const std::vector<std::string>* known);

// The image files under `dir` (its subfolders too), sorted by path (`dtrain predict --input`):
// none is an error; other files are counted in a log line.
std::vector<std::string> image_files_under(const std::string& dir);

}  // namespace dtrain::detail
