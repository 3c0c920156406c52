#include "dtrain/trainer.h"

#include <chrono>
#include <nlohmann/json.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>

#include "dtrain/amp.h"
#include "dtrain/data/loader.h"
#include "dtrain/detail/cuda_graph.h"
#include "dtrain/detail/device_memory.h"
#include "dtrain/detail/fused_loss.h"
#include "dtrain/detail/torch_compat.h"
#include "dtrain/detail/fs.h"
#include "dtrain/data/sampler.h"
#include "dtrain/error.h"
#include "dtrain/optim.h"
#include "dtrain/reducer.h"
#include "dtrain/runtime.h"
#include "dtrain/telemetry/log.h"
#include "dtrain/telemetry/profiler.h"

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

// Eager steps before the step is captured in a CUDA graph: lazy initialisation (cuDNN autotuning,
// cuBLAS workspaces, optimizer state, the allocator's pools) must happen outside the capture.
constexpr int64_t kGraphWarmupSteps = 3;

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

// Scales the gradients so that their global 2-norm is at most max_norm (PyTorch's
// clip_grad_norm_ rule), without reading the norm on the host: capturable in a CUDA graph.
void clip_gradients(const std::vector<at::Tensor>& params, double max_norm) {
  std::vector<at::Tensor> grads;
  for (const auto& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty()) return;
  const std::vector<at::Tensor> norms = at::_foreach_norm(grads, 2);
  const at::Tensor total = at::stack(norms).norm(2);
  const at::Tensor coef = at::clamp_max(at::full({}, max_norm, total.options()) / (total + 1e-6), 1.0);
  compat::foreach_mul_(grads, coef);
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
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<StepProfiler> profiler;
  std::unique_ptr<Watchdog> watchdog;
  // CUDA graph of the whole step: decided in fit(), captured after warm-up, then replayed for
  // every full batch. Inputs are copied into static_batch; the graph owns the gradients.
  bool graph_wanted = false;
  bool capturing = false;
  std::unique_ptr<detail::StepGraph> graph;
  Batch static_batch;
  at::Tensor static_loss_sum;
  int64_t graph_step = -1, replays = 0;
  std::string step_mode = "eager";
  std::string profile_text;
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
  OptimizerOptions oo;
  oo.kind = t.optimizer;
  oo.momentum = t.momentum;
  oo.weight_decay = t.weight_decay;
  oo.beta1 = t.beta1;
  oo.beta2 = t.beta2;
  oo.eps = t.eps;
  oo.fused = t.fused_optimizer;
  impl_->optimizer = std::make_unique<Optimizer>(params_, oo);
  log::detail("optimizer: " + impl_->optimizer->describe());

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
    const at::Tensor logits = out.dim() == 3 ? out.reshape({-1, out.size(2)}) : out;
    const at::Tensor labels = out.dim() == 3 ? targets.reshape({-1}) : targets;
    // Large vocabularies on CUDA: log-sum-exp per row without an fp32 copy of the logits.
    if (detail::fused_cross_entropy_applies(logits, labels))
      return detail::fused_cross_entropy(logits, labels, /*mean=*/!sum);
    return at::cross_entropy_loss(logits.to(at::kFloat), labels, {}, reduction);
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
    if (!detail::is_out_of_memory(e) || impl_->capturing) throw;
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
  auto& g = *impl_;
  if (g.graph_wanted && batch.size() == cfg_.resolved.rank_batch) {
    if (!g.graph && step_ >= kGraphWarmupSteps) capture_step(batch);
    if (g.graph) {
      replay_step(batch);
      return;
    }
  }
  auto& wd = *g.watchdog;
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
    ++g.oom_retries;
    loss_sum.zero_();
  }
  phases_.compute += since(t0) - (phases_.comm - comm_before);

  wd.beat("optimizer step");
  t0 = Clock::now();
  apply_update(loss_sum, lr_at(step_));
  phases_.optimizer += since(t0);
  ++step_;
}

void Trainer::apply_update(const at::Tensor& loss_sum, double lr) {
  auto& g = *impl_;
  bool skip = false;
  if (g.scaler) {
    g.scaler->unscale(params_);  // once, after the all-reduce, before clipping
    skip = g.scaler->found_inf();
  }
  if (!skip) {
    if (cfg_.train.clip_grad_norm > 0) clip_gradients(params_, cfg_.train.clip_grad_norm);
    g.optimizer->step(lr);
  } else {
    ++g.skipped_steps;
    log::info("step " + std::to_string(step_) + ": non-finite gradients with loss scale " +
              fmt("%g", g.scaler->current_scale()) + "; optimizer step skipped on every rank");
  }
  if (g.scaler) g.scaler->update();
  // Kept on the device: reading it here would stall the host on every step.
  if (!g.window_loss.defined()) g.window_loss = at::zeros_like(loss_sum);
  g.window_loss += loss_sum;
}

std::string Trainer::graph_blocker() const {
  if (!device_.is_cuda()) return "this rank computes on the CPU";
  if (!detail::cuda_graphs_available())
    return "this build of dtrain cannot capture CUDA graphs (needs CUDA and LibTorch 2.x)";
  if (impl_->reducer)
    return "gradients are averaged over ranks by the gradient engine, which runs outside graphs";
  if (impl_->scaler) return "fp16 loss scaling decides on the host whether to skip a step";
  if (!impl_->optimizer->capturable())
    return "the optimizer is not a fused CUDA kernel (see train.fused_optimizer; parameters "
           "must be fp32)";
  if (impl_->inject_oom_step >= 0) return "the out-of-memory test hook is set";
  return "";
}

bool Trainer::capture_step(const Batch& batch) {
  auto& g = *impl_;
  g.watchdog->beat("capturing the step in a CUDA graph");
  const double lr = lr_at(step_);
  g.optimizer->set_lr(lr);  // refreshed outside the graph before every replay
  g.static_batch.inputs = batch.inputs.clone();
  g.static_batch.targets = batch.targets.clone();
  g.static_loss_sum = at::zeros({}, at::TensorOptions().device(device_).dtype(at::kDouble));
  if (!g.window_loss.defined()) g.window_loss = at::zeros_like(g.static_loss_sum);
  // The captured backward allocates the gradients from the graph's memory pool; the eager
  // steps' cached blocks go back to the device for that pool.
  for (auto& p : params_) p.mutable_grad() = at::Tensor();
  detail::empty_cache(device_);
  auto graph = std::make_unique<detail::StepGraph>(device_);
  const int64_t micro = cfg_.resolved.micro_batch;
  try {
    g.capturing = true;
    graph->capture([&] {
      g.static_loss_sum.zero_();
      forward_backward(g.static_batch, micro, g.static_loss_sum);
      apply_update(g.static_loss_sum, lr);
    });
    g.capturing = false;
  } catch (const std::exception& e) {
    g.capturing = false;
    for (auto& p : params_) p.mutable_grad() = at::Tensor();
    if (cfg_.train.cuda_graph == "on")
      throw Error("capturing the training step in a CUDA graph failed: " + first_line(e.what()),
                  "train.cuda_graph");
    log::warn("the training step could not be captured in a CUDA graph (" + first_line(e.what()) +
              "); training continues eagerly");
    g.graph_wanted = false;
    g.step_mode = "eager (CUDA graph capture failed: " + first_line(e.what()) + ")";
    return false;
  }
  g.graph = std::move(graph);
  g.graph_step = step_;
  log::detail("training step captured in a CUDA graph at step " + std::to_string(step_) +
              "; every full batch from now on is one graph launch");
  return true;
}

void Trainer::replay_step(const Batch& batch) {
  auto& g = *impl_;
  g.watchdog->beat("CUDA graph step");
  const auto t0 = Clock::now();
  g.static_batch.inputs.copy_(batch.inputs, /*non_blocking=*/true);
  g.static_batch.targets.copy_(batch.targets, /*non_blocking=*/true);
  g.optimizer->set_lr(lr_at(step_));
  g.graph->replay();
  ++g.replays;
  ++step_;
  phases_.compute += since(t0);
}

// Ends the profiler's window when its last step is done (or at the end of training): waits for
// the GPU so the trace holds every recorded kernel, writes it, and summarizes it.
void Trainer::finish_profile(bool at_end) {
  auto& prof = *impl_->profiler;
  if (prof.done()) return;
  if (!at_end && !prof.end_step(step_ - 1)) return;
  detail::synchronize(device_);
  if (!prof.stop()) return;
  impl_->watchdog->beat("writing the profile");
  try {
    const ProfileSummary ps = summarize_trace(prof.path());
    impl_->profile_text = "trace " + prof.path() + "\n" + ps.table;
  } catch (const std::exception& e) {
    impl_->profile_text = "trace " + prof.path() + " (not summarized: " + first_line(e.what()) + ")";
  }
  if (comm_.rank() == 0) log::detail(impl_->profile_text);
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
  // The whole step as one CUDA graph where possible (one rank, fused optimizer, no loss scaling).
  const std::string blocker = graph_blocker();
  if (t.cuda_graph == "on" && !blocker.empty())
    throw Error("cannot capture the training step in a CUDA graph: " + blocker, "train.cuda_graph");
  impl_->graph_wanted = t.cuda_graph != "off" && blocker.empty();
  if (t.cuda_graph == "auto" && !blocker.empty() && device_.is_cuda())
    log::detail("training step not captured in a CUDA graph: " + blocker);
  // Graphs are captured on a non-default stream; the whole run then uses that stream.
  std::optional<detail::SideStreamGuard> side_stream;
  if (impl_->graph_wanted) side_stream.emplace(device_);
  if (cfg_.run.profile_steps > 0) {
    const std::string dir =
        cfg_.run.dir.empty() ? std::string(".") : detail::join_path(cfg_.run.dir, cfg_.run.name);
    detail::make_dirs(dir);
    impl_->profiler = std::make_unique<StepProfiler>(
        cfg_.run.profile_start, cfg_.run.profile_steps,
        dir + "/trace.rank" + std::to_string(rank) + ".json", device_.is_cuda());
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
      if (impl_->profiler) impl_->profiler->begin_step(step_);
      train_step(*batch);
      if (impl_->profiler) finish_profile(/*at_end=*/false);
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
  if (impl_->profiler) finish_profile(/*at_end=*/true);
  summary.profile = impl_->profile_text;
  if (impl_->graph)
    impl_->step_mode = "CUDA graph: captured at step " + std::to_string(impl_->graph_step) +
                       ", replayed " + std::to_string(impl_->replays) + " times";
  summary.step_mode = impl_->step_mode;
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
  double predictions = 0;  // class predictions scored: samples, or tokens of sequence models
  while (auto batch = loader.next()) {
    impl_->watchdog->beat("evaluation");
    at::Tensor out = model_->forward(batch->inputs);
    loss_sum += loss_fn(out, batch->targets, /*sum=*/true).to(at::kDouble);
    if (classify) {
      // (N, C) logits score N samples; (N, T, V) logits of a sequence model score N * T tokens.
      correct += out.argmax(-1).eq(batch->targets).sum();
      predictions += static_cast<double>(batch->targets.numel());
    }
  }
  model_->train();
  // Sum (loss, correct, count, predictions) over ranks; every sample was evaluated by exactly
  // one rank.
  at::Tensor totals = at::stack({loss_sum.cpu(), correct.cpu().to(at::kDouble),
                                 at::scalar_tensor(static_cast<double>(mine.size()), at::kDouble),
                                 at::scalar_tensor(predictions, at::kDouble)});
  control_.all_reduce(totals, ReduceOp::kSum);
  r.count = static_cast<int64_t>(totals[2].item<double>());
  const double scored = totals[3].item<double>();
  // Means like training's: per element for mse, per prediction (sample or token) for
  // cross-entropy.
  double denom = static_cast<double>(r.count);
  if (cfg_.train.loss == "mse" && test_->spec().target_dim > 0) denom *= test_->spec().target_dim;
  if (cfg_.train.loss == "cross_entropy" && scored > 0) denom = scored;
  r.loss = r.count > 0 ? totals[0].item<double>() / denom : 0.0;
  r.accuracy = scored > 0 ? totals[1].item<double>() / scored : 0.0;
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
