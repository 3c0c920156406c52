// Files dtrain writes (config.yaml through write_file_atomic, metrics.jsonl through OutputFile)
// turn every failed write, fsync, close or rename into an Error naming the file and the OS
// reason. /dev/full answers every write with ENOSPC, as a full disk does; a symbolic link to it
// stands in for the file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "dtrain/config.h"
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
