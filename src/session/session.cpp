#include "dtrain/session.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>

#include "checkpoint/weights.h"
#include "config/schema.h"
#include "cuda/device.h"
#include "cuda/versions.h"
#include "dtrain/error.h"
#include "dtrain/log.h"
#include "dtrain/version.h"
#include "models/activation_checkpoint.h"
#include "runtime/binding.h"
#include "runtime/signals.h"
#include "session/config_check.h"
#include "session/error_policy.h"
#include "session/rank_data.h"
#include "session/unused_keys.h"
#include "telemetry/nvml.h"
#include "train/resume.h"
#include "util/format.h"
#include "util/host_memory.h"
#include "util/live_line.h"
#include "util/torch_compat.h"
#include "util/versions.h"

namespace dtrain {
namespace {

// The config keys that set how much host memory the datasets (Sizes::kData) or the model
// (Sizes::kModel) take, as the schema classifies them: those this run reads.
std::string size_keys(const Config& c, config::Sizes sizes) {
  const std::optional<std::vector<std::string>> reads = model_keys(c.model.name);
  std::string keys;
  for (const config::Field& f : config::schema()) {
    if (f.sizes != sizes) continue;
    if (f.applies == config::Applies::kWhen && !f.unused_because(c).empty()) continue;
    if (f.applies == config::Applies::kModel &&
        (!reads || std::find(reads->begin(), reads->end(), f.key) == reads->end()))
      continue;
    keys += (keys.empty() ? "" : ", ") + f.key;
  }
  if (sizes == config::Sizes::kModel)
    keys = (keys.empty() ? "model.name " + c.model.name : keys) + " (and the data's sample size)";
  return keys;
}

}  // namespace

std::string version_text() {
  std::string stack = "CPU only, MPI";
  if (detail::built_with_cuda()) {
    // The runtime loaded (else the one compiled in), NCCL, and the driver when NVML is there.
    const detail::CudaVersions v = detail::cuda_versions();
    const std::string cuda = detail::cuda_version_text(v.runtime ? v.runtime : v.runtime_compiled);
    const std::string nccl = detail::nccl_version_text(v.nccl);
    const std::string driver = detail::Nvml::system().driver_version();
    stack = "CUDA" + (cuda.empty() ? "" : " " + cuda) + " + NCCL" +
            (nccl.empty() ? "" : " " + nccl) + (driver.empty() ? "" : ", driver " + driver);
  }
  return std::string("dtrain ") + DTRAIN_VERSION + " (LibTorch " + compat::libtorch_version() +
         ", " + stack + ", built " + DTRAIN_BUILD_DATE + ")";
}

namespace {

// The log's data line: the training split's description, and the test split's.
std::string data_line(const Splits& data) {
  return data.train->describe() +
         (data.test && data.test != data.train ? "; test: " + data.test->describe() : "") +
         (data.val ? "; " + data.val->describe() : "");
}

// Whether the config left every data.* key at its default (the README's Fashion-MNIST).
bool sets_no_data_key(const Config& cfg) {
  for (const config::Field& f : config::schema())
    if (f.key.rfind("data.", 0) == 0 && cfg.origin_of(f.key) != "default") return false;
  return true;
}

}  // namespace

Session build_session(Runtime& rt, Config cfg, const std::string& origin, bool config_only) {
  if (config_only) return build_session(rt, std::move(cfg), origin, nullptr);
  // A finished run is refused before its data is read (minutes on a large set).
  return build_session(rt, std::move(cfg), origin,
                       MakeData([&rt](const Config& c, const at::Device& device) {
                         detail::refuse_finished_run(c, rt.cpu_comm());
                         return make_datasets(c.data, c.run.seed, device);
                       }));
}

Session build_session(Runtime& rt, Config cfg, const std::string& origin,
                      const MakeData& make_data) {
  Session s;
  // The config check, agreed: every rank finds the same config error, printed once.
  detail::run_agreed(rt.mpi_comm(), [&] {
    cfg.resolve(rt.world());
    detail::check_config_now(cfg);
  });
  log::configure(rt.rank(), cfg.run.quiet);
  rt.setup(cfg.run, cfg.dist);
  log::detail(version_text());
  // Every rank's host, gathered (a collective: every rank takes part, rank 0 prints).
  const std::string hosts = detail::hosts_of_ranks(gather_strings(rt.cpu_comm(), rt.host()));
  log::detail("world " + std::to_string(rt.world()) + " rank(s) on " + hosts +
              "; rank 0's device " + rt.device().str() + ", gradients over " + rt.comm().backend() +
              ", " + std::to_string(at::get_num_threads()) + " CPU thread(s) per rank");
  log::detail(detail::config_line(cfg, origin));
  if (sets_no_data_key(cfg) && rt.rank() == 0)
    log::info(
        "the config sets no data.* key: training on dtrain's default data, Fashion-MNIST's IDX "
        "files "
        "in " +
        cfg.data.path + " (set data.format and data.path to train on your own)");
  if (rt.rank() == 0)
    for (const std::string& line : detail::unused_keys(cfg)) log::warn(line);
  s.config = std::move(cfg);
  if (!make_data) return s;

  const Config& c = s.config;
  // Data and model, agreed: a missing or empty file that every rank finds is one line.
  detail::run_agreed(rt.mpi_comm(), [&] {
    at::manual_seed(static_cast<uint64_t>(c.run.seed));
    detail::guard_host_memory(
        [&] {
          s.data = make_data(c, rt.device());
          if (!s.data.train) throw Error("the datasets have no training split");
        },
        "building the datasets", size_keys(c, config::Sizes::kData), "use smaller data");
    log::detail("data: " + data_line(s.data));
    detail::guard_host_memory(
        [&] { s.model = make_model(c.model.name, c.model, s.data.train->spec()); },
        "building the model " + c.model.name, size_keys(c, config::Sizes::kModel),
        "make the model smaller");
    detail::set_activation_checkpointing(*s.model, c.model.name, c.train.activation_checkpointing);
    int64_t n_params = 0;
    for (const auto& p : s.model->parameters()) n_params += p.numel();
    log::detail("model: " + c.model.name + ", " + std::to_string(n_params) + " parameters (" +
                detail::format("%.3g", static_cast<double>(n_params) * 4 / (1 << 20)) +
                " MiB in fp32)");
    if (!c.model.init_weights.empty() && rt.rank() == 0) {
      // Rank 0 only: the Trainer broadcasts rank 0's parameters and buffers to every rank.
      detail::load_weights(*s.model, c.model.init_weights);
      log::info("model.init_weights: loaded " + c.model.init_weights);
    }
  });
  // Every rank's data line against rank 0's, which alone is logged (session/rank_data.h).
  if (rt.world() > 1) {
    const std::vector<std::string> lines = gather_strings(rt.cpu_comm(), data_line(s.data));
    if (rt.rank() == 0)
      for (const std::string& w : detail::data_differences(lines)) log::warn(w);
  }
  s.trainer = std::make_unique<Trainer>(c, rt.comm(), rt.cpu_comm(), rt.device(), s.model,
                                        s.data.train, s.data.test);
  if (s.data.val) s.trainer->set_validation(s.data.val);
  return s;
}

int exit_code(const TrainSummary& summary) {
  if (summary.stop_signal == 0) return 0;
  const bool saved = !summary.checkpoint.empty() && summary.checkpoint_step == summary.steps;
  // The run has not ended: model.pt, when there is one, is an earlier end's (a finished run
  // trained on), whose step its model.json records.
  std::string model = ", no model.pt (the run has not ended)";
  if (!summary.model_file.empty())
    model = " (the run has not ended: these weights are in it alone); " + summary.model_file +
            (summary.model_step >= 0
                 ? " still holds step " + std::to_string(summary.model_step) +
                       ", the run's earlier end (model.json)"
                 : " still holds an earlier end of the run (no model.json names its step)");
  log::info(std::string("stopped by ") + detail::signal_name(summary.stop_signal) + " after step " +
            std::to_string(summary.steps) + " of " + std::to_string(summary.total_steps) +
            (saved ? ": checkpoint " + summary.checkpoint + " written" + model +
                         "; run the same command again to resume (exit code " +
                         std::to_string(kExitPreempted) + ")"
                   : ": no checkpoint was written (the run writes no files)"));
  return saved ? kExitPreempted : 128 + summary.stop_signal;
}

int run_guarded(int* argc, char*** argv, const std::function<int(Runtime&)>& body) {
  // The runtime outlives the error handling below: a failing rank must still be able to abort
  // the whole job (MPI_Abort) rather than finalize MPI and leave its peers waiting.
  std::unique_ptr<Runtime> rt;
  try {
    rt = std::make_unique<Runtime>(argc, argv);
    const int code = body(*rt);
    detail::ignore_stop_signals();  // the code stands while MPI finalizes
    return code;
  } catch (const AgreedError& e) {
    // Every rank is here, none in a collective: one line, then MPI_Finalize everywhere.
    detail::report_agreed(e);
    rt.reset();
    return 1;
  } catch (const Error& e) {
    detail::fail(e.what(), 1, rt.get());
  } catch (const c10::Error& e) {
    detail::fail(detail::first_line(e.what_without_backtrace()), 1, rt.get());
  } catch (const std::exception& e) {
    detail::fail(detail::first_line(e.what()), 1, rt.get());
  }
}

}  // namespace dtrain
