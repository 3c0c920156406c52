// The checkpoint folder's rules (src/checkpoint/folder.h) and the state files' encoding
// (src/checkpoint/state.h): only marked checkpoints count, a changed file is caught by the
// marker, pruning never touches the newest complete checkpoint, and decoding names the file;
// and an early stop's end holds on resume under its own rule only (src/train/resume.h).
#include <gtest/gtest.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <fstream>
#include <string>
#include <vector>

#include "checkpoint/folder.h"
#include "checkpoint/snapshot.h"
#include "checkpoint/state.h"
#include "dtrain/config.h"
#include "dtrain/error.h"
#include "test_support.h"
#include "train/resume.h"
#include "util/dir.h"
#include "util/fs.h"

namespace {

using dtrain::test::message_of;
using dtrain::test::TempDir;
namespace d = dtrain::detail;

void write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

// A checkpoint folder with two files; marked (complete) or not.
std::string make_checkpoint(const d::CheckpointFolder& folder, int64_t step, bool complete) {
  const std::string dir = folder.path_of(step);
  d::make_dirs(dir);
  const auto state =
      d::write_checkpoint_file(dir, "state.pt", "state of step " + std::to_string(step));
  const auto rank = d::write_checkpoint_file(dir, "rank-00000.pt", "rank 0");
  if (complete) d::write_marker(dir, step, 1, {state, rank});
  return dir;
}

TEST(CheckpointFolder, OnlyMarkedCheckpointsCountAndPruningKeepsTheNewest) {
  TempDir tmp;
  const d::CheckpointFolder folder(tmp.file("ck"));
  EXPECT_EQ(folder.newest_complete(), "");  // no folder yet
  const auto c5 = make_checkpoint(folder, 5, true);
  const auto i3 = make_checkpoint(folder, 3, false);
  const auto c10 = make_checkpoint(folder, 10, true);
  const auto i12 = make_checkpoint(folder, 12, false);  // a save in progress, or one that died
  d::make_dirs(tmp.file("ck/notes"));
  EXPECT_EQ(folder.path_of(10), tmp.file("ck/step-000000010"));
  EXPECT_EQ(folder.complete(), (std::vector<std::string>{c5, c10}));
  EXPECT_EQ(folder.newest_complete(), c10);

  const auto removed = folder.prune(1);
  EXPECT_EQ(removed, (std::vector<std::string>{c5, i3}));
  EXPECT_FALSE(d::path_exists(c5));
  EXPECT_FALSE(d::path_exists(i3));
  EXPECT_TRUE(d::has_marker(c10));
  EXPECT_TRUE(d::path_exists(i12));  // newer than the newest complete one: left alone
  EXPECT_TRUE(d::path_exists(tmp.file("ck/notes")));
  EXPECT_EQ(folder.prune(1), std::vector<std::string>{});  // nothing more to do
}

TEST(CheckpointFolder, TheMarkerCatchesMissingTruncatedAndChangedFiles) {
  TempDir tmp;
  const d::CheckpointFolder folder(tmp.path());
  const auto dir = make_checkpoint(folder, 7, true);
  const d::Marker m = d::checked(dir);
  EXPECT_EQ(m.step, 7);
  EXPECT_EQ(m.world, 1);
  ASSERT_EQ(m.files.size(), 2u);
  EXPECT_EQ(m.files[0].name, "state.pt");
  EXPECT_EQ(m.files[0].bytes, static_cast<int64_t>(std::string("state of step 7").size()));
  EXPECT_EQ(m.format, 2);
  EXPECT_EQ(m.files[0].hash, 0x07f106efu);  // Python: zlib.crc32(b"state of step 7")
  EXPECT_EQ(m.files[1].hash, 0x7f5ce36bu);  // zlib.crc32(b"rank 0")
  // ranks hand rank 0 their entries as text: the round trip keeps them
  const auto again = d::parse_marker_entries(d::marker_entries(m.files), "entries");
  ASSERT_EQ(again.size(), 2u);
  EXPECT_EQ(again[1].name, "rank-00000.pt");
  EXPECT_EQ(again[1].bytes, 6);
  EXPECT_EQ(again[1].hash, 0x7f5ce36bu);
  EXPECT_NE(message_of([&] {
              d::parse_marker_entries("{\"name\": 1}\n", "entries");
            }).find("entries: not a checkpoint file entry"),
            std::string::npos);

  write(dir + "/state.pt", "state of step 8");  // same size, other bytes
  std::string msg = message_of([&] { d::checked(dir); });
  EXPECT_NE(msg.find(dir + "/state.pt: checkpoint file is corrupt"), std::string::npos) << msg;
  write(dir + "/state.pt", "state");
  msg = message_of([&] { d::checked(dir); });
  EXPECT_NE(msg.find("truncated or changed: 5 bytes, the marker says 15"), std::string::npos)
      << msg;
  std::remove((dir + "/rank-00000.pt").c_str());
  write(dir + "/state.pt", "state of step 7");
  msg = message_of([&] { d::checked(dir); });
  EXPECT_NE(msg.find(dir + "/rank-00000.pt: checkpoint file is missing"), std::string::npos) << msg;
  std::remove((dir + "/COMPLETE").c_str());
  msg = message_of([&] { d::checked(dir); });
  EXPECT_NE(msg.find("incomplete checkpoint"), std::string::npos) << msg;
  EXPECT_EQ(folder.newest_complete(), "");
  write(dir + "/COMPLETE", "{not json");
  msg = message_of([&] { d::checked(dir); });
  EXPECT_NE(msg.find("unreadable checkpoint marker"), std::string::npos) << msg;
}

TEST(CheckpointFolder, AMarkerOfFormatOneWithFnv1aHashesIsStillRead) {
  TempDir tmp;
  const std::string dir = tmp.file("step-000000007");
  d::make_dirs(dir);
  write(dir + "/state.pt", "state of step 7");
  write(dir + "/rank-00000.pt", "rank 0");
  // as dtrain wrote markers before format 2; the hashes from Python's FNV-1a, 64 bit
  write(dir + "/COMPLETE",
        R"({"format": "dtrain checkpoint 1", "step": 7, "world": 1, "files": [
            {"name": "state.pt", "bytes": 15, "fnv1a": "6400aaa99e7a0508"},
            {"name": "rank-00000.pt", "bytes": 6, "fnv1a": "075be53407c216e1"}]})");
  const d::Marker m = d::checked(dir);
  EXPECT_EQ(m.format, 1);
  EXPECT_EQ(m.step, 7);
  ASSERT_EQ(m.files.size(), 2u);
  write(dir + "/rank-00000.pt", "rank 1");
  const std::string msg = message_of([&] { d::checked(dir); });
  EXPECT_NE(msg.find(dir + "/rank-00000.pt: checkpoint file is corrupt: its FNV-1a hash"),
            std::string::npos)
      << msg;
  write(dir + "/COMPLETE",
        R"({"format": "dtrain checkpoint 9", "step": 7, "world": 1, "files": []})");
  EXPECT_NE(message_of([&] { d::checked(dir); }).find("unknown checkpoint format"),
            std::string::npos);
}

TEST(CheckpointFolder, AFileLargerThanOneChunkIsHashedWhileWrittenAndWhileChecked) {
  TempDir tmp;
  const std::string dir = tmp.file("step-000000002");
  d::make_dirs(dir);
  std::string bytes((size_t(9) << 20) + 7, '\0');  // over one 8 MiB write, nine 1 MiB reads
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>((i * 7 + 3) % 251);
  // Python: zlib.crc32(bytes((i * 7 + 3) % 251 for i in range((9 << 20) + 7)))
  const uint32_t expected = 0x92acb101u;
  const d::MarkedFile f = d::write_checkpoint_file(dir, "state.pt", bytes);
  EXPECT_EQ(f.hash, expected);
  EXPECT_EQ(d::crc32_of(bytes.data() + 5, bytes.size() - 5, d::crc32_of(bytes.data(), 5)),
            expected);
  d::write_marker(dir, 2, 1, {f});
  EXPECT_EQ(d::checked(dir).files.at(0).hash, expected);
}

TEST(CheckpointFolder, TheMarkerListsOnlyFilesThatAreThereWithTheirSize) {
  TempDir tmp;
  const std::string dir = tmp.file("step-000000001");
  d::make_dirs(dir);
  d::MarkedFile f = d::write_checkpoint_file(dir, "state.pt", "abc");
  f.bytes = 4;
  std::string msg = message_of([&] { d::write_marker(dir, 1, 1, {f}); });
  EXPECT_NE(msg.find(dir + "/state.pt: checkpoint file has 3 bytes, its writer wrote 4"),
            std::string::npos)
      << msg;
  f.name = "rank-00001.pt";
  msg = message_of([&] { d::write_marker(dir, 1, 1, {f}); });
  EXPECT_NE(msg.find(dir + "/rank-00001.pt: checkpoint file is missing"), std::string::npos) << msg;
  EXPECT_FALSE(d::has_marker(dir));
}

TEST(CheckpointState, RoundTripsAndNamesTheFileWhenItCannot) {
  d::SharedState s;
  s.position.step = 42;
  s.position.steps_per_epoch = 18;
  s.position.epoch_end_done = true;
  s.position.samples = 1344;
  s.position.micro_batch = 8;
  s.position.window_loss = 1.25;
  s.position.window_steps = 3;
  s.position.last_loss = 0.5;
  s.position.schedule_start = 36;
  s.position.stopped_early = true;
  s.position.stop_reason = "early stop: test_loss has not improved for 2 evaluation(s)";
  s.world = 2;
  s.global_batch = 32;
  s.config = {{"train.lr", "0.01"}, {"model.name", "mlp"}};
  s.config_hash = "00ff";
  s.dtrain_version = "0.1.0";
  s.libtorch_version = "1.13";
  s.model = {{"fc.weight", at::arange(6, at::kFloat).reshape({2, 3})}, {"fc.bias", at::ones({2})}};
  s.optimizer = {{"exp_avg.0", at::full({2, 3}, 0.5)}};
  s.hooks = {{"best_model", R"({"metric":"test_loss","best":0.25,"best_step":40,"since_best":2})"}};
  const d::SharedState back = d::decode_shared(d::encode(s), "x/state.pt");
  EXPECT_EQ(back.position.step, 42);
  EXPECT_EQ(back.position.steps_per_epoch, 18);
  EXPECT_TRUE(back.position.epoch_end_done);
  EXPECT_EQ(back.position.samples, 1344);
  EXPECT_EQ(back.position.micro_batch, 8);
  EXPECT_EQ(back.position.window_loss, 1.25);
  EXPECT_EQ(back.position.window_steps, 3);
  EXPECT_EQ(back.position.schedule_start, 36);
  EXPECT_TRUE(back.position.stopped_early);  // the run ended there (an early stop)
  EXPECT_EQ(back.position.stop_reason, s.position.stop_reason);
  EXPECT_EQ(back.world, 2);
  EXPECT_EQ(back.config, s.config);
  EXPECT_EQ(back.hooks, s.hooks);  // the hooks' states (Hook::state)
  ASSERT_EQ(back.model.size(), 2u);
  EXPECT_EQ(back.model[0].first, "fc.weight");
  EXPECT_TRUE(at::equal(back.model[0].second, s.model[0].second));
  EXPECT_TRUE(back.scaler.empty());

  d::RankState r;
  r.rank = 1;
  r.world = 2;
  r.step = 42;
  r.cpu_rng = at::arange(5, at::kByte);
  const d::RankState rb = d::decode_rank(d::encode(r), "x/rank-00001.pt");
  EXPECT_EQ(rb.rank, 1);
  EXPECT_TRUE(at::equal(rb.cpu_rng, r.cpu_rng));
  EXPECT_FALSE(rb.cuda_rng.defined());

  std::string msg = message_of([&] { d::decode_shared("not a pickle", "x/state.pt"); });
  EXPECT_NE(msg.find("x/state.pt: not a readable checkpoint file"), std::string::npos) << msg;
  msg = message_of([&] { d::decode_shared(d::encode(r), "x/state.pt"); });
  EXPECT_NE(msg.find("x/state.pt: not a dtrain checkpoint file of this kind"), std::string::npos)
      << msg;
  const std::string bytes = d::encode(s);
  msg = message_of([&] { d::decode_shared(bytes.substr(0, bytes.size() - 20), "x/state.pt"); });
  EXPECT_NE(msg.find("x/state.pt"), std::string::npos) << msg;

  // The streamed archive is torch::pickle_save's: LibTorch's own reader opens it.
  const c10::impl::GenericDict dict =
      torch::jit::pickle_load(std::vector<char>(bytes.begin(), bytes.end())).toGenericDict();
  EXPECT_EQ(dict.at("step").toInt(), 42);
  EXPECT_TRUE(
      at::equal(dict.at("model").toGenericDict().at("fc.weight").toTensor(), s.model[0].second));
}

// The host buffers of background saves (Note [background saves]): reserved before the first step,
// they are the very buffers every save copies into; only a tensor whose shape or dtype changed
// gets a new one.
TEST(HostSnapshot, ReservedBuffersAreTheOnesEverySaveCopiesInto) {
  const at::Device cpu(at::kCPU);
  d::NamedTensors state = {{"w", at::arange(6, at::kFloat).reshape({2, 3})},
                           {"unset", at::Tensor()},
                           {"step", at::scalar_tensor(4.0, at::kDouble)}};
  d::HostSnapshot snapshot;
  snapshot.begin();
  snapshot.reserve(state, cpu);
  EXPECT_EQ(snapshot.bytes(), 6 * 4 + 8);
  snapshot.begin();
  const d::NamedTensors first = snapshot.copy(state, cpu);
  ASSERT_EQ(first.size(), 3u);
  EXPECT_FALSE(first[1].second.defined());
  EXPECT_TRUE(at::equal(first[0].second, state[0].second));
  EXPECT_NE(first[0].second.data_ptr(), state[0].second.data_ptr());  // a copy, not the tensor
  state[0].second.add_(1);
  snapshot.begin();
  const d::NamedTensors second = snapshot.copy(state, cpu);
  EXPECT_EQ(second[0].second.data_ptr(), first[0].second.data_ptr());  // the same buffer
  EXPECT_EQ(second[2].second.data_ptr(), first[2].second.data_ptr());
  EXPECT_TRUE(at::equal(second[0].second, state[0].second));
  EXPECT_EQ(snapshot.bytes(), 6 * 4 + 8);
  state[0].second = at::zeros({4}, at::kDouble);  // a changed shape and dtype: a new buffer
  snapshot.begin();
  const d::NamedTensors third = snapshot.copy(state, cpu);
  EXPECT_EQ(third[0].second.scalar_type(), at::kDouble);
  EXPECT_EQ(snapshot.bytes(), 4 * 8 + 8);
}

TEST(CheckpointResume, AnEarlyStopEndsTheRunUnderItsOwnRuleOnly) {
  d::SharedState s;
  s.position.step = 130;
  s.position.steps_per_epoch = 16;
  s.position.stopped_early = true;
  s.position.stop_reason = "early stop: test_accuracy has not improved for 1 evaluation(s)";
  auto cfg = [](const std::vector<std::string>& overrides) {
    return dtrain::Config::from_string(
        "train: {epochs: 40, monitor: test_accuracy, early_stop_patience: 1}\n", "resume",
        overrides);
  };
  s.config = d::config_values(cfg({}));
  std::string said;
  // The same rule, also with more epochs: the run ends there, and the refusal says how to go on.
  EXPECT_TRUE(d::resume_position(s, cfg({"train.epochs=80"}), &said).stopped_early);
  EXPECT_EQ(said, "");
  const std::string msg = d::finished_run_error(s.position, cfg({}).train);
  for (const char* part :
       {"this run has finished: its checkpoint is at step 130, where it stopped early (early stop: "
        "test_accuracy has not improved for 1 evaluation(s))",
        "nothing was written", "More train.epochs or train.max_steps do not train on",
        "train.early_stop_patience (1 now; raise it, or 0 for no early stopping) or train.monitor",
        "another run.name"})
    EXPECT_NE(msg.find(part), std::string::npos) << part << "\n" << msg;
  // Another patience, or early stopping off, or another metric: it trains on from step 130.
  for (const char* change :
       {"train.early_stop_patience=3", "train.early_stop_patience=0", "train.monitor=test_loss"}) {
    said.clear();
    const dtrain::LoopPosition p = d::resume_position(s, cfg({change}), &said);
    EXPECT_FALSE(p.stopped_early) << change;
    EXPECT_EQ(p.step, 130);
    EXPECT_NE(said.find("the run stopped early at step 130 (early stop: "), std::string::npos)
        << said;
    EXPECT_NE(said.find("now: it trains on from there"), std::string::npos) << said;
  }
  said.clear();
  EXPECT_FALSE(d::resume_position(s, cfg({"train.early_stop_patience=3"}), nullptr).stopped_early);
  // A finished run's refusal is as before.
  s.position.stopped_early = false;
  s.position.step = 640;
  EXPECT_NE(d::finished_run_error(s.position, cfg({}).train)
                .find("its checkpoint is at step 640, the end of training (train.epochs 40)"),
            std::string::npos);
}

TEST(CheckpointConfig, TheFolderIsTheRunsUnlessGiven) {
  dtrain::Config c;
  c.run.dir = "runs";
  c.run.name = "a";
  EXPECT_EQ(c.checkpoint.folder(c.run), "runs/a/checkpoints");
  c.checkpoint.dir = "/scratch/ck";
  EXPECT_EQ(c.checkpoint.folder(c.run), "/scratch/ck");
  c.checkpoint.dir = "";
  c.run.dir = "";
  EXPECT_EQ(c.checkpoint.folder(c.run), "");
}

}  // namespace
