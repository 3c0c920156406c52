// A checkpoint's training state, in two kinds of file, and their encoding. `state.pt` (written by
// rank 0) holds what every rank shares: the model's parameters and buffers, the optimizer and
// loss-scaler state, where the loop stood (and whether the run ended there by an early stop),
// the hooks' states (Hook::state), the resolved config key by key, and the versions.
// `rank-<R>.pt` holds what differs by rank: its random-number generator states and, with
// dist.shard_optimizer, its shard of the optimizer state (state.pt then holds none). Both are
// pickled dicts (written by torch::pickle_save), so Python's torch.load opens them too; dtrain
// reads them with its own bounded reader (checkpoint/pickle_reader.h), never LibTorch's unpickler.
// Beside them a checkpoint holds model.pt (the weights for Python, checkpoint/weights.h),
// preprocess.json (data/preprocess.h) and the COMPLETE marker (checkpoint/folder.h).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "dtrain/records.h"
#include "util/fs.h"

namespace dtrain {
class Config;
}

namespace dtrain::detail {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

struct SharedState {
  LoopPosition position;  // dtrain/records.h
  int world = 0;
  int64_t global_batch = 0;
  std::map<std::string, std::string> config;  // key -> value, as --print-config writes them
  std::string config_hash;                    // hex of Config::hash()
  std::string dtrain_version, libtorch_version;
  NamedTensors model;  // named_parameters() then named_buffers(), CPU copies
  // Optimizer::state(): the whole state; empty where each rank's file holds its shard's entries
  // (dist.shard_optimizer: optimizer_shards > 0, the world that wrote them)
  NamedTensors optimizer;
  int optimizer_shards = 0;
  NamedTensors scaler;  // GradScaler::state(), empty without one
  // train.ema_decay: the weight average under the model's names and its count of updates; empty
  // without one (and in checkpoints written before it was kept).
  NamedTensors ema;
  int64_t ema_updates = 0;
  // The hooks' states by hook name (TrainState::hook_states); empty in checkpoints written
  // before they were kept.
  std::map<std::string, std::string> hooks;
};

struct RankState {
  int rank = 0;
  int world = 0;
  int64_t step = 0;
  at::Tensor cpu_rng;   // the default CPU generator's state
  at::Tensor cuda_rng;  // the default CUDA generator's state of this rank's GPU (undefined: CPU)
  // dist.shard_optimizer: this rank's shard's Optimizer::state(), its pieces' entries
  // ("exp_avg.<n>" by piece number, dist/optimizer_shard.h); empty otherwise
  NamedTensors optimizer_shard;
};

// "rank-00003.pt": the file of rank 3's state in a checkpoint.
std::string rank_file_name(int rank);

// Every key of `cfg` with its value as text (the schema's order, in a map).
std::map<std::string, std::string> config_values(const Config& cfg);

// A state's file: torch::pickle_save's archive of the dict, its bytes made piece by piece into
// `out` (the tensors' data straight from their memory: a state of gigabytes is never copied
// whole), or as one string.
void encode_to(const SharedState& s, const ByteSink& out);
void encode_to(const RankState& s, const ByteSink& out);
std::string encode(const SharedState& s);
std::string encode(const RankState& s);
// Decoding checks the format and every field; an Error names `file` and what is wrong. Bounded
// in time and memory whatever the bytes.
SharedState decode_shared(const std::string& bytes, const std::string& file);
RankState decode_rank(const std::string& bytes, const std::string& file);

}  // namespace dtrain::detail
