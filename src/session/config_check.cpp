#include "session/config_check.h"

#include "dtrain/error.h"
#include "dtrain/models.h"
#include "telemetry/profiler.h"

namespace dtrain::detail {

void check_config_now(const Config& cfg) {
  require_model(cfg.model.name);  // a mistyped name before the data is read
  if (cfg.run.profile_steps > 0) {
    const std::string problem = profiler_trace_problem();
    if (!problem.empty())
      throw Error(std::to_string(cfg.run.profile_steps) +
                      " step(s) to profile, but this LibTorch's profiler cannot write traces (" +
                      problem + "; a LibTorch built with Kineto can, such as the CUDA builds): set "
                      "run.profile_steps=0; run.timeline=true records every rank's steps, phases "
                      "and gradient buckets as a Chrome trace without the profiler",
                  "run.profile_steps");
  }
}

std::string config_line(const Config& cfg, const std::string& origin) {
  const Resolved& r = cfg.resolved;
  const std::string micro =
      r.micro_batch < 0 ? std::string("micro-batch auto (measured when training starts)")
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
