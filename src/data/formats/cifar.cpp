// data.format cifar10 and cifar100: the binary version of CIFAR (cifar-10-binary.tar.gz,
// cifar-100-binary.tar.gz). A file is a sequence of records, each the label byte(s) and then a
// 32x32 colour image as 1024 red, 1024 green and 1024 blue bytes, rows top to bottom:
//   - CIFAR-10: 1 label byte (0..9) + 3072 bytes; data_batch_1.bin .. data_batch_5.bin (10000
//     records each) and test_batch.bin;
//   - CIFAR-100: a coarse label byte (0..19), a fine label byte (0..99) + 3072 bytes; train.bin
//     (50000 records) and test.bin.
// The classes are named by data.class_names, else by the label-name file the binary version
// ships beside its batches (in data.path or the folder the archive unpacked to): CIFAR-10's
// batches.meta.txt, CIFAR-100's fine_label_names.txt or coarse_label_names.txt (data.cifar_labels),
// one name a line, blank lines skipped; without it the classes have no names.
// The pixels stay uint8 (N, 3, 32, 32), standardized on the device per channel (Note [uint8
// pixels]) with the train split's mean and std (data.normalize) or scaled to [0, 1]. The training
// split can be augmented with random crops of the zero-padded images and flips (data.crop_padding,
// data.hflip: Note [cifar augmentation]). A file that is empty, not a whole number of records, or
// holds a label outside the classes is an Error naming the file, the record and its byte offset.
// Registered as data.format cifar10 and cifar100 (Note [data formats]); `dtrain predict` reads
// pictures of any size for them (images/pictures.cpp).
#include <ATen/ATen.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "data/files.h"
#include "data/formats/registry.h"
#include "data/images/crop_flip.h"
#include "data/labels.h"
#include "data/pixels.h"
#include "data/splits.h"
#include "dtrain/config.h"
#include "dtrain/error.h"
#include "util/format.h"
#include "util/host_memory.h"

namespace dtrain::detail {
namespace {

constexpr int64_t kChannels = 3, kSide = 32, kPixels = kChannels * kSide * kSide;  // 3072

struct Variant {
  const char* name;     // "CIFAR-10"
  const char* folder;   // what the official archive unpacks to
  int64_t label_bytes;  // before the pixels of each record
  int64_t label_at;     // which of them is the label used
  int64_t classes;
  std::vector<std::string> train, test;  // the official file names
  const char* names;                     // the label-name file, one name a line
  int64_t record() const { return label_bytes + kPixels; }
};

Variant variant_of(const DataConfig& cfg) {
  if (cfg.format == DataFormat::kCifar10)
    return {"CIFAR-10",
            "cifar-10-batches-bin",
            1,
            0,
            10,
            {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin", "data_batch_4.bin",
             "data_batch_5.bin"},
            {"test_batch.bin"},
            "batches.meta.txt"};
  const bool coarse = cfg.cifar_labels == CifarLabels::kCoarse;
  return {coarse ? "CIFAR-100 (coarse labels)" : "CIFAR-100",
          "cifar-100-binary",
          2,
          coarse ? 0 : 1,
          coarse ? 20 : 100,
          {"train.bin"},
          {"test.bin"},
          coarse ? "coarse_label_names.txt" : "fine_label_names.txt"};
}

std::string join_names(const std::vector<std::string>& names) {
  std::string s;
  for (size_t i = 0; i < names.size(); ++i)
    s += (i == 0 ? "" : i + 1 == names.size() ? " and " : ", ") + names[i];
  return s;
}

// data.path, or the folder the official archive unpacked into under it.
std::string data_folder(const DataConfig& cfg, const Variant& v) {
  const std::string sub =
      cfg.path + (cfg.path.empty() || cfg.path.back() == '/' ? "" : "/") + v.folder;
  if (!is_regular_file(cfg.path + "/" + v.train[0]) && is_directory(sub)) return sub;
  return cfg.path;
}

// The classes' names: data.class_names, else the label-name file's lines (blank ones skipped,
// spaces around a name dropped) where the data folder has the file.
std::vector<std::string> named_classes(const DataConfig& cfg, const Variant& v,
                                       const LabelSpace& space) {
  if (!cfg.class_names.empty()) return class_names(cfg, space);
  const std::string folder = data_folder(cfg, v);
  const std::string file = folder + (folder.empty() || folder.back() == '/' ? "" : "/") + v.names;
  std::vector<std::string> shipped;
  if (is_regular_file(file)) {
    std::ifstream in(file);
    std::string line;
    while (std::getline(in, line)) {
      const size_t first = line.find_first_not_of(" \t\r"), last = line.find_last_not_of(" \t\r");
      if (first != std::string::npos) shipped.push_back(line.substr(first, last - first + 1));
    }
    if (in.bad()) throw Error(std::string("cannot read: ") + std::strerror(errno), file);
  }
  return class_names(cfg, space, shipped, file);
}

// The split's files: the official names under the folder, or the patterns of `key`.
std::vector<std::string> split_files(const DataConfig& cfg, const Variant& v, bool train) {
  const std::string& patterns = train ? cfg.train_files : cfg.test_files;
  const std::string key = train ? "data.train_files" : "data.test_files";
  DataConfig in = cfg;
  in.path = data_folder(cfg, v);
  if (!patterns.empty()) return expand_files(in, patterns, key);
  std::vector<std::string> files;
  for (const std::string& name : train ? v.train : v.test) {
    try {
      files.push_back(data_file(in, name, "data.path"));
    } catch (const Error& e) {
      std::vector<std::string> all = v.train;
      all.insert(all.end(), v.test.begin(), v.test.end());
      throw Error(e.cause() + " (data.format " + to_string(cfg.format) +
                      " reads the binary version's " + join_names(all) +
                      " in data.path or in its " + v.folder + "/; name other files with " + key +
                      ")",
                  e.where());
    }
  }
  return files;
}

// The file's size in bytes, checked to be a whole, non-zero number of records.
int64_t checked_size(const std::string& path, const Variant& v) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) throw Error(std::string("cannot open: ") + std::strerror(errno), path);
  std::fseek(f, 0, SEEK_END);
  const int64_t size = std::ftell(f);
  std::fclose(f);
  if (size <= 0) throw Error("empty file: no " + std::string(v.name) + " records", path);
  const int64_t rec = v.record();
  if (size % rec != 0) {
    const int64_t whole = size / rec;
    // The other variant's record size fitting says which format the file is.
    const int64_t other = v.label_bytes == 1 ? kPixels + 2 : kPixels + 1;
    const std::string hint =
        size % other == 0 ? format(" (its size is a whole number of %lld-byte records: is it %s?)",
                                   static_cast<long long>(other),
                                   v.label_bytes == 1 ? "CIFAR-100, data.format cifar100"
                                                      : "CIFAR-10, data.format cifar10")
                          : std::string();
    throw Error(
        format("%lld bytes is not a whole number of %lld-byte %s records (%lld label byte%s + "
               "%lld pixels): record %lld, at byte offset %lld, is truncated to %lld bytes",
               static_cast<long long>(size), static_cast<long long>(rec), v.name,
               static_cast<long long>(v.label_bytes), v.label_bytes > 1 ? "s" : "",
               static_cast<long long>(kPixels), static_cast<long long>(whole),
               static_cast<long long>(whole * rec), static_cast<long long>(size - whole * rec)) +
            hint,
        path);
  }
  return size;
}

struct Images {
  at::Tensor pixels;  // (N, 3, 32, 32) uint8
  at::Tensor labels;  // (N,) int64
};

// Every record of `files`, in order; each label checked against `space`.
Images read_split(const std::vector<std::string>& files, const Variant& v, const LabelSpace& space,
                  const std::string& keys) {
  std::vector<int64_t> records;
  int64_t total = 0;
  for (const auto& path : files) {
    records.push_back(checked_size(path, v) / v.record());
    total += records.back();
  }
  Images out;
  guard_host_memory(
      [&] {
        out.pixels = at::empty({total, kChannels, kSide, kSide}, at::kByte);
        out.labels = at::empty({total}, at::kLong);
      },
      format("reading %lld %s images", static_cast<long long>(total), v.name), keys,
      "name fewer files");
  uint8_t* px = out.pixels.data_ptr<uint8_t>();
  int64_t* lab = out.labels.data_ptr<int64_t>();
  const int64_t rec = v.record(), chunk = 1024;  // records per read
  std::vector<uint8_t> buf(static_cast<size_t>(chunk * rec));
  int64_t n = 0;
  for (size_t k = 0; k < files.size(); ++k) {
    const std::string& path = files[k];
    std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
    if (!f) throw Error(std::string("cannot open: ") + std::strerror(errno), path);
    for (int64_t first = 0; first < records[k]; first += chunk) {
      const int64_t count = std::min(chunk, records[k] - first);
      const size_t want = static_cast<size_t>(count * rec);
      if (std::fread(buf.data(), 1, want, f.get()) != want)
        throw Error(
            format("read failed at byte offset %lld (the file changed while being read?): %s",
                   static_cast<long long>(first * rec), std::strerror(errno)),
            path);
      for (int64_t r = 0; r < count; ++r, ++n) {
        const uint8_t* record = buf.data() + r * rec;
        const int64_t label = record[v.label_at];
        if (label >= space.classes) {
          const int64_t index = first + r;
          throw Error(label_error(label,
                                  format("record %lld (label at byte offset %lld)",
                                         static_cast<long long>(index),
                                         static_cast<long long>(index * rec + v.label_at)),
                                  0, space),
                      path);
        }
        lab[n] = label;
        std::memcpy(px + n * kPixels, record + v.label_bytes, kPixels);
      }
    }
  }
  return out;
}

std::string triple(const std::vector<double>& v) {
  return format("(%.4f, %.4f, %.4f)", v[0], v[1], v[2]);
}

std::string description(const DataConfig& cfg, const std::vector<std::string>& files,
                        const Images& im, const LabelSpace& space, const std::string& scaling) {
  std::ostringstream d;
  d << to_string(cfg.format) << " " << files_text(files) << " (" << im.pixels.size(0)
    << " x 3x32x32 uint8, " << space.classes << " classes";
  if (cfg.format == DataFormat::kCifar100) d << ", " << to_string(cfg.cifar_labels) << " labels";
  d << "; " << scaling << ")";
  return d.str();
}

// The splits' spec: standardized with `mean` and `stdev`, or (empty) scaled to [0, 1]; the classes
// named by `names` (empty: none).
DataSpec images_spec(int64_t classes, const std::vector<double>& mean,
                     const std::vector<double>& stdev, std::vector<std::string> names) {
  DataSpec spec;
  spec.input_shape = {kChannels, kSide, kSide};
  spec.num_classes = classes;
  spec.recipe.class_names = std::move(names);
  spec.input_dtype = at::kFloat;
  spec.pixel_mean = mean.empty() ? std::vector<double>(kChannels, 0.0) : mean;
  spec.pixel_std = stdev.empty() ? std::vector<double>(kChannels, 1.0) : stdev;
  return spec;
}

std::string scaling_text(const DataSpec& spec, bool normalized, const char* whose) {
  if (!normalized) return "scaled to [0, 1] on the device";
  return std::string("standardized per channel on the device with ") + whose + " mean " +
         triple(spec.pixel_mean) + " and std " + triple(spec.pixel_std);
}

}  // namespace

Splits make_cifar_splits(const DataConfig& cfg, int64_t seed) {
  Config::check_value("data.crop_padding", static_cast<double>(cfg.crop_padding));
  const Variant v = variant_of(cfg);
  const LabelSpace space = label_space(
      cfg, v.classes,
      std::string(v.name) + " has " + std::to_string(v.classes) + " classes (data.num_classes 0)");
  const std::vector<std::string> train_files = split_files(cfg, v, /*train=*/true);
  const std::vector<std::string> test_files = split_files(cfg, v, /*train=*/false);
  const Images train = read_split(train_files, v, space, "data.path, data.train_files");
  const Images test = read_split(test_files, v, space, "data.path, data.test_files");

  std::vector<double> mean, stdev;
  if (cfg.normalize) {
    std::tie(mean, stdev) = pixel_statistics(train.pixels);
    for (size_t c = 0; c < stdev.size(); ++c)
      if (!(stdev[c] > 1e-12))
        throw Error(format("channel %zu of the train images has zero variance; cannot standardize "
                           "(set data.normalize=false)",
                           c),
                    "data.normalize");
  }
  const DataSpec spec = images_spec(space.classes, mean, stdev, named_classes(cfg, v, space));
  const std::string scaling = scaling_text(spec, cfg.normalize, "the train");
  auto describe = [&](const std::vector<std::string>& files, const Images& im) {
    return description(cfg, files, im, space, scaling);
  };
  Splits out;
  auto images = std::make_shared<TensorDataset>(train.pixels, train.labels, spec,
                                                describe(train_files, train));
  out.plain = images;  // data.val_fraction's samples, unaugmented
  if (cfg.crop_padding > 0 || cfg.hflip || cfg.auto_augment != AutoAugment::kNone)
    out.train = random_crop_flip(std::move(images), cfg.crop_padding, cfg.hflip,
                                 static_cast<uint64_t>(seed),
                                 BatchAugment(cfg, static_cast<uint64_t>(seed), 32, 32));
  else
    out.train = std::move(images);
  out.test =
      std::make_shared<TensorDataset>(test.pixels, test.labels, spec, describe(test_files, test));
  return out;
}

std::shared_ptr<Dataset> make_cifar_test_split(const DataConfig& cfg, const DataSpec& recorded) {
  const Variant v = variant_of(cfg);
  const LabelSpace space = label_space(cfg, recorded.num_classes, "the run's (preprocess.json)");
  const std::vector<std::string> files = split_files(cfg, v, /*train=*/false);
  const Images test = read_split(files, v, space, "data.path, data.test_files");
  const bool normalize =
      cfg.normalize && recorded.pixel_mean.size() == static_cast<size_t>(kChannels);
  std::vector<std::string> names = named_classes(cfg, v, space);
  const DataSpec spec = normalize ? images_spec(space.classes, recorded.pixel_mean,
                                                recorded.pixel_std, std::move(names))
                                  : images_spec(space.classes, {}, {}, std::move(names));
  const std::string scaling = scaling_text(spec, normalize, "the run's train");
  return std::make_shared<TensorDataset>(test.pixels, test.labels, spec,
                                         description(cfg, files, test, space, scaling));
}

std::vector<FormatRegistration> cifar_formats() {
  FormatRegistration f;
  f.make_splits = [](const DataConfig& cfg, int64_t seed, const at::Device&) {
    return make_cifar_splits(cfg, seed);
  };
  f.recorded_test_split = [](const DataConfig& cfg, const DataSpec& recorded, int64_t) {
    return make_cifar_test_split(cfg, recorded);
  };
  f.preprocess_keys = {
      {"/num_classes", "data.num_classes, data.cifar_labels"},
      {"/class_names", "data.class_names (else the data folder's label-name file)"},
      {"/pixels", "data.normalize, data.train_files (the train images' statistics)"}};
  f.predict_inputs = [](const std::string& path, const DataSpec& spec, const DataConfig&) {
    return picture_inputs(path, spec);
  };
  FormatRegistration cifar100 = f;
  f.name = DataFormat::kCifar10.name();
  cifar100.name = DataFormat::kCifar100.name();
  return {std::move(f), std::move(cifar100)};
}

}  // namespace dtrain::detail
