// The checkpoint folder's rules (src/checkpoint/folder.h) and the state files' encoding
// (src/checkpoint/state.h): only marked checkpoints count, a changed file is caught by the
// marker, pruning never touches the newest complete checkpoint, and decoding names the file.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "checkpoint/folder.h"
#include "checkpoint/state.h"
#include "dtrain/config.h"
#include "dtrain/error.h"
#include "test_support.h"
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
  write(dir + "/state.pt", "state of step " + std::to_string(step));
  write(dir + "/rank-00000.pt", "rank 0");
  if (complete) d::write_marker(dir, step, 1, {"state.pt", "rank-00000.pt"});
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

  write(dir + "/state.pt", "state of step 8");  // same size, other bytes
  std::string msg = message_of([&] { d::checked(dir); });
  EXPECT_NE(msg.find(dir + "/state.pt: checkpoint file is corrupt"), std::string::npos) << msg;
  write(dir + "/state.pt", "state");
  msg = message_of([&] { d::checked(dir); });
  EXPECT_NE(msg.find("truncated or changed: 5 bytes, the marker says 15"), std::string::npos) << msg;
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
  s.world = 2;
  s.global_batch = 32;
  s.config = {{"train.lr", "0.01"}, {"model.name", "mlp"}};
  s.config_hash = "00ff";
  s.dtrain_version = "0.1.0";
  s.libtorch_version = "1.13";
  s.model = {{"fc.weight", at::arange(6, at::kFloat).reshape({2, 3})}, {"fc.bias", at::ones({2})}};
  s.optimizer = {{"exp_avg.0", at::full({2, 3}, 0.5)}};
  const d::SharedState back = d::decode_shared(d::encode(s), "x/state.pt");
  EXPECT_EQ(back.position.step, 42);
  EXPECT_EQ(back.position.steps_per_epoch, 18);
  EXPECT_TRUE(back.position.epoch_end_done);
  EXPECT_EQ(back.position.samples, 1344);
  EXPECT_EQ(back.position.micro_batch, 8);
  EXPECT_EQ(back.position.window_loss, 1.25);
  EXPECT_EQ(back.position.window_steps, 3);
  EXPECT_EQ(back.world, 2);
  EXPECT_EQ(back.config, s.config);
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
