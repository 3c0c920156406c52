#include "dtrain/trainer.h"

#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "dtrain/amp.h"
#include "dtrain/data/loader.h"
#include "dtrain/detail/device_memory.h"
#include "dtrain/detail/torch_compat.h"
#include "dtrain/detail/fs.h"
#include "dtrain/data/sampler.h"
#include "dtrain/error.h"
#include "dtrain/reducer.h"
#include "dtrain/runtime.h"
#include "dtrain/telemetry/log.h"

namespace dtrain {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string shape_str(const at::Tensor& t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? "," : "") + std::to_string(t.size(i));
  return s + "]";
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// Every rank's string, in rank order, over a (CPU) communicator.
std::vector<std::string> gather_strings(Communicator& comm, const std::string& s) {
  at::Tensor len = at::tensor({static_cast<int64_t>(s.size())}, at::kLong);
  const int64_t max_len = comm.all_gather(len).max().item<int64_t>();
  at::Tensor buf = at::zeros({max_len}, at::kByte);
  std::memcpy(buf.data_ptr(), s.data(), s.size());
  at::Tensor all = comm.all_gather(buf).contiguous();  // (world, max_len)
  std::vector<std::string> out;
  for (int64_t r = 0; r < all.size(0); ++r) {
    const char* p = static_cast<const char*>(all[r].data_ptr());
    out.emplace_back(p, strnlen(p, static_cast<size_t>(max_len)));
  }
  return out;
}

}  // namespace

struct Trainer::Impl {
  std::unique_ptr<GradScaler> scaler;  // fp16 only
  int64_t inject_oom_step = -1;        // test hook: DTRAIN_TEST_INJECT_OOM=rank:step
  int64_t oom_retries = 0;
  int64_t skipped_steps = 0;
  at::Tensor window_loss;              // sum of step losses since the last log line (device)
  bool fused_adamw = false;            // AdamW through one fused kernel (state kept here)
  std::vector<at::Tensor> exp_avg, exp_avg_sq, steps;
  std::unique_ptr<Watchdog> watchdog;
  std::unique_ptr<Reducer> reducer;  // null with one rank: nothing to average
  std::ofstream metrics;
};

Trainer::Trainer(Config cfg, Communicator& comm, Communicator& control, at::Device device,
                 std::shared_ptr<Model> model, std::shared_ptr<const Dataset> train,
                 std::shared_ptr<const Dataset> test)
    : cfg_(std::move(cfg)),
      comm_(comm),
      control_(control),
      device_(device),
      model_(std::move(model)),
      train_(std::move(train)),
      test_(std::move(test)),
      impl_(std::make_unique<Impl>()) {
  if (!model_) throw Error("Trainer: no model");
  if (!train_) throw Error("Trainer: no training data");
  if (cfg_.resolved.world != comm_.world()) cfg_.resolve(comm_.world());
  if (cfg_.run.gpu_memory_fraction > 0) {
    if (!device_.is_cuda())
      log::warn("run.gpu_memory_fraction is set but this rank computes on the CPU: ignored");
    detail::set_memory_fraction(device_, cfg_.run.gpu_memory_fraction);
  }
  if (cfg_.train.precision != Precision::kFp32 && !autocast_supported(device_, cfg_.train.precision))
    log::warn(std::string("this LibTorch has no ") + to_string(cfg_.train.precision) +
              " autocast on " + device_.str() + ": computing in fp32" +
              (cfg_.train.precision == Precision::kFp16 ? " (loss scaling still applies)" : ""));
  if (cfg_.train.precision == Precision::kFp16) impl_->scaler = std::make_unique<GradScaler>(device_);
  if (const char* inj = std::getenv("DTRAIN_TEST_INJECT_OOM")) {
    // "rank:step": that rank fails its first attempt at that step with an out-of-memory error.
    int r = -1;
    long long st = -1;
    if (std::sscanf(inj, "%d:%lld", &r, &st) == 2 && r == comm_.rank()) impl_->inject_oom_step = st;
  }
  impl_->watchdog = std::make_unique<Watchdog>(cfg_.run.timeout_s, comm_.rank());
  impl_->watchdog->beat("setup");

  model_->to(device_);
  for (const auto& p : model_->named_parameters()) {
    if (!p.value().requires_grad()) continue;
    params_.push_back(p.value());
    param_names_.push_back(p.key());
  }
  if (params_.empty()) throw Error("the model has no trainable parameters", "model.name");

  check_agreement();
  broadcast_parameters();
  if (comm_.world() > 1 || cfg_.dist.reduce_single_rank) {
    ReducerOptions ro;
    ro.bucket_cap_bytes = static_cast<int64_t>(cfg_.dist.bucket_cap_mb * 1024 * 1024);
    ro.first_bucket_cap_bytes = static_cast<int64_t>(cfg_.dist.first_bucket_mb * 1024 * 1024);
    ro.overlap = cfg_.dist.overlap;
    ro.find_unused_parameters = cfg_.dist.find_unused_parameters;
    if (cfg_.dist.grad_dtype == "bf16") ro.comm_dtype = at::kBFloat16;
    impl_->reducer = std::make_unique<Reducer>(params_, param_names_, comm_, control_, ro);
  }

  const auto& t = cfg_.train;
  if (t.optimizer == "sgd") {
    optimizer_ = std::make_unique<torch::optim::SGD>(
        params_, torch::optim::SGDOptions(t.lr).momentum(t.momentum).weight_decay(t.weight_decay));
  } else if (t.optimizer == "adam") {
    optimizer_ = std::make_unique<torch::optim::Adam>(
        params_, torch::optim::AdamOptions(t.lr).betas({t.beta1, t.beta2}).eps(t.eps)
                     .weight_decay(t.weight_decay));
  } else if (t.optimizer == "adamw") {
    optimizer_ = std::make_unique<torch::optim::AdamW>(
        params_, torch::optim::AdamWOptions(t.lr).betas({t.beta1, t.beta2}).eps(t.eps)
                     .weight_decay(t.weight_decay));
  } else {
    throw Error("unknown optimizer '" + t.optimizer + "'", "train.optimizer");
  }

  impl_->fused_adamw = t.optimizer == "adamw" && t.fused_optimizer && device_.is_cuda() &&
                       compat::kHasFusedAdamW;
  if (impl_->fused_adamw) {
    for (const auto& p : params_) {
      if (p.scalar_type() != at::kFloat) impl_->fused_adamw = false;
      impl_->exp_avg.push_back(at::zeros_like(p, at::MemoryFormat::Preserve));
      impl_->exp_avg_sq.push_back(at::zeros_like(p, at::MemoryFormat::Preserve));
      impl_->steps.push_back(at::zeros({}, p.options().dtype(at::kFloat)));
    }
    log::detail(impl_->fused_adamw ? "optimizer: AdamW, fused multi-tensor kernel"
                                   : "optimizer: AdamW (not fused: parameters are not all fp32)");
  }

  if (comm_.rank() == 0 && !cfg_.run.dir.empty()) {
    run_dir_ = detail::join_path(cfg_.run.dir, cfg_.run.name);
    detail::make_dirs(run_dir_);
    detail::write_file_atomic(run_dir_ + "/config.yaml", cfg_.dump());
    impl_->metrics.open(run_dir_ + "/metrics.jsonl", std::ios::trunc);
    if (!impl_->metrics) throw Error("cannot write metrics", run_dir_ + "/metrics.jsonl");
  }
}

Trainer::~Trainer() = default;

void Trainer::check_agreement() {
  impl_->watchdog->beat("agreement check");
  // Config, parameter signature and dataset sizes must be equal on every rank.
  std::string sig;
  for (size_t i = 0; i < params_.size(); ++i)
    sig += param_names_[i] + shape_str(params_[i]) + at::toString(params_[i].scalar_type()) + ";";
  const int64_t mine[4] = {static_cast<int64_t>(cfg_.hash() & 0x7fffffffffffffffull),
                           static_cast<int64_t>(fnv1a(sig) & 0x7fffffffffffffffull),
                           train_->size(), test_ ? test_->size() : -1};
  at::Tensor local = at::tensor(std::vector<int64_t>(mine, mine + 4), at::kLong);
  at::Tensor all = control_.all_gather(local);  // (world, 4)
  auto acc = all.accessor<int64_t, 2>();
  for (int r = 1; r < control_.world(); ++r) {
    if (acc[r][0] != acc[0][0]) {
      throw Error("ranks resolved different configs (rank 0 hash " + std::to_string(acc[0][0]) +
                  ", rank " + std::to_string(r) + " hash " + std::to_string(acc[r][0]) +
                  "): every rank must get the same config file and overrides");
    }
    if (acc[r][1] != acc[0][1]) {
      // Find the first parameter that differs: gather every rank's signature.
      std::vector<std::string> sigs;
      for (size_t i = 0; i < params_.size(); ++i)
        sigs.push_back(param_names_[i] + " " + shape_str(params_[i]) + " " +
                       at::toString(params_[i].scalar_type()));
      std::string joined;
      for (auto& s : sigs) joined += s + "\n";
      auto gathered = gather_strings(control_, joined);
      std::istringstream a(gathered[0]), b(gathered[r]);
      std::string la, lb;
      int idx = 0;
      while (true) {
        bool ga = static_cast<bool>(std::getline(a, la)), gb = static_cast<bool>(std::getline(b, lb));
        if (!ga) la = "(none)";
        if (!gb) lb = "(none)";
        if (la != lb || (!ga && !gb)) break;
        ++idx;
      }
      throw Error("model parameters differ between ranks: parameter #" + std::to_string(idx) +
                  " is '" + la + "' on rank 0 but '" + lb + "' on rank " + std::to_string(r));
    }
    if (acc[r][2] != acc[0][2] || acc[r][3] != acc[0][3]) {
      throw Error("datasets differ between ranks: rank 0 has " + std::to_string(acc[0][2]) +
                  " train / " + std::to_string(acc[0][3]) + " test samples, rank " +
                  std::to_string(r) + " has " + std::to_string(acc[r][2]) + " / " +
                  std::to_string(acc[r][3]));
    }
  }
}

void Trainer::broadcast_parameters() {
  impl_->watchdog->beat("parameter broadcast");
  at::NoGradGuard no_grad;
  // Parameters in another memory layout (channels-last) travel as a contiguous copy.
  auto send = [this](const at::Tensor& t) {
    at::Tensor d = t.detach();
    if (d.numel() == 0) return;
    if (d.is_contiguous()) {
      comm_.broadcast(d, 0);
    } else {
      at::Tensor c = d.contiguous();
      comm_.broadcast(c, 0);
      d.copy_(c);
    }
  };
  for (auto& p : model_->parameters()) send(p);
  for (auto& b : model_->buffers()) send(b);
}

at::Tensor Trainer::loss_fn(const at::Tensor& out, const at::Tensor& targets, bool sum) const {
  const auto reduction = sum ? at::Reduction::Sum : at::Reduction::Mean;
  if (cfg_.train.loss == "cross_entropy") {
    if (targets.scalar_type() != at::kLong)
      throw Error("cross_entropy needs class-id targets; this dataset gives " +
                      std::string(at::toString(targets.scalar_type())) + " targets",
                  "train.loss");
    // Sequence models give (B, T, V) logits for (B, T) targets: every position is a sample.
    if (out.dim() == 3)
      return at::cross_entropy_loss(out.reshape({-1, out.size(2)}).to(at::kFloat),
                                    targets.reshape({-1}), {}, reduction);
    return at::cross_entropy_loss(out.to(at::kFloat), targets, {}, reduction);
  }
  // mse
  at::Tensor t = targets.to(at::kFloat);
  if (t.dim() == 1) t = t.unsqueeze(1);
  return at::mse_loss(out.to(at::kFloat), t, reduction);
}

double Trainer::lr_at(int64_t step) const {
  const auto& t = cfg_.train;
  double lr = t.lr;
  if (t.warmup_steps > 0 && step < t.warmup_steps)
    return lr * static_cast<double>(step + 1) / static_cast<double>(t.warmup_steps);
  if (t.schedule == "cosine" && total_steps_ > t.warmup_steps) {
    const double progress = static_cast<double>(step - t.warmup_steps) /
                            static_cast<double>(total_steps_ - t.warmup_steps);
    lr *= 0.5 * (1.0 + std::cos(M_PI * std::min(1.0, progress)));
  }
  return lr;
}

// Forward and backward of every micro-batch of this rank's share of one step; gradients end up
// averaged over all ranks. Returns false (and leaves no gradient) when any rank ran out of
// memory: every rank then knows it, because the failing rank still completes the gradient
// collectives (with zeros) and all ranks agree on a flag before anyone uses the result.
bool Trainer::forward_backward(const Batch& batch, int64_t micro, at::Tensor& loss_sum) {
  auto& wd = *impl_->watchdog;
  const int64_t n = batch.size();
  const int64_t pieces = (n + micro - 1) / micro;
  bool failed = false;
  std::string failure;
  try {
    for (int64_t m = 0; m < pieces; ++m) {
      const int64_t begin = m * micro, len = std::min(micro, n - begin);
      if (impl_->inject_oom_step == step_ && micro > 1) {
        impl_->inject_oom_step = -1;  // once
        throw detail::InjectedOutOfMemory("injected out-of-memory error (test hook)");
      }
      at::Tensor inputs = batch.inputs.narrow(0, begin, len);
      at::Tensor targets = batch.targets.narrow(0, begin, len);
      wd.beat("forward/backward");
      at::Tensor loss;
      {
        AutocastGuard autocast(device_, cfg_.train.precision);
        at::Tensor out = model_->forward(inputs);
        // Each micro-batch's mean loss is weighted by its share of this rank's samples, so the
        // accumulated gradient is the mean over the rank's share of the global batch.
        loss = loss_fn(out, targets, /*sum=*/false) * (static_cast<double>(len) / n);
      }
      const bool last = m == pieces - 1;
      // Only the last micro-batch communicates; earlier ones accumulate locally.
      if (impl_->reducer) impl_->reducer->prepare(/*sync=*/last);
      (impl_->scaler ? impl_->scaler->scale(loss) : loss).backward();
      loss_sum += loss.detach().to(at::kDouble);
    }
  } catch (const std::exception& e) {
    if (!detail::is_out_of_memory(e)) throw;
    failed = true;
    failure = e.what();
    failure = failure.substr(0, failure.find('\n'));
  }
  wd.beat("gradient all-reduce");
  const auto t_comm = Clock::now();
  if (impl_->reducer) impl_->reducer->finish(/*abandon=*/failed);
  int64_t any_failed = failed ? 1 : 0;
  if (comm_.world() > 1) {
    at::Tensor flag = at::tensor({any_failed}, at::kLong);
    control_.all_reduce(flag, ReduceOp::kMax);
    any_failed = flag.item<int64_t>();
  }
  phases_.comm += since(t_comm);
  if (any_failed) {
    if (failed) log::warn("out of memory at step " + std::to_string(step_) + " with micro-batch " +
                          std::to_string(micro) + ": " + failure);
    for (auto& p : params_) p.mutable_grad() = at::Tensor();  // nothing of this attempt survives
    detail::empty_cache(device_);
    return false;
  }
  return true;
}

void Trainer::train_step(const Batch& batch) {
  auto& wd = *impl_->watchdog;
  for (auto& p : params_) p.mutable_grad() = at::Tensor();
  at::Tensor loss_sum = at::zeros({}, at::TensorOptions().device(device_).dtype(at::kDouble));
  auto t0 = Clock::now();
  const double comm_before = phases_.comm;
  while (!forward_backward(batch, cfg_.resolved.micro_batch, loss_sum)) {
    // Out of memory on some rank: halve the micro-batch (doubling accumulation) on every rank
    // and redo the step on the same samples. The global batch, and so the result, is unchanged.
    const int64_t micro = cfg_.resolved.micro_batch;
    if (micro <= 1)
      throw Error("out of memory even with a micro-batch of 1 sample at step " +
                      std::to_string(step_) + "; the model does not fit on this device",
                  "train.micro_batch");
    int64_t next = micro / 2;
    while (cfg_.resolved.rank_batch % next != 0) --next;  // a divisor, so micro-batches are equal
    cfg_.set_micro_batch(next);
    log::info("out of memory at step " + std::to_string(step_) + ": micro-batch " +
              std::to_string(micro) + " -> " + std::to_string(next) + ", accumulation " +
              std::to_string(cfg_.resolved.accum_steps) + " steps; global batch unchanged (" +
              std::to_string(cfg_.train.global_batch) + "); retrying the step");
    ++impl_->oom_retries;
    loss_sum.zero_();
  }
  phases_.compute += since(t0) - (phases_.comm - comm_before);

  wd.beat("optimizer step");
  t0 = Clock::now();
  bool skip = false;
  if (impl_->scaler) {
    impl_->scaler->unscale(params_);  // once, after the all-reduce, before clipping
    skip = impl_->scaler->found_inf();
  }
  if (!skip) {
    if (cfg_.train.clip_grad_norm > 0)
      torch::nn::utils::clip_grad_norm_(params_, cfg_.train.clip_grad_norm);
    const double lr = lr_at(step_);
    if (impl_->fused_adamw) {
      std::vector<at::Tensor> grads;
      for (auto& p : params_) grads.push_back(p.grad().defined() ? p.grad() : at::zeros_like(p));
      at::NoGradGuard no_grad;
      compat::fused_adamw_step(params_, grads, impl_->exp_avg, impl_->exp_avg_sq, impl_->steps,
                               lr, cfg_.train.beta1, cfg_.train.beta2, cfg_.train.weight_decay,
                               cfg_.train.eps);
    } else {
      for (auto& group : optimizer_->param_groups()) group.options().set_lr(lr);
      optimizer_->step();
    }
  } else {
    ++impl_->skipped_steps;
    log::info("step " + std::to_string(step_) + ": non-finite gradients with loss scale " +
              fmt("%g", impl_->scaler->current_scale()) + "; optimizer step skipped on every rank");
  }
  if (impl_->scaler) impl_->scaler->update();
  phases_.optimizer += since(t0);
  ++step_;
  // Kept on the device: reading it here would stall the host on every step.
  if (!impl_->window_loss.defined()) impl_->window_loss = at::zeros_like(loss_sum);
  impl_->window_loss += loss_sum;
}

double Trainer::take_window_loss() {
  if (!impl_->window_loss.defined()) return 0.0;
  const double v = impl_->window_loss.item<double>();
  impl_->window_loss.zero_();
  return v;
}

void Trainer::find_micro_batch() {
  // Try the rank batch, then smaller divisors, on a real batch of the real model (forward and
  // backward, no communication); every rank takes the smallest that fits anywhere.
  impl_->watchdog->beat("finding the micro-batch");
  const int64_t rb = cfg_.resolved.rank_batch;
  std::vector<int64_t> sample(static_cast<size_t>(std::min<int64_t>(rb, train_->size())));
  for (size_t i = 0; i < sample.size(); ++i) sample[i] = static_cast<int64_t>(i);
  Batch b = train_->get(sample);
  b.inputs = b.inputs.to(device_);
  b.targets = b.targets.to(device_);
  const detail::MemoryStats before = detail::memory_stats(device_);
  constexpr double kHeadroom = 0.10;  // leave 10% of the device for fragmentation and spikes
  int64_t micro = rb, peak = 0;
  for (;;) {
    bool fits = true;
    detail::reset_peak_memory(device_);
    try {
      at::Tensor in = b.inputs.narrow(0, 0, std::min<int64_t>(micro, b.size()));
      at::Tensor tg = b.targets.narrow(0, 0, std::min<int64_t>(micro, b.size()));
      {
        AutocastGuard autocast(device_, cfg_.train.precision);
        at::Tensor loss = loss_fn(model_->forward(in), tg, false);
        loss.backward();  // no prepare(true): the reducer does not communicate
      }
      peak = detail::memory_stats(device_).peak;
      if (before.total > 0 && peak > static_cast<int64_t>((1.0 - kHeadroom) * before.total)) fits = false;
    } catch (const std::exception& e) {
      if (!detail::is_out_of_memory(e)) throw;
      fits = false;
    }
    for (auto& p : params_) p.mutable_grad() = at::Tensor();
    detail::empty_cache(device_);
    if (fits || micro == 1) break;
    int64_t next = micro / 2;
    while (rb % next != 0) --next;
    micro = next;
  }
  at::Tensor smallest = at::tensor({micro}, at::kLong);
  control_.all_reduce(smallest, ReduceOp::kMin);
  micro = smallest.item<int64_t>();
  cfg_.set_micro_batch(micro);
  log::info("micro_batch auto: " + std::to_string(micro) + " samples per forward/backward (" +
            std::to_string(cfg_.resolved.accum_steps) + " accumulation steps), peak " +
            (before.total > 0 ? fmt("%.2f GiB", peak / 1073741824.0) + " of " +
                                    fmt("%.1f GiB", before.total / 1073741824.0)
                              : std::string("memory not measured on CPU")));
}

TrainSummary Trainer::fit() {
  const auto& t = cfg_.train;
  const int world = comm_.world(), rank = comm_.rank();
  const int64_t rank_batch = cfg_.resolved.rank_batch;
  if (cfg_.resolved.micro_batch < 0) find_micro_batch();
  const int64_t micro = cfg_.resolved.micro_batch;
  DistributedSampler sampler(train_->size(), world, rank, cfg_.data.shuffle,
                             static_cast<uint64_t>(cfg_.run.seed), /*drop_last=*/false);
  const int64_t per_epoch_full = sampler.num_samples() / rank_batch;
  const bool partial = !t.drop_last && sampler.num_samples() % rank_batch != 0;
  const int64_t steps_per_epoch = per_epoch_full + (partial ? 1 : 0);
  if (steps_per_epoch == 0)
    throw Error("the training set (" + std::to_string(train_->size()) +
                    " samples) is smaller than one global batch (" +
                    std::to_string(t.global_batch) + ")",
                "train.global_batch");
  total_steps_ = steps_per_epoch * t.epochs;
  if (t.max_steps > 0) total_steps_ = std::min(total_steps_, t.max_steps);

  log::detail("training: " + std::to_string(world) + " rank(s), global batch " +
              std::to_string(t.global_batch) + " = " + std::to_string(world) + " x " +
              std::to_string(cfg_.resolved.accum_steps) + " micro-batches of " +
              std::to_string(micro) + "; " + std::to_string(steps_per_epoch) +
              " steps/epoch, " + std::to_string(total_steps_) + " steps in all");

  TrainSummary summary;
  double window_loss = 0;
  int64_t window_steps = 0;
  auto window_start = Clock::now();
  double train_seconds = 0;
  bool done = false;
  // One plan for the whole run (each step: this rank's share, cut into micro-batches by the
  // step), so one loader keeps prefetching across epoch boundaries and evaluations.
  std::vector<std::vector<int64_t>> plan;
  for (int64_t epoch = 0; epoch < t.epochs && static_cast<int64_t>(plan.size()) < total_steps_; ++epoch) {
    sampler.set_epoch(epoch);
    const std::vector<int64_t> mine = sampler.indices();
    for (int64_t s = 0; s < steps_per_epoch && static_cast<int64_t>(plan.size()) < total_steps_; ++s) {
      const int64_t begin = s * rank_batch;
      const int64_t end = std::min<int64_t>(begin + rank_batch, mine.size());
      plan.emplace_back(mine.begin() + begin, mine.begin() + end);
    }
  }
  Loader loader(train_, std::move(plan), loader_options());
  for (int64_t epoch = 0; epoch < t.epochs && !done; ++epoch) {
    model_->train();
    const auto epoch_start = Clock::now();
    for (int64_t s = 0; s < steps_per_epoch; ++s) {
      if (t.max_steps > 0 && step_ >= t.max_steps) {
        done = true;
        break;
      }
      impl_->watchdog->beat("waiting for data");
      auto t0 = Clock::now();
      std::optional<Batch> batch = loader.next();
      phases_.data += since(t0);
      if (!batch) throw Error("the loader ran out of batches (internal error)");
      train_step(*batch);
      ++window_steps;
      summary.samples += batch->size() * world;
      const bool log_now = cfg_.run.log_every > 0 && step_ % cfg_.run.log_every == 0;
      if (log_now) {
        window_loss = take_window_loss();
        at::Tensor l = at::tensor({window_loss, static_cast<double>(window_steps)}, at::kDouble);
        control_.all_reduce(l, ReduceOp::kSum);
        const double mean = l[0].item<double>() / l[1].item<double>();
        const double secs = since(window_start);
        const double sps = static_cast<double>(window_steps * t.global_batch) / secs;
        summary.last_loss = mean;
        log::detail("epoch " + std::to_string(epoch + 1) + "/" + std::to_string(t.epochs) +
                    " step " + std::to_string(step_) + "/" + std::to_string(total_steps_) +
                    "  loss " + fmt("%.4f", mean) + "  lr " + fmt("%.3g", lr_at(step_ - 1)) +
                    "  " + fmt("%.0f", sps) + " samples/s");
        write_metrics({{"type", "train"}, {"step", step_}, {"epoch", epoch + 1}, {"loss", mean},
                       {"lr", lr_at(step_ - 1)}, {"samples_per_s", sps},
                       {"micro_batch", cfg_.resolved.micro_batch},
                       {"data_s", phases_.data}, {"compute_s", phases_.compute},
                       {"comm_s", phases_.comm}, {"optimizer_s", phases_.optimizer}});
        window_loss = 0;
        window_steps = 0;
        window_start = Clock::now();
      }
    }
    train_seconds += since(epoch_start);
    if (window_steps > 0) {
      window_loss = take_window_loss();
      at::Tensor l = at::tensor({window_loss, static_cast<double>(window_steps)}, at::kDouble);
      control_.all_reduce(l, ReduceOp::kSum);
      summary.last_loss = l[0].item<double>() / l[1].item<double>();
      window_loss = 0;
      window_steps = 0;
      window_start = Clock::now();
    }
    if (t.eval && test_) {
      const auto t0 = Clock::now();
      summary.eval = evaluate();
      phases_.eval += since(t0);
      std::string line = "epoch " + std::to_string(epoch + 1) + "/" + std::to_string(t.epochs) +
                         "  train loss " + fmt("%.4f", summary.last_loss) + "  test loss " +
                         fmt("%.4f", summary.eval.loss);
      if (test_->spec().num_classes > 0)
        line += "  test accuracy " + fmt("%.2f%%", 100.0 * summary.eval.accuracy);
      line += "  (" + fmt("%.1f", since(epoch_start)) + " s)";
      log::detail(line);
      write_metrics({{"type", "eval"}, {"step", step_}, {"epoch", epoch + 1},
                     {"test_loss", summary.eval.loss}, {"test_accuracy", summary.eval.accuracy},
                     {"test_count", summary.eval.count}});
    }
    window_start = Clock::now();
  }
  summary.steps = step_;
  summary.seconds = train_seconds;
  summary.phases = phases_;
  summary.oom_retries = impl_->oom_retries;
  summary.skipped_steps = impl_->skipped_steps;
  summary.micro_batch = cfg_.resolved.micro_batch;
  impl_->watchdog->beat("done");
  return summary;
}

EvalResult Trainer::evaluate() {
  impl_->watchdog->beat("evaluation");
  EvalResult r;
  if (!test_) return r;
  const int world = comm_.world(), rank = comm_.rank();
  std::vector<int64_t> mine = eval_shard(test_->size(), world, rank);
  const int64_t bs = std::max<int64_t>(1, cfg_.resolved.micro_batch);
  std::vector<std::vector<int64_t>> plan;
  for (size_t b = 0; b < mine.size(); b += static_cast<size_t>(bs))
    plan.emplace_back(mine.begin() + b, mine.begin() + std::min(mine.size(), b + bs));
  Loader loader(test_, std::move(plan), loader_options());
  model_->eval();
  at::NoGradGuard no_grad;
  at::Tensor loss_sum = at::zeros({}, at::TensorOptions().device(device_).dtype(at::kDouble));
  at::Tensor correct = at::zeros({}, at::TensorOptions().device(device_).dtype(at::kLong));
  const bool classify = test_->spec().num_classes > 0;
  while (auto batch = loader.next()) {
    impl_->watchdog->beat("evaluation");
    at::Tensor out = model_->forward(batch->inputs);
    loss_sum += loss_fn(out, batch->targets, /*sum=*/true).to(at::kDouble);
    if (classify) correct += out.argmax(1).eq(batch->targets).sum();
  }
  model_->train();
  // Sum (loss, correct, count) over ranks; every sample was evaluated by exactly one rank.
  at::Tensor totals = at::stack({loss_sum.cpu(), correct.cpu().to(at::kDouble),
                                 at::scalar_tensor(static_cast<double>(mine.size()), at::kDouble)});
  control_.all_reduce(totals, ReduceOp::kSum);
  r.count = static_cast<int64_t>(totals[2].item<double>());
  // mse's sum reduction adds every target element; report the mean per element like training.
  double denom = static_cast<double>(r.count);
  if (cfg_.train.loss == "mse" && test_->spec().target_dim > 0) denom *= test_->spec().target_dim;
  r.loss = r.count > 0 ? totals[0].item<double>() / denom : 0.0;
  r.accuracy = r.count > 0 ? totals[1].item<double>() / static_cast<double>(r.count) : 0.0;
  return r;
}

LoaderOptions Trainer::loader_options() const {
  LoaderOptions lo;
  lo.workers = cfg_.data.workers;
  lo.prefetch = cfg_.data.prefetch;
  lo.pin_memory = cfg_.data.pin_memory;
  lo.device = device_;
  return lo;
}

const Reducer* Trainer::reducer() const { return impl_->reducer.get(); }

void Trainer::write_metrics(const nlohmann::json& record) {
  if (impl_->metrics.is_open()) {
    impl_->metrics << record.dump() << "\n";
    impl_->metrics.flush();
  }
}

}  // namespace dtrain
