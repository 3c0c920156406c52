// What the config decides before a run starts anything: the checks that the config and this
// build alone can answer (an unknown model.name, a run.profile_steps this LibTorch cannot
// record), made at the config check on every rank, and the log's one line on the config (the
// whole of it is in the run directory's config.yaml, or printed by `dtrain CONFIG
// --print-config`).
#pragma once

#include <string>

#include "dtrain/config.h"

namespace dtrain::detail {

// Throws dtrain::Error naming the key: a model.name no model is registered as (with the closest
// name); run.profile_steps > 0 on a LibTorch whose profiler cannot write traces (no Kineto, as
// Debian's 1.13), pointing to run.timeline; the image recipe's augmentations (data.auto_augment,
// data.random_erase, train.mixup_alpha, train.cutmix_alpha) on data that gives no images.
void check_config_now(const Config& cfg);

// "config: <origin>, resolved for world W: global batch G = W rank(s) x B per rank, micro-batch
// M x A accumulation step(s); every setting in <run dir>/config.yaml" (a resolved config).
std::string config_line(const Config& cfg, const std::string& origin);

}  // namespace dtrain::detail
