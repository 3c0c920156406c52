// include/dtrain/log.h: one line per message with the rank's prefix, and lines from several
// threads never interleave within a line.
#include <gtest/gtest.h>

#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "dtrain/log.h"

namespace {

TEST(Log, LinesFromManyThreadsNeverInterleave) {
  constexpr int kThreads = 8, kLines = 300;
  // Long lines (past any stdio buffer boundary) make a torn write likely if locking were missing.
  auto line_of = [](int t, int i) {
    return "t" + std::to_string(t) + " i" + std::to_string(i) + " " +
           std::string(5000 + 37 * t, static_cast<char>('a' + t));
  };
  dtrain::log::configure(3, /*quiet=*/false);
  testing::internal::CaptureStdout();
  {
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
      threads.emplace_back([&, t] {
        for (int i = 0; i < kLines; ++i) dtrain::log::every(line_of(t, i));
      });
    for (auto& th : threads) th.join();
  }
  const std::string out = testing::internal::GetCapturedStdout();
  dtrain::log::configure(0, /*quiet=*/false);  // the default

  std::set<std::string> expected;
  for (int t = 0; t < kThreads; ++t)
    for (int i = 0; i < kLines; ++i) expected.insert("[rank 3] " + line_of(t, i));
  std::istringstream in(out);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    EXPECT_EQ(expected.erase(line), 1u) << "a torn or repeated line: " << line.substr(0, 80);
  }
  EXPECT_EQ(n, kThreads * kLines);
  EXPECT_TRUE(expected.empty()) << expected.size() << " lines missing";
}

TEST(Log, InfoSpeaksOnRankZeroOnlyAndQuietHidesDetail) {
  dtrain::log::configure(1, /*quiet=*/false);
  testing::internal::CaptureStdout();
  dtrain::log::info("from rank one");
  dtrain::log::detail("detail on rank one");
  EXPECT_EQ(testing::internal::GetCapturedStdout(), "");
  dtrain::log::configure(0, /*quiet=*/true);
  testing::internal::CaptureStdout();
  dtrain::log::info("job line");
  dtrain::log::detail("hidden");
  EXPECT_EQ(testing::internal::GetCapturedStdout(), "job line\n");
  dtrain::log::configure(0, /*quiet=*/false);
  testing::internal::CaptureStdout();
  dtrain::log::detail("shown");
  EXPECT_EQ(testing::internal::GetCapturedStdout(), "shown\n");
}

// A command whose standard output is its result (--json) sends the log to stderr.
TEST(Log, WithStdoutKeptForResultsMessagesGoToStderr) {
  dtrain::log::configure(0, /*quiet=*/false);
  dtrain::log::keep_stdout_for_results(true);
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  dtrain::log::info("job line");
  dtrain::log::detail("detail line");
  dtrain::log::every("every line");
  const std::string out = testing::internal::GetCapturedStdout();
  const std::string err = testing::internal::GetCapturedStderr();
  dtrain::log::keep_stdout_for_results(false);
  EXPECT_EQ(out, "");
  EXPECT_EQ(err, "job line\ndetail line\n[rank 0] every line\n");
}

}  // namespace
