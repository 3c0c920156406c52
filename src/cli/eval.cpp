#include "cli/eval.h"
#include "cli/cli.h"
#include "cli/model_files.h"

#include <ATen/Parallel.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "checkpoint/weights.h"
#include "data/preprocess.h"
#include "data/splits.h"
#include "dtrain/config.h"
#include "dtrain/error.h"
#include "dtrain/log.h"
#include "dtrain/session.h"
#include "hooks/figures.h"
#include "hooks/model_record.h"
#include "session/error_policy.h"
#include "util/dir.h"
#include "util/fs.h"

namespace dtrain::cli {
namespace {

const char* kEvalFooter = R"(
The model is built from the config (model.*, the data's shape; model.init_weights is not read)
and every rank loads the weights file. Each sample of the config's test split is evaluated by
one rank and the sums are added over ranks, in batches of train.micro_batch per rank (auto: the
per-rank batch): on the training's number of ranks and micro-batch, the numbers of its final
evaluation, bit for bit. When preprocess.json lies beside the weights (else in the run
directory), the config's data must give the same preprocessing (statistics within 1e-6), or
eval stops naming the key that differs. Nothing is written.
  dtrain eval configs/fashion_mnist.yaml
  dtrain eval runs/fashion_mnist            # a run directory: its own config.yaml and model.pt
  mpirun -np 2 dtrain eval configs/x.yaml --checkpoint runs/x/checkpoints/step-000000120 --json)";

}  // namespace

int eval_main(int argc, char** argv, const std::map<std::string, std::string>& launcher_env) {
  CLI::App app{
      "dtrain eval: evaluate a trained model on the config's test split (no training, "
      "no files written)",
      "dtrain eval"};
  std::string config_path, weights, checkpoint;
  std::vector<std::string> overrides;
  bool json = false;
  app.add_option("config", config_path,
                 "YAML config file (the run's, or its config.yaml), or the run directory itself")
      ->required();
  app.add_option("overrides", overrides, "section.key=value settings that replace the file's");
  auto* w = app.add_option("--weights", weights,
                           "a weights file (model.pt, or a torch.save'd state_dict)");
  app.add_option("--checkpoint", checkpoint,
                 "a checkpoint folder: its model.pt; a run directory or its checkpoints folder: "
                 "its newest complete checkpoint")
      ->excludes(w);
  app.add_flag("--json", json, "print the result as one JSON object (metrics.jsonl's eval names)");
  app.footer(kEvalFooter);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return usage_exit(app.exit(e));
  }
  if (json) log::keep_stdout_for_results(true);  // standard output: the JSON object alone
  EarlyConfig config(launcher_env, [&] {
    return Config::from_file(run_config(config_path, overrides), overrides);
  });
  if (config.failed()) return 1;
  return run_guarded(&argc, &argv, [&](Runtime& rt) {
    Config cfg;
    std::string path, pre;
    detail::run_agreed(rt.mpi_comm(), [&] {
      cfg = config.get();
      rt.check_launcher(launcher_env);
      path = weights_path(cfg, weights, checkpoint);
      pre = preprocess_path(cfg, path);
      cfg.model.init_weights.clear();  // the weights evaluated are `path`, loaded below
      // auto is measured by training; evaluation batches are then the per-rank batch.
      if (cfg.train.micro_batch < 0) cfg.train.micro_batch = 0;
    });
    // With preprocess.json, the test split alone, preprocessed with the run's statistics: the
    // training files are not read (data/splits.h, make_recorded_test_split).
    std::string pre_text;
    MakeData make_data = [](const Config& c, const at::Device& device) {
      Splits splits = make_datasets(c.data, c.run.seed, device);
      if (!splits.test)
        throw Error("the data has no test split to evaluate (" + splits.train->describe() + ")",
                    "data.format");
      return splits;
    };
    if (!pre.empty()) {
      detail::run_agreed(rt.mpi_comm(), [&] { pre_text = detail::read_file(pre); });
      make_data = [&](const Config& c, const at::Device& device) {
        const detail::RunRecipe recipe = detail::read_preprocess(pre_text, pre);
        auto test = detail::make_recorded_test_split(c.data, recipe.spec, c.run.seed, device);
        if (!test) throw Error("the config names no test split to evaluate", "data.format");
        Splits splits;
        splits.train = splits.test = test;
        return splits;
      };
    }
    // Evaluation alone: the session's start-up lines about training (the gradients' transport,
    // the training's batch arithmetic, the optimizer) are not printed; eval says its own below.
    // No optimizer state is used, so none is sharded.
    const bool quiet = cfg.run.quiet;
    cfg.run.quiet = true;
    cfg.dist.shard_optimizer = ShardOptimizer::kOff;
    Session s = build_session(rt, std::move(cfg), config_path, make_data);
    log::configure(rt.rank(), quiet);
    log::detail(version_text() + "; world " + std::to_string(rt.world()) + " rank(s), device " +
                rt.device().str() + ", " + std::to_string(at::get_num_threads()) +
                " CPU thread(s) per rank");
    log::detail("data: " + s.data.test->describe());
    int64_t parameters = 0;
    for (const auto& p : s.model->parameters()) parameters += p.numel();
    log::detail("model: " + s.config.model.name + ", " + std::to_string(parameters) +
                " parameters");
    detail::run_agreed(rt.mpi_comm(), [&] {
      if (pre.empty()) {  // a run of an earlier dtrain, or a weights file from elsewhere
        log::info("no preprocess.json beside " + path +
                  ": the config's preprocessing is used unchecked");
        return;
      }
      const std::string diff =
          detail::preprocess_difference(pre_text, pre, s.data.test->spec(), s.config.data);
      if (!diff.empty()) throw Error(diff);
      log::detail("the config's preprocessing is the model's (" + pre + ")");
    });
    // Every rank reads the file (the Trainer has already broadcast the initial parameters).
    detail::run_agreed(rt.mpi_comm(), [&] { detail::load_weights(*s.model, path); });
    const int64_t batch = std::max<int64_t>(1, s.config.resolved.micro_batch);
    log::info("evaluating " + path + ": " + std::to_string(s.data.test->size()) +
              " test samples in batches of " + std::to_string(batch) + " per rank on " +
              std::to_string(rt.world()) + " rank(s)");
    const EvalResult r = s.trainer->evaluate();
    if (rt.rank() == 0) {
      const bool classify = s.data.test->spec().num_classes > 0;
      if (json) {
        nlohmann::ordered_json j{{"weights", path}, {"world", rt.world()}};
        detail::put_evaluation(j, r, classify);  // the keys model.json and best.json write
        std::printf("%s\n", j.dump().c_str());
      } else {
        std::printf("%s on %d rank(s): %s\n", path.c_str(), rt.world(),
                    detail::eval_text(r, classify).c_str());
      }
      check_stdout();
    }
    return 0;
  });
}

}  // namespace dtrain::cli
