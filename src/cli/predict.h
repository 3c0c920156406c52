// `dtrain predict CONFIG [section.key=value ...] [--checkpoint DIR | --weights FILE] --input PATH
// --output FILE [--top-k K] [--force]`: a trained model's predictions for new inputs, from the
// run's model.pt (run.dir/run.name/model.pt), a checkpoint's model.pt or a weights file, with the
// run's preprocessing as its preprocess.json records it (the file must be there; the training
// data is not read). The model is built from the config's model.* keys and preprocess.json's
// data spec.
//   image_folder: --input an image file or a folder of them (sorted by path), each as the run's
//     evaluation images (resize, center crop, pixel mean and std); cifar10/100 and idx: PNG or
//     JPEG pictures likewise, made the run's channels (idx: gray) and resized whole to its size
//     (data/formats/inputs.h, picture_inputs), or for idx an IDX file of images; csv: a CSV file
//     with the run's feature columns (others, the label too, are not read), standardized with the
//     run's statistics. Output: one record per input in input order, the top-k classes with their
//     probabilities (and names: preprocess.json's class_names) or the regression values
//     (cli/predict_output.h); the inputs are cut into batches of --batch-size, batch k computed
//     by rank k % world, gathered on rank 0, so the file is the same on any number of ranks.
//   text, tokens (a language model): --prompt TEXT or --input FILE (text: its bytes; tokens: token
//     ids written as decimal numbers), --max-new-tokens N, greedy, or sampled with --temperature
//     (and --top-k) from --seed (run.seed by default). Rank 0 generates alone; the output is the
//     prompt followed by the new tokens (text: their bytes; tokens: the ids, one line).
// Nothing is trained (train.* is not read: any number of ranks); nothing is written but
// --output, by rank 0, atomically; an existing --output is an error unless --force. Errors (a
// missing file, an image that does not decode, a CSV without the run's columns, a format predict
// does not read) are agreed: printed once, exit 1.
#pragma once

#include <map>
#include <string>

namespace dtrain::cli {
// `argv[0]` is "predict"; `launcher_env` as for cli::main.
int predict_main(int argc, char** argv, const std::map<std::string, std::string>& launcher_env);
}  // namespace dtrain::cli
