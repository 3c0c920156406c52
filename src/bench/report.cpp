#include "bench/report.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "dtrain/error.h"
#include "util/format.h"
#include "util/fs.h"

namespace dtrain::bench {
namespace {

using detail::format;

std::string setting_name(const Row& r) {
  std::string s = "micro-batch " + std::to_string(r.micro_batch) + ", data.workers " +
                  std::to_string(r.workers);
  if (r.checkpointing != ActivationCheckpointing::kOff)
    s += ", train.activation_checkpointing=blocks";
  if (r.shard_optimizer != ShardOptimizer::kOff)
    s += std::string(", dist.shard_optimizer=") + to_string(r.shard_optimizer);
  if (r.decode != DecodeMode::kCpu) s += std::string(", data.decode=") + to_string(r.decode);
  for (const auto& [key, value] : r.keys) s += ", " + key + "=" + value;
  return s;
}

// Row r's value of the swept key `key` ("" when it has none).
std::string value_of(const Row& r, const std::string& key) {
  for (const auto& [k, v] : r.keys)
    if (k == key) return v;
  return "";
}

// A swept value in the JSON: a number or a boolean as such (the dump writes them as JSON
// would), anything else as its text.
nlohmann::json json_value(const std::string& v) {
  nlohmann::json j = nlohmann::json::parse(v, nullptr, /*allow_exceptions=*/false);
  if (j.is_number() || j.is_boolean()) return j;
  return v;
}

// true or false as before ZeRO-2 was a choice, "gradients" for it.
nlohmann::json shard_json(ShardOptimizer s) {
  if (s == ShardOptimizer::kGradients) return "gradients";
  return s == ShardOptimizer::kState;
}

const char* checkpointing_name(const Row& r) {
  return r.checkpointing == ActivationCheckpointing::kOff ? "off" : "blocks";
}

std::string rate(double samples_per_s) { return format("%.1f samples/s", samples_per_s); }

bool leaves_headroom(const Row& r, double headroom) {
  return r.memory_total <= 0 || static_cast<double>(r.peak_memory) <=
                                    (1.0 - headroom) * static_cast<double>(r.memory_total);
}

const char* rule_id(GlobalBatch rule) {
  switch (rule) {
    case GlobalBatch::kMicroTimesWorld:
      return "micro_batch_x_world";
    case GlobalBatch::kFixed:
      return "fixed";
    case GlobalBatch::kConfig:
      return "config";
    case GlobalBatch::kSwept:
      return "swept";
  }
  return "?";
}

std::string global_batch_line(const SweepResult& res) {
  const std::string w = std::to_string(res.world);
  switch (res.rule) {
    case GlobalBatch::kMicroTimesWorld:
      return "global batch = micro-batch x " + w +
             " rank(s): one micro-batch per rank, no accumulation (train.global_batch=N on the "
             "command line keeps it fixed instead)";
    case GlobalBatch::kFixed:
      return "global batch fixed by train.global_batch on the command line: accumulation = "
             "global batch / (" +
             w + " rank(s) x micro-batch)";
    case GlobalBatch::kConfig:
      return "global batch and micro-batch: the config's";
    case GlobalBatch::kSwept:
      return "global batch: as swept (train.global_batch); accumulation = global batch / (" + w +
             " rank(s) x micro-batch)";
  }
  return "";
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

std::string num(double v) { return format("%.9g", v); }

}  // namespace

std::string global_batch_change(const SweepResult& res, const Recommendation& rec) {
  if (rec.row < 0 || res.config_global_batch <= 0) return "";
  const Row& r = res.rows[static_cast<size_t>(rec.row)];
  const int64_t from = res.config_global_batch, to = r.global_batch;
  if (to <= 0 || to == from) return "";
  const std::string old_batch = std::to_string(from);
  std::string lr;
  if (res.config_lr > 0)
    lr = format(" (the linear scaling rule: train.lr %g -> %g)", res.config_lr,
                res.config_lr * static_cast<double>(to) / static_cast<double>(from));
  return "the recommended setting changes train.global_batch " + old_batch + " -> " +
         std::to_string(to) + " (micro-batch " + std::to_string(r.micro_batch) + " x " +
         std::to_string(r.accum_steps) + " accumulation step(s) x " + std::to_string(res.world) +
         " rank(s)): that changes the training recipe, not only its speed; scale train.lr with "
         "it" +
         lr + " and compare the loss curves, or keep the config's batch: train.global_batch=" +
         old_batch + " on the bench's command line times each micro-batch at it";
}

Recommendation recommend(const std::vector<Row>& rows, double headroom, double tolerance) {
  Recommendation rec;
  for (int i = 0; i < static_cast<int>(rows.size()); ++i) {
    const Row& r = rows[static_cast<size_t>(i)];
    if (!r.fits || r.samples_per_s <= 0) continue;
    if (!leaves_headroom(r, headroom)) {
      rec.crowded.push_back(i);
      continue;
    }
    if (rec.fastest < 0 || r.samples_per_s > rows[static_cast<size_t>(rec.fastest)].samples_per_s)
      rec.fastest = i;
  }
  std::string crowded;
  for (int i : rec.crowded) {
    const Row& r = rows[static_cast<size_t>(i)];
    crowded += "\n" + setting_name(r) + " fits but leaves less than " +
               format("%.0f%%", headroom * 100) + " of the GPU's memory free (peak " +
               detail::gib(r.peak_memory) + " of " + detail::gib(r.memory_total) +
               "): not recommended";
  }
  if (rec.fastest < 0) {
    rec.text = "no recommendation: no setting fits" +
               std::string(rec.crowded.empty()
                               ? ""
                               : format(" with %.0f%% of the GPU's memory free", headroom * 100)) +
               crowded;
    return rec;
  }
  const Row& fastest = rows[static_cast<size_t>(rec.fastest)];
  rec.row = rec.fastest;
  for (int i = 0; i < static_cast<int>(rows.size()); ++i) {
    const Row& r = rows[static_cast<size_t>(i)];
    if (!r.fits || r.samples_per_s < (1.0 - tolerance) * fastest.samples_per_s ||
        !leaves_headroom(r, headroom))
      continue;
    const Row& best = rows[static_cast<size_t>(rec.row)];
    if (r.micro_batch < best.micro_batch ||
        (r.micro_batch == best.micro_batch && r.workers < best.workers))
      rec.row = i;
  }
  const Row& chosen = rows[static_cast<size_t>(rec.row)];
  if (rec.row == rec.fastest)
    rec.text = "recommended: " + setting_name(chosen) + ", the fastest (" +
               rate(chosen.samples_per_s) + ")";
  else
    rec.text = "recommended: " + setting_name(chosen) + " (" + rate(chosen.samples_per_s) +
               "): within " + format("%.0f%%", tolerance * 100) + " of the fastest, " +
               setting_name(fastest) + " (" + rate(fastest.samples_per_s) + "), with " +
               (chosen.micro_batch < fastest.micro_batch ? "a smaller micro-batch"
                                                         : "fewer loader workers") +
               ": diminishing returns";
  if (chosen.memory_total > 0)
    rec.text +=
        format("; it leaves %.0f%% of the GPU's memory free",
               100.0 * (1.0 - static_cast<double>(chosen.peak_memory) / chosen.memory_total));
  rec.text += crowded;
  return rec;
}

std::string table_text(const SweepResult& res, const Recommendation& rec) {
  const bool tokens = res.tokens_per_sample > 0;
  bool gpu = false, mfu = false;
  for (const Row& r : res.rows) {
    gpu = gpu || r.memory_total > 0 || r.gpu_utilization.has_value();
    mfu = mfu || r.mfu.has_value();
  }
  std::vector<std::string> head = {"micro", "workers", "global", "accum"};
  if (res.ladder) head.push_back("ckpt"), head.push_back("sharded");
  if (res.decoders) head.push_back("decode");
  for (const std::string& key : res.keys) head.push_back(key);
  head.push_back("samples/s");
  if (tokens) head.push_back("tokens/s");
  for (const char* h : {"step ms", "p50 ms", "p90 ms", "data wait"}) head.push_back(h);
  if (gpu) head.push_back("peak GPU mem"), head.push_back("GPU util");
  if (mfu) head.push_back("MFU");
  head.push_back("");
  std::vector<std::vector<std::string>> cells = {head};
  for (size_t i = 0; i < res.rows.size(); ++i) {
    const Row& r = res.rows[i];
    std::vector<std::string> c = {std::to_string(r.micro_batch), std::to_string(r.workers),
                                  std::to_string(r.global_batch), std::to_string(r.accum_steps)};
    if (res.ladder)
      c.push_back(checkpointing_name(r)),
          c.push_back(r.shard_optimizer == ShardOptimizer::kOff     ? "no"
                      : r.shard_optimizer == ShardOptimizer::kState ? "yes"
                                                                    : "gradients");
    if (res.decoders) c.push_back(to_string(r.decode));
    for (const std::string& key : res.keys) c.push_back(value_of(r, key));
    std::string note = r.note;
    if (static_cast<int>(i) == rec.row)
      note = "<- recommended";
    else if (std::find(rec.crowded.begin(), rec.crowded.end(), static_cast<int>(i)) !=
             rec.crowded.end())
      note = format("less than %.0f%% memory free", kHeadroom * 100);
    if (r.fits) {
      c.push_back(format("%.1f", r.samples_per_s));
      if (tokens) c.push_back(format("%.0f", r.tokens_per_s));
      c.push_back(format("%.2f", r.step_mean_s * 1e3));
      c.push_back(format("%.2f", r.step_p50_s * 1e3));
      c.push_back(format("%.2f", r.step_p90_s * 1e3));
      c.push_back(format("%.1f%%", r.data_wait_share * 100));
      if (gpu) {
        c.push_back(r.memory_total > 0
                        ? detail::gib(r.peak_memory) + " / " + detail::gib(r.memory_total)
                        : "-");
        c.push_back(r.gpu_utilization ? format("%.0f%%", *r.gpu_utilization) : "-");
      }
      if (mfu) c.push_back(r.mfu ? format("%.1f%%", *r.mfu * 100) : "-");
    } else {
      const size_t blanks = head.size() - 1 - c.size();
      for (size_t k = 0; k < blanks; ++k) c.push_back("-");
    }
    c.push_back(note);
    cells.push_back(std::move(c));
  }
  std::vector<size_t> width(head.size(), 0);
  for (const auto& row : cells)
    for (size_t k = 0; k < row.size(); ++k) width[k] = std::max(width[k], row[k].size());
  std::string out =
      "dtrain bench: " + res.config + " on " + std::to_string(res.world) + " rank(s), " +
      res.device + "; " + std::to_string(res.warmup_steps) + " warm-up and " +
      std::to_string(res.steps) + " timed steps per setting\n" + global_batch_line(res) + "\n" +
      "samples/s" + (tokens ? std::string(" and tokens/s") : "") +
      " over all ranks in the timed steps (warm-up not counted); step times, data wait" +
      (gpu ? " and GPU memory" : "") + ": the slowest rank's\n" +
      (gpu ? "GPU util: NVML's mean over the timed steps, - where they were too short for 3 "
             "samples (more --steps, or a smaller run.gpu_sample_s)\n"
           : "");
  for (const auto& row : cells) {
    std::string line;
    for (size_t k = 0; k < row.size(); ++k) {
      const bool last = k + 1 == row.size();
      line += last ? row[k] : std::string(width[k] - row[k].size(), ' ') + row[k] + "  ";
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  const std::string change = global_batch_change(res, rec);
  return out + rec.text + "\n" + (change.empty() ? "" : change + "\n");
}

std::string csv_text(const SweepResult& res, const Recommendation& rec) {
  std::string out =
      "micro_batch,workers,global_batch,accum_steps,fits,samples_per_s,tokens_per_s,step_mean_s,"
      "step_p50_s,step_p90_s,data_wait_share,peak_memory_bytes,memory_total_bytes,"
      "gpu_utilization,mfu,recommended,note,activation_checkpointing,shard_optimizer,decode";
  for (const std::string& key : res.keys) out += "," + csv_field(key);
  out += "\n";
  for (size_t i = 0; i < res.rows.size(); ++i) {
    const Row& r = res.rows[i];
    std::string line = std::to_string(r.micro_batch) + "," + std::to_string(r.workers) + "," +
                       std::to_string(r.global_batch) + "," + std::to_string(r.accum_steps) + "," +
                       (r.fits ? "true" : "false") + ",";
    if (r.fits) {
      line +=
          num(r.samples_per_s) + "," + (res.tokens_per_sample > 0 ? num(r.tokens_per_s) : "") +
          "," + num(r.step_mean_s) + "," + num(r.step_p50_s) + "," + num(r.step_p90_s) + "," +
          num(r.data_wait_share) + "," +
          (r.memory_total > 0 ? std::to_string(r.peak_memory) + "," + std::to_string(r.memory_total)
                              : ",") +
          "," + (r.gpu_utilization ? num(*r.gpu_utilization) : "") + "," +
          (r.mfu ? num(*r.mfu) : "") + ",";
    } else {
      line += ",,,,,,,,,,";
    }
    line += std::string(static_cast<int>(i) == rec.row ? "true" : "false") + "," +
            csv_field(r.note) + "," + checkpointing_name(r) + "," + to_string(r.shard_optimizer) +
            "," + to_string(r.decode);
    for (const std::string& key : res.keys) line += "," + csv_field(value_of(r, key));
    out += line + "\n";
  }
  return out;
}

std::string json_text(const SweepResult& res, const Recommendation& rec,
                      const std::string& forecast) {
  using nlohmann::json;
  json rows = json::array();
  for (const Row& r : res.rows) {
    json j = {{"micro_batch", r.micro_batch},
              {"workers", r.workers},
              {"global_batch", r.global_batch},
              {"accum_steps", r.accum_steps},
              {"fits", r.fits},
              {"note", r.note},
              {"activation_checkpointing", checkpointing_name(r)},
              {"shard_optimizer", shard_json(r.shard_optimizer)},
              {"decode", to_string(r.decode)}};
    for (const auto& [key, value] : r.keys) j[key] = json_value(value);
    for (const char* k :
         {"timed_steps", "timed_samples", "timed_seconds", "samples_per_s", "tokens_per_s",
          "step_mean_s", "step_p50_s", "step_p90_s", "data_wait_share", "peak_memory_bytes",
          "memory_total_bytes", "gpu_utilization", "mfu"})
      j[k] = nullptr;
    if (r.fits) {
      j["timed_steps"] = r.timed_steps;
      j["timed_samples"] = r.timed_samples;
      j["timed_seconds"] = r.timed_seconds;
      j["samples_per_s"] = r.samples_per_s;
      if (res.tokens_per_sample > 0) j["tokens_per_s"] = r.tokens_per_s;
      j["step_mean_s"] = r.step_mean_s;
      j["step_p50_s"] = r.step_p50_s;
      j["step_p90_s"] = r.step_p90_s;
      j["data_wait_share"] = r.data_wait_share;
      if (r.memory_total > 0)
        j["peak_memory_bytes"] = r.peak_memory, j["memory_total_bytes"] = r.memory_total;
      if (r.gpu_utilization) j["gpu_utilization"] = *r.gpu_utilization;
      if (r.mfu) j["mfu"] = *r.mfu;
    }
    rows.push_back(std::move(j));
  }
  json out = {{"config", res.config},
              {"world", res.world},
              {"device", res.device},
              {"warmup_steps", res.warmup_steps},
              {"steps", res.steps},
              {"global_batch_rule", rule_id(res.rule)},
              {"tokens_per_sample", res.tokens_per_sample},
              {"headroom", kHeadroom},
              {"tolerance", kTolerance},
              {"rows", rows},
              {"config_global_batch", res.config_global_batch},
              {"recommendation", rec.text},
              {"global_batch_change", global_batch_change(res, rec)}};
  out["recommended"] = nullptr;
  if (rec.row >= 0) {
    const Row& r = res.rows[static_cast<size_t>(rec.row)];
    out["recommended"] = {{"row", rec.row},
                          {"micro_batch", r.micro_batch},
                          {"global_batch", r.global_batch},
                          {"workers", r.workers},
                          {"activation_checkpointing", checkpointing_name(r)},
                          {"shard_optimizer", shard_json(r.shard_optimizer)},
                          {"decode", to_string(r.decode)}};
    for (const auto& [key, value] : r.keys) out["recommended"][key] = json_value(value);
  }
  if (!forecast.empty()) out["forecast"] = json::parse(forecast);
  return out.dump(2) + "\n";
}

std::vector<std::string> output_paths(const std::string& prefix) {
  return {prefix + ".csv", prefix + ".json"};
}

void check_outputs(const std::string& prefix, bool force) {
  if (prefix.empty() || prefix.back() == '/')
    throw Error("needs a file name prefix (PREFIX.csv, PREFIX.json), got '" + prefix + "'",
                "--out");
  const size_t slash = prefix.rfind('/');
  const std::string folder = slash == std::string::npos ? "."
                             : slash == 0               ? "/"
                                                        : prefix.substr(0, slash);
  if (!detail::path_exists(folder))
    throw Error("the folder " + folder + " does not exist", "--out");
  if (force) return;
  for (const std::string& path : output_paths(prefix))
    if (detail::path_exists(path))
      throw Error(
          "exists; dtrain bench does not write over it (--force does, --out PREFIX writes "
          "elsewhere)",
          path);
}

void write_outputs(const std::string& prefix, bool force, const SweepResult& result,
                   const Recommendation& rec, const std::string& forecast) {
  check_outputs(prefix, force);
  const std::vector<std::string> paths = output_paths(prefix);
  detail::write_file_atomic(paths[0], csv_text(result, rec));
  detail::write_file_atomic(paths[1], json_text(result, rec, forecast));
}

}  // namespace dtrain::bench
