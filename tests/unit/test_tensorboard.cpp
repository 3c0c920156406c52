// TensorBoard event files (src/telemetry/tensorboard.h, src/hooks/tensorboard.cpp): CRC-32C
// against its published check values, and event files read back by an independent reader
// (tests/unit/read_tfevents.py: Python's standard library only, its own CRC-32C from the
// polynomial, its own protobuf decoding) run in DTRAIN_REF_PYTHON.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "dtrain/config.h"
#include "dtrain/hooks.h"
#include "dtrain/records.h"
#include "hooks/standard.h"
#include "telemetry/tensorboard.h"
#include "test_paths.h"
#include "test_support.h"
#include "util/fs.h"

namespace {

using dtrain::test::HookRun;
using dtrain::test::message_of;
using dtrain::test::python_failure;
using dtrain::test::read_text;
using dtrain::test::run_python;
using dtrain::test::TempDir;
using nlohmann::json;

// Every event the reader finds under `path` (a file or a folder), in order.
std::vector<json> read_events(const TempDir& dir, const std::string& path) {
  const char* script = R"PY(
import sys
sys.path.insert(0, sys.argv[1])
import read_tfevents
sys.exit(read_tfevents.main([""] + sys.argv[2:]))
)PY";
  const auto run = run_python(
      dir, script, std::string("'") + dtrain::test::test_dir() + "/unit' '" + path + "'");
  EXPECT_EQ(run.status, 0) << python_failure("read_tfevents.py", run);
  std::vector<json> events;
  std::istringstream in(run.output);
  for (std::string line; std::getline(in, line);) events.push_back(json::parse(line));
  return events;
}

std::string host() {
  char buf[256] = {};
  return ::gethostname(buf, sizeof buf - 1) == 0 && buf[0] ? buf : "localhost";
}

TEST(TensorBoard, Crc32cHasItsPublishedCheckValues) {
  // The CRC catalogue's check value ("123456789") and RFC 3720's 32 zero bytes.
  EXPECT_EQ(dtrain::detail::crc32c("123456789", 9), 0xE3069283u);
  const std::string zeros(32, '\0');
  EXPECT_EQ(dtrain::detail::crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  EXPECT_EQ(dtrain::detail::crc32c("", 0), 0u);
  const uint32_t c = 0xE3069283u;
  EXPECT_EQ(dtrain::detail::masked_crc32c("123456789", 9),
            static_cast<uint32_t>(((c >> 15) | (c << 17)) + 0xa282ead8u));
}

TEST(TensorBoard, RecordFramingIsLengthCrcDataCrc) {
  const std::string r = dtrain::detail::tfrecord("abc");
  ASSERT_EQ(r.size(), 8u + 4u + 3u + 4u);
  EXPECT_EQ(r.substr(0, 8), std::string("\x03\0\0\0\0\0\0\0", 8));  // little-endian uint64
  EXPECT_EQ(r.substr(12, 3), "abc");
}

TEST(TensorBoard, EventsReadBackWithAnIndependentReader) {
  TempDir dir;
  const std::string tb = dir.file("tb");
  const double t0 = 1700000000.25;
  dtrain::detail::EventWriter w(tb, t0);
  EXPECT_EQ(w.path(), tb + "/events.out.tfevents.1700000000." + host());
  w.add_scalars(1, t0 + 1, {{"loss", 2.5f}, {"lr", 1e-3f}, {"phase/data", 0.125f}});
  w.add_scalars(7, t0 + 2, {{"loss", -0.375f}});
  w.add_scalars(int64_t{1} << 40, t0 + 3, {{"eval/accuracy", 0.9f}});  // a 6-byte varint
  w.add_scalars(8, t0 + 4, {});                                        // nothing written
  w.close();

  const auto events = read_events(dir, tb);
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0]["file_version"], "brain.Event:2");
  EXPECT_EQ(events[0]["wall_time"].get<double>(), t0);
  EXPECT_EQ(events[1]["step"], 1);
  EXPECT_EQ(events[1]["wall_time"].get<double>(), t0 + 1);
  EXPECT_EQ(events[1]["values"]["loss"].get<double>(), 2.5);
  EXPECT_EQ(events[1]["values"]["lr"].get<double>(), static_cast<double>(1e-3f));
  EXPECT_EQ(events[1]["values"]["phase/data"].get<double>(), 0.125);
  EXPECT_EQ(events[2]["step"], 7);
  EXPECT_EQ(events[2]["values"]["loss"].get<double>(), -0.375);
  EXPECT_EQ(events[3]["step"].get<int64_t>(), int64_t{1} << 40);
  EXPECT_EQ(events[3]["values"]["eval/accuracy"].get<double>(), static_cast<double>(0.9f));
}

TEST(TensorBoard, ASecondWriterInTheSameSecondAddsAFile) {
  TempDir dir;
  const std::string tb = dir.file("tb");
  dtrain::detail::EventWriter a(tb, 1700000000.0);
  a.add_scalars(1, 1700000000.5, {{"loss", 1.0f}});
  dtrain::detail::EventWriter b(tb, 1700000000.9);
  EXPECT_EQ(b.path(), a.path() + ".1");
  b.add_scalars(2, 1700000001.0, {{"loss", 0.5f}});
  a.close();
  b.close();
  const auto events = read_events(dir, tb);
  ASSERT_EQ(events.size(), 4u);  // each file: its version record, then its scalars
  EXPECT_EQ(events[1]["values"]["loss"].get<double>(), 1.0);
  EXPECT_EQ(events[3]["values"]["loss"].get<double>(), 0.5);
}

TEST(TensorBoard, AFolderThatCannotBeMadeIsAnErrorNamingIt) {
  TempDir dir;
  dtrain::detail::write_file_atomic(dir.file("file"), "x");
  const std::string msg =
      message_of([&] { dtrain::detail::EventWriter w(dir.file("file/tb"), 1700000000.0); });
  EXPECT_NE(msg.find(dir.file("file")), std::string::npos) << msg;
}

dtrain::StepRecord record(int64_t step, std::optional<double> loss) {
  dtrain::StepRecord r;
  r.step = step;
  r.loss = loss;
  r.lr = 0.01;
  r.samples_per_s = 400;
  r.wall_time = 1700000000.0 + static_cast<double>(step);
  r.window_phases.data = 1, r.window_phases.compute = 2, r.window_phases.comm = 0.5;
  r.window_phases.optimizer = 0.5;
  r.grad_norm = 3.0;
  return r;
}

TEST(TensorBoard, HookWritesEachLossReadAndEvaluation) {
  HookRun run;
  auto& [dir, cfg, info, control] = run;
  info.world = 2;
  info.tokens_per_sample = 16;
  info.data.num_classes = 10;
  info.flops_per_sample = 3e9;
  info.peak_flops = 1e14;
  auto hook = dtrain::detail::make_tensorboard();
  hook->on_start(info, control);
  hook->on_step(record(1, std::nullopt), control);  // no loss read: no event
  hook->on_step(record(2, 0.75), control);
  dtrain::EvalRecord e;
  e.step = 2;
  e.result.loss = 0.5, e.result.accuracy = 0.8;
  hook->on_eval(e, control);
  dtrain::TrainSummary s;
  hook->on_end(s);

  const auto events = read_events(dir, info.run_dir + "/tensorboard");
  ASSERT_EQ(events.size(), 3u);
  const json& v = events[1]["values"];
  EXPECT_EQ(events[1]["step"], 2);
  EXPECT_EQ(events[1]["wall_time"].get<double>(), 1700000002.0);
  EXPECT_EQ(v["loss"].get<double>(), 0.75);
  EXPECT_EQ(v["samples_per_s"].get<double>(), 400);
  EXPECT_EQ(v["tokens_per_s"].get<double>(), 400 * 16);
  // MFU per GPU: 400 samples/s over 2 ranks × 3 GFLOP / 100 TFLOP/s.
  EXPECT_NEAR(v["mfu"].get<double>(), 200 * 3e9 / 1e14, 1e-7);
  EXPECT_FALSE(v.contains("mfu_llmc"));            // no llm.c count for this model
  EXPECT_EQ(v["phase/data"].get<double>(), 0.25);  // 1 of 4 s
  EXPECT_EQ(v["phase/compute"].get<double>(), 0.5);
  EXPECT_EQ(v["phase/comm"].get<double>(), 0.125);
  EXPECT_EQ(v["phase/optimizer"].get<double>(), 0.125);
  EXPECT_EQ(v["grad_norm"].get<double>(), 3.0);
  EXPECT_FALSE(v.contains("loss_scale"));
  EXPECT_FALSE(v.contains("memory/peak_gib"));  // a CPU rank
  EXPECT_FALSE(v.contains("gpu/utilization"));  // no NVML figures
  EXPECT_EQ(events[2]["values"]["eval/loss"].get<double>(), 0.5);
  EXPECT_EQ(events[2]["values"]["eval/accuracy"].get<double>(), static_cast<double>(0.8f));
}

TEST(TensorBoard, HookWritesGpuFiguresOnCudaRanks) {
  HookRun run;
  auto& [dir, cfg, info, control] = run;
  info.device = at::Device(at::kCUDA, 0);  // only the record's claims: no CUDA call is made
  auto hook = dtrain::detail::make_tensorboard();
  hook->on_start(info, control);
  dtrain::StepRecord r = record(4, 1.5);
  r.loss_scale = 32768;
  r.memory = {int64_t{3} << 30, int64_t{4} << 30, int64_t{5} << 30};
  dtrain::GpuStats g;
  g.utilization = 97, g.memory_used = 2.0 * (1 << 30), g.power_w = 600;
  g.sm_clock_mhz = 1980, g.memory_clock_mhz = 2619;
  r.gpu = g;
  hook->on_step(r, control);
  dtrain::TrainSummary s;
  hook->on_end(s);
  const auto events = read_events(dir, info.run_dir + "/tensorboard");
  ASSERT_EQ(events.size(), 2u);
  const json& v = events[1]["values"];
  EXPECT_EQ(v["loss_scale"].get<double>(), 32768);
  EXPECT_EQ(v["memory/allocated_gib"].get<double>(), 3);
  EXPECT_EQ(v["memory/reserved_gib"].get<double>(), 4);
  EXPECT_EQ(v["memory/peak_gib"].get<double>(), 5);
  EXPECT_EQ(v["gpu/utilization"].get<double>(), 97);
  EXPECT_EQ(v["gpu/memory_used_gib"].get<double>(), 2);
  EXPECT_EQ(v["gpu/power_w"].get<double>(), 600);
  EXPECT_EQ(v["gpu/sm_clock_mhz"].get<double>(), 1980);
  EXPECT_EQ(v["gpu/mem_clock_mhz"].get<double>(), 2619);
  EXPECT_FALSE(v.contains("mfu"));  // no FLOPs known
}

TEST(TensorBoard, OnlyRankZeroWithARunDirectoryWrites) {
  HookRun run(2);
  auto& [dir, cfg, info, control] = run;
  info.rank = 1;
  auto hook = dtrain::detail::make_tensorboard();
  hook->on_start(info, control);
  hook->on_step(record(1, 0.5), control);
  dtrain::TrainSummary s;
  hook->on_end(s);
  EXPECT_FALSE(dtrain::detail::path_exists(info.run_dir));
  info.rank = 0;
  info.run_dir = "";
  auto hook0 = dtrain::detail::make_tensorboard();
  hook0->on_start(info, control);
  hook0->on_step(record(1, 0.5), control);
  hook0->on_end(s);  // nothing to write to, nothing thrown
}

}  // namespace
