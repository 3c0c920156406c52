// src/telemetry/report_history.h: a resumed run's report takes the earlier processes' records
// from metrics.jsonl up to its resume step, leaving out the records that a later resume trained
// again, for each resume in the file, and passes over a line cut off mid-write.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "telemetry/report_history.h"
#include "test_support.h"

namespace {

using dtrain::detail::add_earlier_records;
using dtrain::detail::ReportSeries;

std::string train(int64_t step, double loss) {
  return "{\"type\": \"train\", \"time\": 1.0, \"step\": " + std::to_string(step) +
         ", \"epoch\": 1, \"loss\": " + std::to_string(loss) +
         ", \"samples_per_s\": 500, \"elapsed_s\": 2.5, \"window_data_s\": 0.25, "
         "\"window_compute_s\": 1.5, \"window_comm_s\": 0, \"window_optimizer_s\": 0.125}\n";
}

std::string resume(int64_t step) {
  return "{\"type\": \"resume\", \"time\": 2.0, \"step\": " + std::to_string(step) +
         ", \"checkpoint\": \"c\", \"world\": 2}\n";
}

std::vector<int64_t> steps(const ReportSeries& s) {
  std::vector<int64_t> out;
  for (const auto& p : s.points()) out.push_back(p.step);
  return out;
}

TEST(ReportHistory, EachResumeDropsTheRecordsTrainedAgainAfterIt) {
  dtrain::test::TempDir dir;
  const std::string path = dir.file("metrics.jsonl");
  std::ofstream(path)
      << train(10, 1.0) << train(20, 0.9) << train(30, 0.8)
      << "{\"type\": \"eval\", \"time\": 1, \"step\": 30, \"epoch\": 1, \"test_loss\": 0.7, "
         "\"test_accuracy\": 0.6, \"test_count\": 100}\n"
      << train(40, 0.75)  // trained again after the resume at 30
      << "{\"type\": \"summary\", \"time\": 1, \"step\": 40, \"steps\": 40}\n"
      << resume(30) << train(40, 0.7) << train(50, 0.6) << train(60, 0.5)  // 60: again, at 50
      << "{\"type\": \"train\", \"step\": 6"                               // cut off mid-write
      << "\n"
      << resume(50) << train(60, 0.45) << train(70, 0.4);
  ReportSeries series;
  EXPECT_EQ(add_earlier_records(path, 70, /*classification=*/true, series), 1);
  EXPECT_EQ(steps(series), (std::vector<int64_t>{10, 20, 30, 40, 50, 60, 70}));
  const auto points = series.points();
  EXPECT_DOUBLE_EQ(points[3].loss, 0.7);   // the step-40 record after the resume
  EXPECT_DOUBLE_EQ(points[5].loss, 0.45);  // the step-60 record after the second resume
  EXPECT_DOUBLE_EQ(points[0].phases.compute, 1.5);
  EXPECT_DOUBLE_EQ(points[0].phases.optimizer, 0.125);
  EXPECT_DOUBLE_EQ(points[0].time, 2.5);
  ASSERT_EQ(series.evals().size(), 1u);
  EXPECT_DOUBLE_EQ(*series.evals()[0].accuracy, 0.6);

  // This run resumed from step 50: the records past it are trained again now.
  ReportSeries at50;
  add_earlier_records(path, 50, /*classification=*/false, at50);
  EXPECT_EQ(steps(at50), (std::vector<int64_t>{10, 20, 30, 40, 50}));
  EXPECT_FALSE(at50.evals()[0].accuracy.has_value());
}

TEST(ReportHistory, AMissingFileAddsNothing) {
  dtrain::test::TempDir dir;
  ReportSeries series;
  EXPECT_EQ(add_earlier_records(dir.file("metrics.jsonl"), 100, true, series), 0);
  EXPECT_TRUE(series.points().empty());
}

}  // namespace
