// Files dtrain writes (config.yaml through write_file_atomic, checkpoints streamed through it,
// metrics.jsonl through OutputFile)
// turn every failed write, fsync, close or rename into an Error naming the file and the OS
// reason. /dev/full answers every write with ENOSPC, as a full disk does; a symbolic link to it
// stands in for the file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include <ATen/ATen.h>

#include "checkpoint/torch_file.h"
#include "dtrain/config.h"
#include "dtrain/error.h"
#include "dtrain/hooks.h"
#include "dtrain/records.h"
#include "hooks/standard.h"
#include "test_support.h"
#include "util/fs.h"

namespace {

using dtrain::test::HookRun;
using dtrain::test::is_directory;
using dtrain::test::message_of;
using dtrain::test::read_text;
using dtrain::test::TempDir;

const std::string kNoSpace = std::strerror(ENOSPC);  // "No space left on device"

using dtrain::test::expect_all;

bool exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

TEST(WriteErrors, AtomicWriteOnAFullDiskNamesFileAndReason) {
  TempDir dir;
  ASSERT_EQ(::symlink("/dev/full", dir.file("config.yaml.tmp").c_str()), 0);
  expect_all(
      message_of([&] { dtrain::detail::write_file_atomic(dir.file("config.yaml"), "run: {}\n"); }),
      {dir.file("config.yaml.tmp"), "write failed", kNoSpace});
  EXPECT_FALSE(exists(dir.file("config.yaml")));      // nothing renamed into place
  EXPECT_FALSE(exists(dir.file("config.yaml.tmp")));  // the temporary is gone
}

TEST(WriteErrors, AtomicWriteThatCannotRenameNamesFileAndReason) {
  TempDir dir;
  dtrain::detail::make_dirs(dir.file("taken/inside"));  // a non-empty directory in the way
  expect_all(message_of([&] { dtrain::detail::write_file_atomic(dir.file("taken"), "x"); }),
             {dir.file("taken"), "cannot rename", std::strerror(EISDIR)});
  EXPECT_FALSE(exists(dir.file("taken.tmp")));
}

TEST(WriteErrors, AtomicWriteIntoARemovedDirectoryNamesFileAndReason) {
  TempDir dir;
  expect_all(
      message_of([&] { dtrain::detail::write_file_atomic(dir.file("gone/config.yaml"), "x"); }),
      {dir.file("gone/config.yaml.tmp"), std::strerror(ENOENT)});
}

TEST(WriteErrors, AtomicWriteStillWrites) {
  TempDir dir;
  dtrain::detail::write_file_atomic(dir.file("a.yaml"), "run: {}\n");
  EXPECT_EQ(read_text(dir.file("a.yaml")), "run: {}\n");
  EXPECT_FALSE(exists(dir.file("a.yaml.tmp")));
}

// A file streamed from its encoder: past the 64 MiB at which its pages are handed to the disk,
// in pieces of every size, the bytes read back are the bytes produced.
TEST(WriteErrors, StreamedAtomicWriteWritesEveryPieceInOrder) {
  TempDir dir;
  std::string expected;
  dtrain::detail::write_file_atomic(
      dir.file("big.pt"),
      [&](const dtrain::detail::ByteSink& out) {
        for (size_t n :
             {size_t{1}, size_t{30} << 20, size_t{3}, size_t{50} << 20, size_t{9} << 20}) {
          const std::string piece(n, static_cast<char>('a' + expected.size() % 26));
          out(piece.data(), piece.size());
          expected += piece;
        }
      },
      {});
  EXPECT_EQ(read_text(dir.file("big.pt")), expected);
  EXPECT_FALSE(exists(dir.file("big.pt.tmp")));
}

// A full disk under a streamed archive (a checkpoint's state.pt, model.pt) is the write's Error
// naming the file, not the archive writer's, and never a throw from its destructor.
TEST(WriteErrors, StreamedArchiveOnAFullDiskNamesFileAndReason) {
  TempDir dir;
  ASSERT_EQ(::symlink("/dev/full", dir.file("model.pt.tmp").c_str()), 0);
  const dtrain::detail::NamedTensors tensors = {{"w", at::ones({1 << 20})}};
  expect_all(message_of([&] {
               dtrain::detail::write_file_atomic(dir.file("model.pt"),
                                                 [&](const dtrain::detail::ByteSink& out) {
                                                   dtrain::detail::torch_save_to(tensors, out);
                                                 },
                                                 {});
             }),
             {dir.file("model.pt.tmp"), "write failed", kNoSpace});
  EXPECT_FALSE(exists(dir.file("model.pt")));
  EXPECT_FALSE(exists(dir.file("model.pt.tmp")));
}

// An encoder that fails leaves the file as it was and no temporary behind.
TEST(WriteErrors, StreamedAtomicWriteWhoseEncoderFailsKeepsTheOldFile) {
  TempDir dir;
  dtrain::detail::write_file_atomic(dir.file("state.pt"), "old");
  expect_all(message_of([&] {
               dtrain::detail::write_file_atomic(dir.file("state.pt"),
                                                 [](const dtrain::detail::ByteSink& out) {
                                                   out("new", 3);
                                                   throw dtrain::Error("encoding failed",
                                                                       "state.pt");
                                                 },
                                                 {});
             }),
             {"encoding failed"});
  EXPECT_EQ(read_text(dir.file("state.pt")), "old");
  EXPECT_FALSE(exists(dir.file("state.pt.tmp")));
}

TEST(WriteErrors, OutputFileOnAFullDiskNamesFileAndReason) {
  dtrain::detail::OutputFile f("/dev/full");
  expect_all(message_of([&] { f.write("{\"step\": 1}\n"); }),
             {"/dev/full", "write failed", kNoSpace});
  TempDir dir;
  expect_all(message_of([&] { dtrain::detail::OutputFile g(dir.file("no/such/dir/m.jsonl")); }),
             {dir.file("no/such/dir/m.jsonl"), std::strerror(ENOENT)});
}

TEST(WriteErrors, MetricsOnAFullDiskEndTheRunNamingTheFile) {
  HookRun run;
  auto& [dir, cfg, info, control] = run;
  const std::string run_dir = info.run_dir;
  dtrain::detail::make_dirs(run_dir);
  ASSERT_EQ(::symlink("/dev/full", (run_dir + "/metrics.jsonl").c_str()), 0);
  auto hook = dtrain::detail::make_metrics_file();
  hook->on_start(info, control);
  EXPECT_FALSE(read_text(run_dir + "/config.yaml").empty());  // config.yaml is a real file
  dtrain::StepRecord r;
  r.step = 1;
  r.loss = 0.5;
  expect_all(message_of([&] { hook->on_step(r, control); }),
             {run_dir + "/metrics.jsonl", "write failed", kNoSpace});
  dtrain::EvalRecord e;
  expect_all(message_of([&] { hook->on_eval(e, control); }),
             {run_dir + "/metrics.jsonl", kNoSpace});
}

TEST(WriteErrors, MetricsAreWrittenAndClosed) {
  HookRun run;
  auto& [dir, cfg, info, control] = run;
  auto hook = dtrain::detail::make_metrics_file();
  hook->on_start(info, control);
  dtrain::StepRecord r;
  r.step = 3;
  r.loss = 0.25;
  hook->on_step(r, control);
  dtrain::TrainSummary s;
  hook->on_end(s);
  const std::string text = read_text(info.run_dir + "/metrics.jsonl");
  EXPECT_NE(text.find("\"step\":3"), std::string::npos) << text;
  EXPECT_EQ(text.back(), '\n');
}

}  // namespace
