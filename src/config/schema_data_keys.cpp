// The schema's rows of the data section (config/schema_rows.h); which formats read each key is
// config/data_formats.cpp's.
#include "config/data_formats.h"
#include "config/schema_rows.h"

namespace dtrain::config {

void add_data_keys(std::vector<Field>& s) {
  using C = Config;
  s.push_back(format_choice("data.format").always().must_match());
  s.push_back(
      field(
          "data.path", &C::data, &DataConfig::path,
          "idx, tokens, text, cifar10, cifar100, csv, image_folder: folder holding the data files "
          "(relative names are under it); cifar: the folder of the .bin files, or the one the "
          "official archive was unpacked in (holding cifar-10-batches-bin or cifar-100-binary)")
          .by_format()
          .must_match()
          .sizes_data());
  s.push_back(field("data.train_images", &C::data, &DataConfig::train_images,
                    "idx: training images (plain or .gz), relative to data.path")
                  .by_format()
                  .must_match()
                  .sizes_data());
  s.push_back(
      field("data.train_labels", &C::data, &DataConfig::train_labels, "idx: training labels")
          .by_format()
          .must_match());
  s.push_back(field("data.test_images", &C::data, &DataConfig::test_images, "idx: test images")
                  .by_format()
                  .must_match()
                  .sizes_data());
  s.push_back(field("data.test_labels", &C::data, &DataConfig::test_labels, "idx: test labels")
                  .by_format()
                  .must_match());
  s.push_back(field("data.normalize", &C::data, &DataConfig::normalize,
                    "standardize inputs with the training split's mean and std (idx: over all "
                    "pixels; image_folder: with data.pixel_mean and data.pixel_std, on the device; "
                    "cifar: per channel, on the device; csv: per feature column); false: idx and "
                    "cifar pixels scaled to [0, 1], csv features as written")
                  .by_format()
                  .must_match());
  s.push_back(field("data.num_classes", &C::data, &DataConfig::num_classes,
                    "classification: the model's classes; 0 = from the train labels (largest + 1; "
                    "cifar: 10, 100 or 20); every train and test label must be in [0, num_classes)",
                    at_least(0))
                  .always()
                  .must_match());
  s.push_back(field("data.workers", &C::data, &DataConfig::workers,
                    "loader threads per rank (0 = load on the training thread)", at_least(0))
                  .always()
                  .may_change());
  s.push_back(field("data.prefetch", &C::data, &DataConfig::prefetch,
                    "batches prepared ahead per rank", at_least(1))
                  .always()
                  .may_change());
  s.push_back(field("data.pin_memory", &C::data, &DataConfig::pin_memory,
                    "pin host batches for asynchronous copies to the GPU")
                  .always()
                  .may_change());
  s.push_back(field("data.shuffle", &C::data, &DataConfig::shuffle,
                    "reshuffle the training set every epoch")
                  .always()
                  .must_match());
  s.push_back(
      field("data.train_files", &C::data, &DataConfig::train_files,
            "tokens, text, cifar10, cifar100, csv: training files, glob patterns separated by "
            "commas (nanoGPT's train.bin, llm.c's shards, text files, CIFAR batches, CSV files); "
            "cifar: empty = data_batch_1.bin .. data_batch_5.bin (cifar10) or train.bin (cifar100)")
          .by_format()
          .must_match()
          .sizes_data());
  s.push_back(field("data.test_files", &C::data, &DataConfig::test_files,
                    "tokens: evaluation files, read in order in windows of seq_len + 1 (\"\" = no "
                    "test split); cifar: empty = test_batch.bin (cifar10) or test.bin (cifar100); "
                    "csv: empty = data.test_fraction of the train rows")
                  .by_format()
                  .must_match()
                  .sizes_data());
  s.push_back(choice("data.token_dtype", &C::data, &DataConfig::token_dtype,
                     "tokens: token width of headerless files (auto: llm.c's header says, else "
                     "uint16 as nanoGPT writes)")
                  .by_format()
                  .must_match());
  s.push_back(field("data.seq_len", &C::data, &DataConfig::seq_len,
                    "tokens, text: tokens per sample (0 = model.seq_len)", at_least(0))
                  .by_format()
                  .must_match());
  s.push_back(field("data.windows", &C::data, &DataConfig::windows,
                    "tokens, text: training windows per epoch at seeded random positions (0 = "
                    "train tokens / (seq_len + 1))",
                    at_least(0))
                  .by_format()
                  .must_match());
  s.push_back(field("data.test_fraction", &C::data, &DataConfig::test_fraction,
                    "text: the share of the bytes (the end) kept for evaluation; csv without "
                    "data.test_files: the share of the train files' rows, drawn with run.seed, "
                    "kept for evaluation",
                    in_range(0.0, 0.9))
                  .by_format(without_test_files)
                  .must_match());
  s.push_back(field("data.crop_padding", &C::data, &DataConfig::crop_padding,
                    "cifar10, cifar100, training: RandomCrop(32, padding=P): each image padded by "
                    "P pixels of value 0 on every side and cropped back to 32x32 at a random "
                    "place, i.e. moved by up to P pixels each way with zeros shifted in (the CIFAR "
                    "recipe's 4, with data.hflip); 0 = off; evaluation images are never cropped",
                    int_range(0, 31, "a padding of 32 or more can crop the image away entirely"))
                  .by_format()
                  .must_match());
  s.push_back(choice("data.cifar_labels", &C::data, &DataConfig::cifar_labels,
                     "cifar100: the fine labels (100 classes) or the coarse ones (20 superclasses)")
                  .by_format()
                  .must_match());
  s.push_back(
      field("data.class_names", &C::data, &DataConfig::class_names,
            "idx, cifar10, cifar100, csv classification: the classes' names, class 0 first, "
            "exactly one per class (e.g. Fashion-MNIST's [T-shirt/top, Trouser, ...]); written to "
            "preprocess.json, and dtrain predict names the class beside its index; empty = cifar: "
            "the names the data folder ships (batches.meta.txt; fine_label_names.txt or "
            "coarse_label_names.txt), else none. Image folders name their classes by their folders",
            distinct_names())
          .by_format(classifying)
          .must_match());
  s.push_back(choice("data.csv_task", &C::data, &DataConfig::csv_task,
                     "csv: classification (one target column of class ids 0, 1, ...: whole "
                     "numbers, 3 and 3.0 alike; train.loss cross_entropy) or regression (one or "
                     "more float target columns; train.loss mse)")
                  .by_format()
                  .must_match());
  s.push_back(field("data.target_columns", &C::data, &DataConfig::target_columns,
                    "csv: the target column(s) by header name, comma-separated: one for "
                    "classification, one or more for regression")
                  .by_format()
                  .must_match());
  s.push_back(field("data.feature_columns", &C::data, &DataConfig::feature_columns,
                    "csv: the input columns by header name, comma-separated, in this order; empty "
                    "= every column that is not a target, in file order")
                  .by_format()
                  .must_match());
  s.push_back(field("data.train_dir", &C::data, &DataConfig::train_dir,
                    "image_folder: the training images, <train_dir>/<class>/<file>.jpg|jpeg|png as "
                    "torchvision's ImageFolder reads them (classes: the sorted subfolder names), "
                    "relative to data.path")
                  .by_format()
                  .must_match()
                  .sizes_data());
  s.push_back(field("data.test_dir", &C::data, &DataConfig::test_dir,
                    "image_folder: the evaluation images, laid out alike; its classes are looked "
                    "up by name among the training classes (\"\" = no test split)")
                  .by_format()
                  .must_match()
                  .sizes_data());
  s.push_back(field("data.image_size", &C::data, &DataConfig::image_size,
                    "image_folder: side of the square crop the model sees (torchvision's "
                    "RandomResizedCrop / CenterCrop size)",
                    at_least(1))
                  .by_format()
                  .must_match());
  s.push_back(field("data.resize", &C::data, &DataConfig::resize,
                    "image_folder, evaluation: the shorter side is resized to this before the "
                    "center crop (0 = data.image_size x 8/7 rounded: 256 for 224)",
                    at_least(0))
                  .by_format()
                  .must_match());
  s.push_back(field("data.crop_scale", &C::data, &DataConfig::crop_scale,
                    "image_folder, training: [low, high] share of the image's area a random crop "
                    "covers (RandomResizedCrop's scale)",
                    ordered_pair(0.0, 1.0))
                  .by_format()
                  .must_match());
  s.push_back(field("data.crop_ratio", &C::data, &DataConfig::crop_ratio,
                    "image_folder, training: [low, high] aspect ratio (width / height) of a random "
                    "crop, drawn log-uniformly (RandomResizedCrop's ratio)",
                    ordered_pair(0.0, 1e6))
                  .by_format()
                  .must_match());
  s.push_back(field("data.hflip", &C::data, &DataConfig::hflip,
                    "image_folder, cifar10, cifar100, training: flip half of the images left to "
                    "right (RandomHorizontalFlip), after the crop; default on for image_folder, "
                    "off for cifar10 / cifar100 unless set")
                  .by_format()
                  .must_match());
  s.push_back(field("data.scaled_decode", &C::data, &DataConfig::scaled_decode,
                    "image_folder: decode a JPEG at 1/2, 1/4 or 1/8 of its size (libjpeg-turbo's "
                    "reduced IDCTs), the smallest that keeps the crop at least data.image_size "
                    "(evaluation: the shorter side at least data.resize): a fraction of the work "
                    "for photos several times larger than the crop, pixels a few levels from a "
                    "full-size decode's; false = always full size, as PIL")
                  .by_format()
                  .must_match());
  s.push_back(
      choice("data.decode", &C::data, &DataConfig::decode,
             "image_folder: where JPEGs are decoded and transformed: cpu = libjpeg-turbo and PIL's "
             "resampling in the loader threads; gpu = nvJPEG's batched decoder (the GPU's hardware "
             "JPEG decoder where it has one) and the same crops, flips and resampling in CUDA "
             "kernels, the loader threads only reading files (a CUDA rank with libnvjpeg, else an "
             "error); auto (the default) = gpu where that is possible and fewer than 12 loader "
             "threads can decode at once (data.workers, at most the rank's CPUs but one), else "
             "cpu, the log saying why. PNG, progressive, CMYK and other JPEGs nvJPEG cannot take "
             "decode on the CPU (counted in the log)")
          .by_format()
          .may_change());
  s.push_back(field("data.pixel_mean", &C::data, &DataConfig::pixel_mean,
                    "image_folder with data.normalize: per-channel mean of x / 255, subtracted on "
                    "the device (ImageNet's by default)",
                    count_of(3))
                  .by_format()
                  .must_match());
  s.push_back(field("data.pixel_std", &C::data, &DataConfig::pixel_std,
                    "image_folder with data.normalize: per-channel std of x / 255, divided by on "
                    "the device (ImageNet's by default)",
                    count_of(3, positive()))
                  .by_format()
                  .must_match());
  s.push_back(
      choice("data.auto_augment", &C::data, &DataConfig::auto_augment,
             "training images: an automatic augmentation of each image after its crop and flip, on "
             "its uint8 pixels (on the GPU with data.decode gpu), torchvision's op for op: "
             "trivial_augment_wide = TrivialAugmentWide() (one op of 14, a random magnitude of 31 "
             "bins), rand_augment = RandAugment(num_ops=data.rand_augment_ops, "
             "magnitude=data.rand_augment_magnitude), auto_augment = "
             "AutoAugment(AutoAugmentPolicy.IMAGENET); nearest interpolation, fill 0; none = off")
          .by_format()
          .must_match());
  s.push_back(field("data.rand_augment_ops", &C::data, &DataConfig::rand_augment_ops,
                    "rand_augment: ops applied to each image (RandAugment's num_ops)",
                    int_range(1, 14, "RandAugment draws from 14 ops"))
                  .by_format(rand_augment)
                  .must_match());
  s.push_back(field("data.rand_augment_magnitude", &C::data, &DataConfig::rand_augment_magnitude,
                    "rand_augment: the magnitude bin of every op, of 31 (RandAugment's magnitude)",
                    int_range(0, 30, "RandAugment has 31 magnitude bins, 0..30"))
                  .by_format(rand_augment)
                  .must_match());
  s.push_back(field("data.random_erase", &C::data, &DataConfig::random_erase,
                    "training images: the probability of erasing a random box of each standardized "
                    "image to 0 (torchvision's RandomErasing(p, scale=(0.02, 0.33), ratio=(0.3, "
                    "3.3), value=0) after Normalize, as its reference recipe); 0 = off",
                    in_range(0.0, 1.0000001))
                  .by_format()
                  .must_match());
  s.push_back(
      field("data.val_fraction", &C::data, &DataConfig::val_fraction,
            "idx, cifar10, cifar100, csv, tokens: hold out this share of the training set as a "
            "validation split, by a fixed rule of run.seed (the same samples on any number of "
            "ranks and on resume), evaluated beside the test split; train.monitor val_loss, "
            "val_accuracy and val_top5_accuracy choose on it; 0 = none",
            in_range(0.0, 0.5))
          .by_format()
          .must_match());
  s.push_back(choice("data.synthetic_task", &C::data, &DataConfig::synthetic_task,
                     "synthetic: what to generate")
                  .by_format()
                  .must_match());
  s.push_back(
      field("data.synthetic_shape", &C::data, &DataConfig::synthetic_shape,
            "synthetic images: sample shape (e.g. [3, 224, 224]); tokens: [sequence length]",
            all_positive(true))
          .by_format()
          .must_match()
          .sizes_data());
  s.push_back(field("data.synthetic_size", &C::data, &DataConfig::synthetic_size,
                    "synthetic: training samples", at_least(1))
                  .by_format()
                  .must_match()
                  .sizes_data());
  s.push_back(field("data.synthetic_test_size", &C::data, &DataConfig::synthetic_test_size,
                    "synthetic: test samples (0 = no test split)", at_least(0))
                  .by_format()
                  .must_match()
                  .sizes_data());
  s.push_back(field("data.synthetic_features", &C::data, &DataConfig::synthetic_features,
                    "synthetic: input features", at_least(1))
                  .by_format()
                  .must_match()
                  .sizes_data());
  s.push_back(field("data.synthetic_classes", &C::data, &DataConfig::synthetic_classes,
                    "synthetic: classes (classification)", at_least(2))
                  .by_format()
                  .must_match());
  s.push_back(field("data.synthetic_noise", &C::data, &DataConfig::synthetic_noise,
                    "synthetic: noise on regression targets", non_negative())
                  .by_format()
                  .must_match());
  s.push_back(field("data.synthetic_uint8", &C::data, &DataConfig::synthetic_uint8,
                    "synthetic images: hold pixels as uint8 0..255, standardized on the device (a "
                    "quarter of the host memory and of the copy to the GPU)")
                  .by_format()
                  .must_match());
}

}  // namespace dtrain::config
