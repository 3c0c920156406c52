// The run's files on rank 0, when it has a run directory: config.yaml (the resolved config,
// written atomically; it loads again as a config) and metrics.jsonl, one JSON object per line,
// each with "type", "time" (Unix seconds) and "step":
//   train    at every loss read: epoch, loss, lr, samples_per_s, micro_batch, the cumulative
//            phase seconds (data_s, compute_s, comm_s, optimizer_s), elapsed_s, the window's
//            steps and phase seconds (window_data_s, ...), grad_norm, loss_scale (fp16 and
//            train.skip_nonfinite), tokens_per_s (sequence models), mfu and mfu_llmc (when the
//            model's FLOPs and the GPU's peak are known), mem_allocated / mem_reserved /
//            mem_peak (bytes, CUDA), gpu_util / gpu_mem_used / power_w / sm_clock_mhz /
//            mem_clock_mhz (NVML, when present);
//   eval     after every evaluation: epoch, test_loss, test_accuracy, test_top5_accuracy (more
//            than 5 classes), test_count, train_loss, epoch_s; with train.ema_decay, weights
//            ("ema" or "model": whose the test_* numbers are) and the other weights' as
//            other_test_loss, other_test_accuracy, other_test_top5_accuracy; with
//            data.val_fraction val_loss, val_accuracy, val_top5_accuracy, val_count;
//   resume   first in a resumed run: checkpoint, world; the records after it continue the file;
//   summary  last, at the end of every run: steps, samples (a resumed run's earlier ones
//            included), run_samples and seconds (this process's), samples_per_s, tokens_per_s
//            and mfu over them (start-up included), steady_samples_per_s, steady_tokens_per_s,
//            steady_mfu and steady_from_step (after the warm-up, when the run had one),
//            last_loss, the phase seconds, the last evaluation (test_* and eval_step, the step it
//            is of: the run's last only when eval_step equals steps), the GPU's mean utilization
//            and peak memory, weight_bytes and gradient_bytes (rank 0's trainable parameters and
//            their gradients), optimizer_state_bytes and optimizer_shards (rank 0's optimizer
//            state, its shard's with dist.shard_optimizer; the ranks sharing the state), stopped,
//            checkpoint.
// Beside it, metrics.csv holds the train and eval records' main numbers, one row each, for
// spreadsheets and pandas.read_csv (as Lightning's CSVLogger): the columns kCsvColumns, a cell
// empty where the record has no such number (a train row has no test_loss, an eval row no lr);
// a resumed run appends rows (the header only in a new file), after dropping the rows of steps
// past its checkpoint, which it trains again (rewind_csv): one row per step.
// A failed write, fsync or close is an Error naming the file and the OS reason; the files are
// closed (and their close checked) at the end of the run.
#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>

#include "dtrain/config.h"
#include "dtrain/error.h"
#include "hooks/figures.h"
#include "hooks/standard.h"
#include "util/clock.h"
#include "util/dir.h"
#include "util/format.h"
#include "util/fs.h"

namespace dtrain::detail {
namespace {

void put(nlohmann::json& j, const char* key, const std::optional<double>& v) {
  if (v) j[key] = *v;
}

void put_phases(nlohmann::json& j, const std::string& prefix, const PhaseTimes& p) {
  j[prefix + "data_s"] = p.data;
  j[prefix + "compute_s"] = p.compute;
  j[prefix + "comm_s"] = p.comm;
  j[prefix + "optimizer_s"] = p.optimizer;
}

void put_gpu(nlohmann::json& j, const GpuStats& g) {
  j["gpu_util"] = g.utilization;
  j["gpu_mem_used"] = g.memory_used;
  j["power_w"] = g.power_w;
  j["sm_clock_mhz"] = g.sm_clock_mhz;
  j["mem_clock_mhz"] = g.memory_clock_mhz;
}

constexpr const char* kCsvColumns =
    "type,step,epoch,time,train_loss,lr,samples_per_s,test_loss,test_accuracy,test_top5_accuracy,"
    "test_count";

// A CSV cell: the number as JSON writes it (the shortest text that reads back the same double);
// empty when absent.
std::string cell(const nlohmann::json& record, const char* key) {
  const auto it = record.find(key);
  return it == record.end() || it->is_null() ? std::string() : it->dump();
}

// The row of a train or eval record of metrics.jsonl (train's "loss" is the column train_loss).
std::string csv_row(const nlohmann::json& r) {
  const bool train = r.at("type") == "train";
  std::string row = r.at("type").get<std::string>();
  for (const char* key : {"step", "epoch", "time", train ? "loss" : "", "lr", "samples_per_s",
                          "test_loss", "test_accuracy", "test_top5_accuracy", "test_count"})
    row += "," + cell(r, key);
  return row + "\n";
}

// A resumed run's metrics.csv goes on from the checkpoint's step: the rows of later steps (the
// stopped run trained past its last checkpoint, and the resumed run trains them again) are
// dropped, so every step has one row. Rewritten atomically; the header and other lines stay.
void rewind_csv(const std::string& csv, int64_t step) {
  std::istringstream in(read_file(csv));
  std::string kept, line;
  int64_t dropped = 0;
  while (std::getline(in, line)) {
    const size_t a = line.find(','), b = a == std::string::npos ? a : line.find(',', a + 1);
    if (b != std::string::npos && line.compare(0, a, "type") != 0) {
      const std::string cell = line.substr(a + 1, b - a - 1);
      if (!cell.empty() && cell.find_first_not_of("0123456789") == std::string::npos &&
          std::stoll(cell) > step) {
        ++dropped;
        continue;
      }
    }
    kept += line + "\n";
  }
  if (dropped > 0) write_file_atomic(csv, kept);
}

class MetricsFile : public Hook {
 public:
  std::string name() const override { return "metrics"; }

  void on_start(const RunInfo& run, LoopControl&) override {
    if (run.rank != 0 || run.run_dir.empty()) return;
    run_ = run;
    make_dirs(run.run_dir);
    write_file_atomic(run.run_dir + "/config.yaml", run.config->dump());
    // A resumed run appends after a record saying so (the run directory rules:
    // train/run_directory.h); records past the checkpoint's step come again, the same values.
    out_ = std::make_unique<OutputFile>(run.run_dir + "/metrics.jsonl", !run.resumed_from.empty());
    const std::string csv = run.run_dir + "/metrics.csv";
    if (!run.resumed_from.empty() && path_exists(csv)) rewind_csv(csv, run.resumed_step);
    const bool header = run.resumed_from.empty() || !path_exists(csv) || read_file(csv).empty();
    csv_ = std::make_unique<OutputFile>(csv, !run.resumed_from.empty());
    if (header) csv_->write(std::string(kCsvColumns) + "\n");
    if (!run.resumed_from.empty())
      write({{"type", "resume"},
             {"time", unix_now()},
             {"step", run.resumed_step},
             {"checkpoint", run.resumed_from},
             {"world", run.world}});
  }

  void on_step(const StepRecord& r, LoopControl&) override {
    if (!out_ || !r.loss) return;
    nlohmann::json j = {{"type", "train"},
                        {"time", r.wall_time},
                        {"step", r.step},
                        {"epoch", r.epoch},
                        {"loss", *r.loss},
                        {"lr", r.lr},
                        {"samples_per_s", r.samples_per_s},
                        {"micro_batch", r.micro_batch}};
    put_phases(j, "", r.phases);
    j["elapsed_s"] = r.elapsed;
    j["window_steps"] = r.window_steps;
    put_phases(j, "window_", r.window_phases);
    put(j, "grad_norm", r.grad_norm);
    put(j, "loss_scale", r.loss_scale);
    put(j, "tokens_per_s", tokens_per_s(run_, r.samples_per_s));
    put(j, "mfu", mfu(run_, r.samples_per_s, run_.flops_per_sample));
    put(j, "mfu_llmc", mfu(run_, r.samples_per_s, run_.flops_per_sample_llmc));
    if (run_.device.is_cuda()) {
      j["mem_allocated"] = r.memory.allocated;
      j["mem_reserved"] = r.memory.reserved;
      j["mem_peak"] = r.memory.peak;
      if (r.memory.decode > 0 || r.memory.decode_pinned > 0) {  // data.decode gpu
        j["mem_decode"] = r.memory.decode;
        j["mem_decode_pinned"] = r.memory.decode_pinned;
      }
    }
    if (r.gpu) put_gpu(j, *r.gpu);
    write(j);
    csv_->write(csv_row(j));
  }

  void on_eval(const EvalRecord& r, LoopControl&) override {
    if (!out_) return;
    nlohmann::json j = {{"type", "eval"},
                        {"time", unix_now()},
                        {"step", r.step},
                        {"epoch", r.epoch},
                        {"test_loss", r.result.loss},
                        {"test_accuracy", r.result.accuracy},
                        {"test_count", r.result.count},
                        {"train_loss", r.train_loss},
                        {"epoch_s", r.epoch_seconds}};
    put(j, "test_top5_accuracy", r.result.top5);
    if (r.val) {  // data.val_fraction
      j["val_loss"] = r.val->loss;
      j["val_accuracy"] = r.val->accuracy;
      j["val_count"] = r.val->count;
      put(j, "val_top5_accuracy", r.val->top5);
    }
    if (r.other) {
      j["weights"] = r.weights;
      j["other_test_loss"] = r.other->loss;
      j["other_test_accuracy"] = r.other->accuracy;
      put(j, "other_test_top5_accuracy", r.other->top5);
    }
    write(j);
    csv_->write(csv_row(j));
  }

  void on_end(TrainSummary& s) override {
    if (!out_) return;
    // Rates over this process's own samples (a resumed run's summary counts the earlier ones
    // too): the overall one, start-up included, and the steady one after the warm-up.
    const double rate = s.seconds > 0 ? static_cast<double>(s.run_samples) / s.seconds : 0.0;
    nlohmann::json j = {{"type", "summary"},
                        {"time", s.wall_end > 0 ? s.wall_end : unix_now()},
                        {"step", s.steps},
                        {"steps", s.steps},
                        {"samples", s.samples},
                        {"seconds", s.seconds},
                        {"run_samples", s.run_samples},
                        {"samples_per_s", rate},
                        {"last_loss", s.last_loss},
                        {"micro_batch", s.micro_batch},
                        {"oom_retries", s.oom_retries},
                        {"skipped_steps", s.skipped_steps},
                        {"stopped", s.stopped},
                        {"checkpoint", s.checkpoint},
                        {"checkpoint_step", s.checkpoint_step}};
    put_phases(j, "", s.phases);
    j["eval_s"] = s.phases.eval;
    if (s.stop_signal != 0) j["stop_signal"] = s.stop_signal;
    if (s.eval.count > 0) {
      j["test_loss"] = s.eval.loss;
      j["test_accuracy"] = s.eval.accuracy;
      put(j, "test_top5_accuracy", s.eval.top5);
      j["test_count"] = s.eval.count;
      j["eval_step"] = s.eval_step;  // the step of the model it evaluated
    }
    put(j, "tokens_per_s", tokens_per_s(run_, rate));
    put(j, "mfu", mfu(run_, rate, run_.flops_per_sample));
    put(j, "mfu_llmc", mfu(run_, rate, run_.flops_per_sample_llmc));
    if (s.steady_from_step >= 0) {
      j["steady_samples_per_s"] = s.steady_samples_per_s;
      j["steady_from_step"] = s.steady_from_step;
      put(j, "steady_tokens_per_s", tokens_per_s(run_, s.steady_samples_per_s));
      put(j, "steady_mfu", mfu(run_, s.steady_samples_per_s, run_.flops_per_sample));
    }
    if (run_.device.is_cuda()) j["mem_peak"] = s.memory.peak;
    if (s.memory.decode > 0) j["mem_decode"] = s.memory.decode;
    if (s.memory.checkpoint_pinned > 0) j["mem_checkpoint_pinned"] = s.memory.checkpoint_pinned;
    j["optimizer_state_bytes"] = s.optimizer_state_bytes;  // rank 0's (its shard's when sharded)
    j["optimizer_shards"] = s.optimizer_shards;
    j["weight_bytes"] = s.weight_bytes;
    j["gradient_bytes"] = s.gradient_bytes;
    j["wire_bytes_per_step"] = {{"all_reduce", s.wire_all_reduce_bytes},
                                {"reduce_scatter", s.wire_reduce_scatter_bytes},
                                {"broadcast", s.wire_broadcast_bytes}};
    if (s.gpu) {
      j["gpu_util"] = s.gpu->utilization;
      j["power_w"] = s.gpu->power_w;
    }
    write(j);
    out_->close();
    csv_->close();
  }

 private:
  void write(const nlohmann::json& record) { out_->write(record.dump() + "\n"); }

  RunInfo run_;
  std::unique_ptr<OutputFile> out_, csv_;
};

}  // namespace

std::shared_ptr<Hook> make_metrics_file() { return std::make_shared<MetricsFile>(); }

}  // namespace dtrain::detail
