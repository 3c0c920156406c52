// What `dtrain bench` makes of a sweep: the recommended setting, the table rank 0 prints, and
// the same rows as CSV and JSON (PREFIX.csv, PREFIX.json), never written over an existing file
// unless forced.
#pragma once

#include <string>
#include <vector>

#include "bench/sweep.h"

namespace dtrain::bench {

constexpr double kHeadroom = 0.10;   // share of the GPU's memory a recommended size leaves free
constexpr double kTolerance = 0.03;  // "as fast": within this share of the fastest

struct Recommendation {
  int row = -1;              // the recommended row; -1: none fits
  int fastest = -1;          // the fastest row among those that fit with the headroom
  std::vector<int> crowded;  // rows that fit but leave less than the headroom free
  std::string text;          // the sentence under the table
};

// Among the rows that fit and leave `headroom` of the GPU's memory free (every row that fits on
// CPU, where memory is not measured), the fastest; of those within `tolerance` of it the one
// with the smallest micro-batch, then the fewest loader workers (diminishing returns: a bigger
// size that is hardly faster only costs memory).
Recommendation recommend(const std::vector<Row>& rows, double headroom = kHeadroom,
                         double tolerance = kTolerance);

// When the recommended row's global batch is not the config's train.global_batch (a micro-batch
// sweep sets it to micro-batch x ranks, or train.global_batch is swept): one sentence saying
// "train.global_batch 128 -> 64", that this changes the training recipe (scale train.lr with it,
// the linear scaling rule's value given) and how to bench at the config's batch instead; "" when
// it is the config's or nothing is recommended. table_text prints it under the recommendation,
// the JSON has it as "global_batch_change".
std::string global_batch_change(const SweepResult& result, const Recommendation& rec);

// The table: a header saying what was run and how the global batch was chosen, one line per
// setting, then the recommendation.
std::string table_text(const SweepResult& result, const Recommendation& rec);
std::string csv_text(const SweepResult& result, const Recommendation& rec);
// `forecast`: --forecast's JSON object (bench/scaling.h), added as "forecast"; "" without.
std::string json_text(const SweepResult& result, const Recommendation& rec,
                      const std::string& forecast = "");

// PREFIX.csv and PREFIX.json.
std::vector<std::string> output_paths(const std::string& prefix);
// An Error naming --out when the folder of `prefix` does not exist, or naming the file when one
// of the outputs exists and `force` is off.
void check_outputs(const std::string& prefix, bool force);
// Checks again, then writes both files (each atomically; a failed write is an Error naming it).
void write_outputs(const std::string& prefix, bool force, const SweepResult& result,
                   const Recommendation& rec, const std::string& forecast = "");

}  // namespace dtrain::bench
