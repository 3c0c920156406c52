#include "train/start_up_memory.h"

#include <vector>

#include "dist/optimizer_shard.h"
#include "dtrain/comm.h"
#include "train/out_of_memory.h"
#include "util/format.h"

namespace dtrain::detail {
namespace {

const char* stage_text(FaultInjector::StartUp stage) {
  switch (stage) {
    case FaultInjector::StartUp::kModelToDevice:
      return "moving the model to the device";
    case FaultInjector::StartUp::kGradientBuckets:
      return "allocating the gradient buckets";
    case FaultInjector::StartUp::kOptimizerState:
      return "allocating the optimizer state";
    case FaultInjector::StartUp::kOutputCheck:
      return "running the model on one sample (the output check)";
    case FaultInjector::StartUp::kFirstUpdate:
      return "in the first optimizer step";
  }
  return "in the start-up";
}

}  // namespace

StateSettings state_settings(const Config& cfg, int world) {
  StateSettings s;
  s.optimizer = cfg.train.optimizer;
  s.momentum = cfg.train.momentum;
  s.world = world;
  s.shard = shards_optimizer(cfg, world) ? cfg.dist.shard_optimizer : ShardOptimizer::kOff;
  s.reducer = world > 1 || cfg.dist.reduce_single_rank;
  s.bucket_element_bytes = cfg.dist.grad_dtype == GradDtype::kBf16 ? 2 : 0;
  return s;
}

StartUpMemory::StartUpMemory(const StepContext& ctx, std::optional<StateSettings> planned)
    : ctx_(ctx), planned_(planned) {}

void StartUpMemory::run(FaultInjector::StartUp stage, const std::function<void()>& body) {
  if (!failure_.empty()) return;
  try {
    if (ctx_.faults && ctx_.faults->before_start_up(stage) == FaultInjector::Fault::kOutOfMemory)
      throw InjectedOutOfMemory("injected out-of-memory error (fault injector)");
    body();
  } catch (const std::exception& e) {
    if (!is_out_of_memory(e)) throw;
    ran_out(std::string(stage_text(stage)) + " (" + allocator_words(e) + ")");
  }
}

void StartUpMemory::ran_out(const std::string& what) {
  if (!failure_.empty()) return;
  std::vector<int64_t> numels;
  int64_t element_bytes = 4;
  MemoryKinds needs;
  if (planned_) {
    // The parameters, wherever they are now (the move to the device may have stopped half-way).
    bool first = true;
    for (const auto& p : ctx_.model->named_parameters()) {
      if (!p.value().requires_grad()) continue;
      numels.push_back(p.value().numel());
      if (first) element_bytes = static_cast<int64_t>(p.value().element_size()), first = false;
    }
    needs = planned_memory(numels, element_bytes, *planned_);
  } else {
    for (const at::Tensor& p : ctx_.params) numels.push_back(p.numel());
    needs = memory_kinds(ctx_);
  }
  const bool cuda_fp32 = ctx_.device.is_cuda() && ctx_.precision == Precision::kFp32;
  failure_ = state_does_not_fit("out of memory " + what, needs, numels, ctx_.world, allowance(ctx_),
                                cuda_fp32);
}

void StartUpMemory::agree() const {
  try {
    agree_no_failure(*ctx_.control, failure_, "start-up", "");
  } catch (const AgreedError& e) {
    throw StateDoesNotFit(e.cause(), e.where(), e.first_rank());
  }
}

}  // namespace dtrain::detail
