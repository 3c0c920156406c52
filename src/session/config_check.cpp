#include "session/config_check.h"

#include <string>
#include <utility>

#include "dtrain/error.h"
#include "dtrain/models.h"
#include "telemetry/profiler.h"

namespace dtrain::detail {

namespace {

// The image recipe's augmentations need images: on other data each is an Error naming its key.
void check_image_recipe(const Config& cfg) {
  const std::string f = cfg.data.format.name();
  const bool augments = f == "cifar10" || f == "cifar100" || f == "image_folder";
  const bool images = augments || f == "idx" ||
                      (f == "synthetic" && cfg.data.synthetic_task == SyntheticTask::kImages);
  const std::pair<const char*, bool> keys[] = {
      {"data.auto_augment", cfg.data.auto_augment != AutoAugment::kNone && !augments},
      {"data.random_erase", cfg.data.random_erase > 0 && !augments},
      {"train.mixup_alpha", cfg.train.mixup_alpha > 0 && !images},
      {"train.cutmix_alpha", cfg.train.cutmix_alpha > 0 && !images}};
  for (const auto& [key, wrong] : keys)
    if (wrong)
      throw Error(std::string(key) + " augments images, but data.format " + f +
                      (f == "synthetic" ? " with data.synthetic_task " +
                                              std::string(to_string(cfg.data.synthetic_task))
                                        : "") +
                      " gives none: " +
                      (std::string(key).rfind("data.", 0) == 0
                           ? "cifar10, cifar100 and image_folder"
                           : "idx, cifar10, cifar100, image_folder and synthetic images") +
                      " take it",
                  key);
}

}  // namespace

void check_config_now(const Config& cfg) {
  require_model(cfg.model.name);  // a mistyped name before the data is read
  check_image_recipe(cfg);
  const Monitor m = cfg.train.monitor;
  if ((m == Monitor::kValLoss || m == Monitor::kValAccuracy || m == Monitor::kValTop5) &&
      !(cfg.data.val_fraction > 0))
    throw Error(std::string(to_string(m)) +
                    " reads the validation split, but data.val_fraction is 0: set it " +
                    "(e.g. 0.05) to hold out part of the training set, or monitor a test_* metric",
                "train.monitor");
  if (cfg.run.profile_steps > 0) {
    const std::string problem = profiler_trace_problem();
    if (!problem.empty())
      throw Error(std::to_string(cfg.run.profile_steps) +
                      " step(s) to profile, but this LibTorch's profiler cannot write traces (" +
                      problem +
                      "; a LibTorch built with Kineto can, such as the CUDA builds): set "
                      "run.profile_steps=0; run.timeline=true records every rank's steps, phases "
                      "and gradient buckets as a Chrome trace without the profiler",
                  "run.profile_steps");
  }
}

std::string config_line(const Config& cfg, const std::string& origin) {
  const Resolved& r = cfg.resolved;
  const std::string micro = r.micro_batch < 0
                                ? std::string("micro-batch auto (measured when training starts)")
                                : "micro-batch " + std::to_string(r.micro_batch) + " x " +
                                      std::to_string(r.accum_steps) + " accumulation step(s)";
  const std::string dir = cfg.run.run_dir();
  return "config: " + origin + ", resolved for world " + std::to_string(r.world) +
         ": global batch " + std::to_string(cfg.train.global_batch) + " = " +
         std::to_string(r.world) + " rank(s) x " + std::to_string(r.rank_batch) + " per rank, " +
         micro + "; every setting " +
         (dir.empty() ? std::string("with --print-config (run.dir is '': no config.yaml)")
                      : "in " + dir + "/config.yaml");
}

}  // namespace dtrain::detail
