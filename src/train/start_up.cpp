#include "train/start_up.h"

#include <string>

#include "dtrain/error.h"
#include "train/recovery.h"

namespace dtrain::detail {
namespace {

int64_t first_micro_batch(const StepContext& ctx, const Config& cfg, const Dataset& train,
                          const ResumePoint* from) {
  if (from && from->saved_world == ctx.world) return from->position.micro_batch;
  if (cfg.resolved.micro_batch >= 0) return cfg.resolved.micro_batch;
  return find_micro_batch(ctx, train, cfg.resolved.rank_batch);
}

StepPlan planned(const Config& cfg, const Dataset& train, int world, int rank,
                 const ResumePoint* from) {
  const int64_t first = from ? from->position.step : 0;
  StepPlan p = plan_steps(cfg, train.size(), world, rank, first);
  if (from && from->position.steps_per_epoch != p.steps_per_epoch)
    throw Error("an epoch has " + std::to_string(p.steps_per_epoch) + " steps in this run but " +
                    std::to_string(from->position.steps_per_epoch) +
                    " in the checkpoint: cannot resume",
                from->path);
  return p;
}

}  // namespace

StartUp start_up(StepContext& ctx, const Config& cfg, Communicator& control, const Dataset& train) {
  StartUp s;
  s.run_dir = std::make_unique<RunDirectory>(cfg, control);
  s.from = resume(ctx, cfg, control);
  s.run_dir->check_fresh_start(s.from.has_value(), control);
  const ResumePoint* from = s.from ? &*s.from : nullptr;
  s.micro_batch = first_micro_batch(ctx, cfg, train, from);
  // Agreed: the data's size against the batch (data.synthetic_size=1) fails on every rank alike
  // (Note [data errors]).
  agree_no_failure(control, [&] { s.plan = planned(cfg, train, ctx.world, control.rank(), from); });
  return s;
}

}  // namespace dtrain::detail
