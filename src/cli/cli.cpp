#include "dtrain/cli.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <mpi.h>
#include <torch/version.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <iostream>
#include <memory>

#include "dtrain/config.h"
#include "dtrain/data/dataset.h"
#include "dtrain/detail/device_memory.h"
#include "dtrain/error.h"
#include "dtrain/models.h"
#include "dtrain/reducer.h"
#include "dtrain/runtime.h"
#include "dtrain/telemetry/log.h"
#include "dtrain/trainer.h"
#include "dtrain/version.h"

namespace dtrain::cli {
namespace {

std::string version_text() {
  return std::string("dtrain ") + DTRAIN_VERSION + " (LibTorch " +
         std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) +
         ", " + (DTRAIN_WITH_CUDA ? "CUDA + NCCL" : "CPU only, MPI") + ", built " +
         DTRAIN_BUILD_DATE + ")";
}

std::string help_footer() {
  std::string s =
      "\nRun it under a launcher, one rank per GPU (or CPU slot):\n"
      "  mpirun -np 4 dtrain configs/fashion_mnist.yaml\n"
      "  srun --ntasks-per-node=8 dtrain configs/x.yaml train.lr=3e-4\n"
      "  dtrain configs/fashion_mnist.yaml            (alone: world size 1)\n"
      "\nModels:\n";
  for (const auto& [name, desc] : registered_models()) s += "  " + name + ": " + desc + "\n";
  s += "\nConfig keys (YAML sections, or section.key=value on the command line):";
  s += Config::schema_help();
  return s;
}

std::string fmt_ms(double seconds) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f", seconds * 1e3);
  return b;
}

// The first line of a LibTorch error (the rest is a C++ backtrace).
std::string torch_message(const c10::Error& e) {
  std::string m = e.what_without_backtrace();
  auto nl = m.find('\n');
  return nl == std::string::npos ? m : m.substr(0, nl);
}

int world_size() {
  int init = 0, fin = 0, world = 1;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (init && !fin) MPI_Comm_size(MPI_COMM_WORLD, &world);
  return world;
}

int my_rank() {
  int init = 0, fin = 0, rank = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (init && !fin) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

// Print one line for this rank and end the job: MPI_Abort when other ranks may wait for us.
[[noreturn]] void fail(const std::string& cause, int code) {
  std::fprintf(stderr, "[rank %d] error: %s\n", my_rank(), cause.c_str());
  std::fflush(stderr);
  std::fflush(stdout);
  if (world_size() > 1) MPI_Abort(MPI_COMM_WORLD, code);
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (init && !fin) MPI_Finalize();
  std::_Exit(code);
}

int run(Runtime& rt, const std::string& config_path, const std::vector<std::string>& overrides,
        bool print_config) {
  Config cfg = Config::from_file(config_path, overrides);
  cfg.resolve(rt.world());
  log::configure(rt.rank(), cfg.run.quiet);
  rt.setup(cfg.run, cfg.dist);

  log::detail(version_text());
  log::detail("world " + std::to_string(rt.world()) + " rank(s); rank 0 on " + rt.host() +
              ", device " + rt.device().str() + ", gradients over " + rt.comm().backend() +
              ", " + std::to_string(at::get_num_threads()) + " CPU thread(s) per rank");
  log::detail("config (" + config_path + "):\n" + cfg.dump());
  if (print_config) return 0;

  at::manual_seed(static_cast<uint64_t>(cfg.run.seed));
  Splits data = make_datasets(cfg.data, cfg.run.seed);
  log::detail("data: " + data.train->describe() +
              (data.test ? "; test: " + data.test->describe() : ""));
  auto model = make_model(cfg.model.name, cfg.model, data.train->spec());
  int64_t n_params = 0;
  for (const auto& p : model->parameters()) n_params += p.numel();
  log::detail("model: " + cfg.model.name + ", " + std::to_string(n_params) + " parameters");

  Trainer trainer(cfg, rt.comm(), rt.cpu_comm(), rt.device(), model, data.train, data.test);
  TrainSummary s = trainer.fit();

  char buf[512];
  std::snprintf(buf, sizeof buf,
                "done: %lld steps, %lld samples in %.1f s (%.0f samples/s); rank 0 time: data "
                "%.1f%%, compute %.1f%%, communication %.1f%%, optimizer %.1f%%",
                static_cast<long long>(s.steps), static_cast<long long>(s.samples), s.seconds,
                s.seconds > 0 ? s.samples / s.seconds : 0.0,
                100 * s.phases.data / std::max(1e-9, s.phases.total()),
                100 * s.phases.compute / std::max(1e-9, s.phases.total()),
                100 * s.phases.comm / std::max(1e-9, s.phases.total()),
                100 * s.phases.optimizer / std::max(1e-9, s.phases.total()));
  log::info(buf);
  if (rt.on_cuda()) {
    const auto mem = detail::memory_stats(rt.device());
    std::snprintf(buf, sizeof buf, "peak GPU memory %.2f GiB (allocated by tensors) on rank 0",
                  mem.peak / 1073741824.0);
    log::info(buf);
  }
  if (const Reducer* red = trainer.reducer()) {
    // The last step's buckets: when each was ready and handed to the communicator, against the
    // end of backward (host clock, ms since the step's last backward began).
    std::string tl = "gradient buckets of the last step (ms from the last backward's start; " +
                     std::string("backward ended at ") + fmt_ms(red->last_backward_end()) + "):";
    for (const auto& b : red->last_timeline())
      tl += "\n  bucket " + std::to_string(b.bucket) + ": " +
            std::to_string(b.bytes / 1024) + " KiB, ready " + fmt_ms(b.ready) + ", launched " +
            fmt_ms(b.launched) + (b.launched < red->last_backward_end() ? "  (during backward)" : "");
    log::detail(tl);
  }
  if (s.oom_retries > 0)
    log::info("out-of-memory recoveries: " + std::to_string(s.oom_retries) + "; micro-batch now " +
              std::to_string(s.micro_batch));
  if (s.skipped_steps > 0)
    log::info("fp16 steps skipped for non-finite gradients: " + std::to_string(s.skipped_steps));
  if (s.eval.count > 0) {
    if (data.test->spec().num_classes > 0)
      std::snprintf(buf, sizeof buf, "final test accuracy: %.2f%% (loss %.4f, %lld samples)",
                    100.0 * s.eval.accuracy, s.eval.loss, static_cast<long long>(s.eval.count));
    else
      std::snprintf(buf, sizeof buf, "final test loss: %.6f (%lld samples)", s.eval.loss,
                    static_cast<long long>(s.eval.count));
    log::info(buf);
  }
  if (!trainer.run_dir().empty()) log::detail("run directory: " + trainer.run_dir());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dtrain: data-parallel training on many GPUs (or CPU ranks)", "dtrain"};
  std::string config_path;
  std::vector<std::string> overrides;
  bool print_config = false;
  app.add_option("config", config_path, "YAML config file")->required();
  app.add_option("overrides", overrides, "section.key=value settings that replace the file's");
  app.add_flag("--print-config", print_config, "print the resolved config and exit");
  app.set_version_flag("--version", version_text());
  app.footer([] { return help_footer(); });
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  // The runtime outlives the error handling below: a failing rank must still be able to abort
  // the whole job (MPI_Abort) rather than finalize MPI and leave its peers waiting.
  std::unique_ptr<Runtime> rt;
  try {
    rt = std::make_unique<Runtime>(&argc, &argv);
    return run(*rt, config_path, overrides, print_config);
  } catch (const Error& e) {
    fail(e.what(), 1);
  } catch (const c10::Error& e) {
    fail(torch_message(e), 1);
  } catch (const std::exception& e) {
    fail(e.what(), 1);
  }
}

}  // namespace dtrain::cli
