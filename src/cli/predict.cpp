#include "cli/predict.h"
#include "cli/cli.h"
#include "cli/model_files.h"
#include "cli/predict_output.h"

#include <CLI/CLI.hpp>
#include <cctype>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/weights.h"
#include "data/formats/inputs.h"
#include "data/formats/registry.h"
#include "data/pixels.h"
#include "data/preprocess.h"
#include "dtrain/config.h"
#include "dtrain/error.h"
#include "dtrain/log.h"
#include "dtrain/models.h"
#include "dtrain/session.h"
#include "session/error_policy.h"
#include "train/generate.h"
#include "train/predictor.h"
#include "util/dir.h"
#include "util/fs.h"

namespace dtrain::cli {
namespace {

const char* kPredictFooter = R"(
The model is built from the config's model.* keys and the run's preprocess.json (beside the
weights, else in the run directory), which also gives the inputs' preprocessing; the training
data is not read. Classifiers and regression models (image_folder, cifar10/100: PNG or JPEG
files or a folder of them, sorted by path; idx: an IDX image file, or PNG or JPEG files as for
cifar, made gray; cifar and idx pictures are resized whole to the run's size; csv: a CSV file
with the run's feature columns) write one record per input in input order: JSON lines {"input",
"top": [{"index", "class", "prob"}]} ("class": the run's class names, preprocess.json's
class_names) or {"input", "values"}, or CSV rows when --output ends in .csv. The inputs are
cut into batches of --batch-size, batch k on rank k % world: the file is the same, byte for
byte, on any number of ranks that run the same number of intra-op threads (run.threads; by
default each rank's CPUs: give it to compare launches); across thread counts the last digits of
a value may differ (LibTorch's CPU kernels split their sums by thread). Language models (text, tokens) continue --prompt or --input's prompt by
--max-new-tokens on rank 0, greedy unless --temperature > 0 (then drawn from --seed, among the
--top-k most likely tokens when given), and write the prompt with its continuation. Only --output
is written; an existing one only with --force.
  dtrain predict configs/x.yaml --input photos/ --output predictions.jsonl --top-k 3
  mpirun -np 2 dtrain predict configs/x.yaml --input rows.csv --output scores.csv
  dtrain predict configs/gpt.yaml --prompt "ROMEO:" --max-new-tokens 200 --output sample.txt)";

struct Options {
  std::string config_path, weights, checkpoint, input, prompt, output;
  std::vector<std::string> overrides;
  int64_t top_k = -1;  // -1: not given (5 classes shown; every token a candidate)
  int64_t batch = 64, max_new = 100;
  double temperature = 0;
  int64_t seed = -1;  // -1: run.seed
  bool force = false, prompt_given = false;
};

// Text and token data: the format reads prompts (formats/registry.h).
bool is_language_data(DataFormat f) {
  return static_cast<bool>(detail::registered_format(f).prompt_tokens);
}

bool ends_with_csv(const std::string& path) {
  if (path.size() < 4) return false;
  std::string ext = path.substr(path.size() - 4);
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return ext == ".csv";
}

// What can be checked before the model is built: the output may be written, the input is given.
void check_files(const Options& o, DataFormat format) {
  if (detail::path_exists(o.output) && !o.force)
    throw Error("exists: predict does not overwrite it (--force does, or name another --output)",
                o.output);
  if (detail::is_dir(o.output)) throw Error("is a folder, not a file (--output)", o.output);
  const size_t slash = o.output.rfind('/');
  if (slash != std::string::npos && slash > 0 && !detail::is_dir(o.output.substr(0, slash)))
    throw Error("no such folder for the --output file: " + o.output.substr(0, slash), o.output);
  if (is_language_data(format)) {
    if (o.prompt_given && !o.input.empty())
      throw Error("give --prompt or --input, not both", "--prompt");
    if (!o.prompt_given && o.input.empty())
      throw Error("a language model (data.format " + std::string(to_string(format)) +
                      ") continues a prompt: give --prompt TEXT or --input FILE",
                  "--input");
    if (!o.prompt_given && !detail::path_exists(o.input))
      throw Error("no such file: " + o.input, "--input");
    return;
  }
  if (o.prompt_given)
    throw Error("is for language models (data.format text, tokens); give --input", "--prompt");
  if (o.input.empty()) throw Error("is required: the inputs to predict", "--input");
  if (!detail::path_exists(o.input)) throw Error("no such file or folder: " + o.input, "--input");
}

// The inputs of a classifier or regression model, preprocessed as the run's: its format's reader.
detail::PredictInputs read_inputs(const Options& o, const detail::RunRecipe& recipe,
                                  const Config& cfg) {
  const detail::FormatRegistration format = detail::registered_format(recipe.format);
  if (!format.predict_inputs)
    throw Error(
        std::string("is ") + to_string(recipe.format) +
            " in the run's preprocess.json: predict reads image files (image_folder, cifar10, "
            "cifar100, idx), IDX image files (idx), CSV rows (csv) and prompts (text, tokens)",
        "data.format");
  return format.predict_inputs(o.input, recipe.spec, cfg.data);
}

// The prompt as token ids (text: its bytes; tokens: decimal ids separated by white space).
std::vector<int64_t> prompt_tokens(const Options& o, DataFormat format, int64_t vocab) {
  const std::string where = o.prompt_given ? "--prompt" : o.input;
  const std::string text = o.prompt_given ? o.prompt : detail::read_file(o.input);
  const std::vector<int64_t> ids =
      detail::registered_format(format).prompt_tokens(text, vocab, where);
  if (ids.empty())
    throw Error("the prompt is empty: generation starts from at least one token", where);
  return ids;
}

std::string generated_text(DataFormat format, std::vector<int64_t> prompt,
                           const std::vector<int64_t>& more) {
  prompt.insert(prompt.end(), more.begin(), more.end());
  return detail::registered_format(format).token_text(prompt);
}

void add_options(CLI::App& app, Options& o) {
  app.add_option("config", o.config_path,
                 "YAML config file (the run's, or its config.yaml), or the run directory itself")
      ->required();
  app.add_option("overrides", o.overrides, "section.key=value settings that replace the file's");
  auto* w = app.add_option("--weights", o.weights,
                           "a weights file (model.pt, or a torch.save'd state_dict)");
  app.add_option("--checkpoint", o.checkpoint,
                 "a checkpoint folder: its model.pt; a run directory or its checkpoints folder: "
                 "its newest complete checkpoint")
      ->excludes(w);
  app.add_option("--input", o.input,
                 "image file or folder (image_folder, cifar, idx), IDX file (idx), CSV file (csv), "
                 "prompt file (text, tokens)");
  app.add_option("--prompt", o.prompt, "the prompt's text (text, tokens: decimal token ids)");
  app.add_option("--output", o.output,
                 "the file to write (.csv: CSV rows; else JSON lines, or the text)")
      ->required();
  app.add_option(
         "--top-k", o.top_k,
         "classifiers: classes per input (default 5; 0: all); language models: sample among "
         "the K most likely tokens")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--batch-size", o.batch, "inputs per forward pass (default 64)")
      ->check(CLI::PositiveNumber);
  app.add_option("--max-new-tokens", o.max_new, "language models: tokens to generate (default 100)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--temperature", o.temperature, "language models: 0 (default) greedy, > 0 sampled")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--seed", o.seed, "language models: the sampling seed (default run.seed)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--force", o.force, "overwrite an existing --output");
  app.footer(kPredictFooter);
}

}  // namespace

int predict_main(int argc, char** argv, const std::map<std::string, std::string>& launcher_env) {
  CLI::App app{
      "dtrain predict: a trained model's predictions for new inputs (no training; only "
      "--output is written)",
      "dtrain predict"};
  Options o;
  add_options(app, o);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return usage_exit(app.exit(e));
  }
  o.prompt_given = app.count("--prompt") > 0;
  EarlyConfig config(launcher_env, [&] {
    return Config::from_file(run_config(o.config_path, o.overrides), o.overrides);
  });
  if (config.failed()) return 1;
  return run_guarded(&argc, &argv, [&](Runtime& rt) {
    Config cfg;
    std::string path;
    detail::RunRecipe recipe;
    detail::run_agreed(rt.mpi_comm(), [&] {
      cfg = config.get();
      rt.check_launcher(launcher_env);
      path = weights_path(cfg, o.weights, o.checkpoint);
      const std::string pre = preprocess_path(cfg, path);
      if (pre.empty())
        throw Error(
            "no preprocess.json beside it or in the run directory: predict takes the inputs' "
            "preprocessing from the file the run wrote beside model.pt",
            path);
      recipe = detail::read_preprocess(detail::read_file(pre), pre);
      check_files(o, recipe.format);
      cfg.model.init_weights.clear();  // the weights are `path`, loaded below
    });
    // No training and no training data: the device and communicators are set up without
    // build_session's batch arithmetic (train.global_batch need not divide by this world size).
    log::configure(rt.rank(), cfg.run.quiet);
    rt.setup(cfg.run, cfg.dist);
    log::detail(version_text() + "; world " + std::to_string(rt.world()) + " rank(s), device " +
                rt.device().str());
    std::shared_ptr<Model> model;
    detail::PredictInputs inputs;
    const bool language = is_language_data(recipe.format);
    // Every rank builds the model and reads the weights and the inputs (a missing column, a
    // wrong file found by every rank is printed once).
    detail::run_agreed(rt.mpi_comm(), [&] {
      model = make_model(cfg.model.name, cfg.model, recipe.spec);
      detail::load_weights(*model, path);
      model->to(rt.device());
      if (!language) inputs = read_inputs(o, recipe, cfg);
    });
    log::info("predicting with " + path + (language ? "" : " for " + inputs.data->describe()));
    std::string text;
    if (language) {
      detail::run_agreed(rt.mpi_comm(), [&] {
        if (rt.rank() != 0) return;  // rank 0 generates alone
        const DataSpec& spec = recipe.spec;
        const std::vector<int64_t> prompt = prompt_tokens(o, recipe.format, spec.num_classes);
        detail::SamplingOptions sampling;
        sampling.temperature = o.temperature;
        sampling.top_k = o.top_k > 0 ? o.top_k : 0;
        sampling.seed = static_cast<uint64_t>(o.seed >= 0 ? o.seed : cfg.run.seed);
        const int64_t context = spec.input_shape.empty() ? 1 : spec.input_shape[0];
        text = generated_text(
            recipe.format, prompt,
            detail::generate(*model, rt.device(), prompt, o.max_new, context, sampling));
      });
    } else {
      at::Tensor outputs;
      const detail::PixelNormalizer pixels(recipe.spec, rt.device());
      detail::run_agreed(rt.mpi_comm(), [&] {
        outputs = detail::local_outputs(*model, *inputs.data, o.batch, pixels, rt.device(),
                                        rt.rank(), rt.world());
      });
      detail::gather_outputs(rt.cpu_comm(), outputs);
      if (rt.rank() == 0) {
        PredictTable table;
        table.names = &inputs.names;
        table.spec = &recipe.spec;
        table.top_k = o.top_k >= 0 ? o.top_k : 5;
        table.csv = ends_with_csv(o.output);
        text = predict_text(outputs, table);
      }
    }
    detail::run_agreed(rt.mpi_comm(), [&] {
      if (rt.rank() == 0) detail::write_file_atomic(o.output, text);
    });
    log::info("wrote " + o.output +
              (language ? "" : " (" + std::to_string(inputs.names.size()) + " inputs)"));
    check_stdout();
    return 0;
  });
}

}  // namespace dtrain::cli
