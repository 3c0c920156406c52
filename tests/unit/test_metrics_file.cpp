// metrics.jsonl's records (src/hooks/metrics_file.cpp): every record has "type", "time" and
// "step"; train records carry the window's figures, tokens/s and MFU from their formulas, GPU
// memory and NVML figures only when there are some; every run ends with a summary record whose
// rate counts only this run's samples.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "dtrain/config.h"
#include "dtrain/hooks.h"
#include "dtrain/records.h"
#include "hooks/standard.h"
#include "test_support.h"

namespace {

using dtrain::test::read_text;
using dtrain::test::TempDir;
using nlohmann::json;

std::vector<json> records(const std::string& path) {
  std::vector<json> out;
  std::istringstream in(read_text(path));
  for (std::string line; std::getline(in, line);) out.push_back(json::parse(line));
  return out;
}

struct Fixture : dtrain::test::HookRun {
  std::shared_ptr<dtrain::Hook> hook = dtrain::detail::make_metrics_file();
  std::string file() const { return info.run_dir + "/metrics.jsonl"; }
};

dtrain::StepRecord train_record(int64_t step) {
  dtrain::StepRecord r;
  r.step = step, r.epoch = 1, r.lr = 0.5, r.micro_batch = 8, r.samples = 64 * step;
  r.loss = 1.25;
  r.samples_per_s = 1000;
  r.wall_time = 1700000123.5;
  r.elapsed = 42.0;
  r.window_steps = 10;
  r.phases.data = 1, r.phases.compute = 20, r.phases.comm = 3, r.phases.optimizer = 4;
  r.window_phases.data = 0.1, r.window_phases.compute = 2, r.window_phases.comm = 0.3;
  r.window_phases.optimizer = 0.4;
  r.grad_norm = 0.75;
  return r;
}

TEST(MetricsFile, TrainRecordsCarryTheWindowRatesAndMfu) {
  Fixture run;
  run.info.world = 4;
  run.info.tokens_per_sample = 128;
  run.info.flops_per_sample = 2e9;
  run.info.flops_per_sample_llmc = 1.5e9;
  run.info.peak_flops = 5e13;
  run.hook->on_start(run.info, run.control);
  dtrain::StepRecord quiet = train_record(9);
  quiet.loss.reset();
  run.hook->on_step(quiet, run.control);  // no loss read: no record
  run.hook->on_step(train_record(10), run.control);
  const auto r = records(run.file());
  ASSERT_EQ(r.size(), 1u);
  const json& j = r[0];
  EXPECT_EQ(j["type"], "train");
  EXPECT_EQ(j["time"].get<double>(), 1700000123.5);
  EXPECT_EQ(j["step"], 10);
  EXPECT_EQ(j["loss"].get<double>(), 1.25);  // the keys other readers use stay
  EXPECT_EQ(j["samples_per_s"].get<double>(), 1000);
  EXPECT_EQ(j["compute_s"].get<double>(), 20);
  EXPECT_EQ(j["micro_batch"], 8);
  EXPECT_EQ(j["elapsed_s"].get<double>(), 42);
  EXPECT_EQ(j["window_steps"], 10);
  EXPECT_EQ(j["window_data_s"].get<double>(), 0.1);
  EXPECT_EQ(j["window_compute_s"].get<double>(), 2);
  EXPECT_EQ(j["window_comm_s"].get<double>(), 0.3);
  EXPECT_EQ(j["window_optimizer_s"].get<double>(), 0.4);
  EXPECT_EQ(j["grad_norm"].get<double>(), 0.75);
  EXPECT_FALSE(j.contains("loss_scale"));
  EXPECT_EQ(j["tokens_per_s"].get<double>(), 1000.0 * 128);
  // Per GPU: 1000 samples/s over 4 ranks × FLOPs per sample / peak.
  EXPECT_DOUBLE_EQ(j["mfu"].get<double>(), 250 * 2e9 / 5e13);
  EXPECT_DOUBLE_EQ(j["mfu_llmc"].get<double>(), 250 * 1.5e9 / 5e13);
  EXPECT_FALSE(j.contains("mem_peak"));  // a CPU rank
  EXPECT_FALSE(j.contains("gpu_util"));
}

TEST(MetricsFile, CudaRanksRecordMemoryAndNvmlFigures) {
  Fixture run;
  run.info.device = at::Device(at::kCUDA, 0);  // only the record's claims: no CUDA call is made
  run.hook->on_start(run.info, run.control);
  dtrain::StepRecord r = train_record(5);
  r.loss_scale = 65536;
  r.memory = {100, 200, 300};
  dtrain::GpuStats g;
  g.utilization = 88.5, g.memory_used = 1e9, g.power_w = 450, g.sm_clock_mhz = 1755;
  g.memory_clock_mhz = 2619;
  r.gpu = g;
  run.hook->on_step(r, run.control);
  const json j = records(run.file()).at(0);
  EXPECT_EQ(j["loss_scale"].get<double>(), 65536);
  EXPECT_EQ(j["mem_allocated"], 100);
  EXPECT_EQ(j["mem_reserved"], 200);
  EXPECT_EQ(j["mem_peak"], 300);
  EXPECT_EQ(j["gpu_util"].get<double>(), 88.5);
  EXPECT_EQ(j["gpu_mem_used"].get<double>(), 1e9);
  EXPECT_EQ(j["power_w"].get<double>(), 450);
  EXPECT_EQ(j["sm_clock_mhz"].get<double>(), 1755);
  EXPECT_EQ(j["mem_clock_mhz"].get<double>(), 2619);
  EXPECT_FALSE(j.contains("mfu"));  // FLOPs and peak unknown
  EXPECT_FALSE(j.contains("tokens_per_s"));
}

TEST(MetricsFile, EveryRunEndsWithASummaryRecord) {
  Fixture run;
  run.info.resumed_from = "ckpt/step-000000100";
  run.info.resumed_step = 100;
  run.info.resumed_samples = 6400;
  run.info.tokens_per_sample = 10;
  run.hook->on_start(run.info, run.control);
  dtrain::EvalRecord e;
  e.step = 150, e.epoch = 2, e.train_loss = 0.9, e.epoch_seconds = 12;
  e.result.loss = 0.8, e.result.accuracy = 0.7, e.result.count = 1000;
  run.hook->on_eval(e, run.control);
  dtrain::TrainSummary s;
  s.steps = 150, s.samples = 9600, s.run_samples = 3200, s.seconds = 16, s.last_loss = 0.85;
  s.steady_samples_per_s = 250, s.steady_from_step = 106;
  s.eval = e.result;
  s.phases.data = 1, s.phases.compute = 10, s.phases.comm = 2, s.phases.optimizer = 3;
  s.phases.eval = 4;
  s.stopped = true, s.stop_signal = 10;
  s.checkpoint = "ckpt/step-000000150", s.checkpoint_step = 150;
  s.wall_end = 1700000999.0;
  s.optimizer_state_bytes = 4096, s.optimizer_shards = 2;
  run.hook->on_end(s);
  const auto r = records(run.file());
  ASSERT_EQ(r.size(), 3u);
  for (const json& j : r) {
    EXPECT_TRUE(j.contains("time")) << j.dump();
    EXPECT_TRUE(j.contains("step")) << j.dump();
  }
  EXPECT_EQ(r[0]["type"], "resume");
  EXPECT_EQ(r[0]["step"], 100);
  EXPECT_EQ(r[1]["type"], "eval");
  EXPECT_EQ(r[1]["test_accuracy"].get<double>(), 0.7);
  EXPECT_EQ(r[1]["epoch_s"].get<double>(), 12);
  const json& j = r[2];
  EXPECT_EQ(j["type"], "summary");
  EXPECT_EQ(j["time"].get<double>(), 1700000999.0);
  EXPECT_EQ(j["step"], 150);
  EXPECT_EQ(j["samples"], 9600);
  // This process trained 9600 - 6400 samples in 16 s; faster after its warm-up.
  EXPECT_EQ(j["run_samples"], 3200);
  EXPECT_EQ(j["samples_per_s"].get<double>(), 200);
  EXPECT_EQ(j["tokens_per_s"].get<double>(), 2000);
  EXPECT_EQ(j["steady_samples_per_s"].get<double>(), 250);
  EXPECT_EQ(j["steady_tokens_per_s"].get<double>(), 2500);
  EXPECT_EQ(j["steady_from_step"], 106);
  EXPECT_EQ(j["last_loss"].get<double>(), 0.85);
  EXPECT_EQ(j["test_loss"].get<double>(), 0.8);
  EXPECT_EQ(j["test_count"], 1000);
  EXPECT_EQ(j["compute_s"].get<double>(), 10);
  EXPECT_EQ(j["eval_s"].get<double>(), 4);
  EXPECT_EQ(j["stopped"], true);
  EXPECT_EQ(j["stop_signal"], 10);
  EXPECT_EQ(j["checkpoint"], "ckpt/step-000000150");
  EXPECT_EQ(j["optimizer_state_bytes"], 4096);
  EXPECT_EQ(j["optimizer_shards"], 2);
  EXPECT_FALSE(j.contains("gpu_util"));
  EXPECT_FALSE(j.contains("mem_peak"));
}

}  // namespace
