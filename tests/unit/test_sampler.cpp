// DistributedSampler against PyTorch itself: the reference vectors from the notes, then a grid of
// cases computed by torch.utils.data.DistributedSampler in DTRAIN_REF_PYTHON.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "dtrain/data/sampler.h"
#include "dtrain/error.h"
#include "test_support.h"

namespace {

using dtrain::test::python_failure;
using dtrain::test::run_python;
using dtrain::test::TempDir;

std::vector<int64_t> sampler_indices(int64_t size, int world, int rank, bool shuffle, uint64_t seed,
                                     bool drop_last, int64_t epoch) {
  dtrain::DistributedSampler s(size, world, rank, shuffle, seed, drop_last);
  s.set_epoch(epoch);
  auto out = s.indices();
  EXPECT_EQ(static_cast<int64_t>(out.size()), s.num_samples());
  return out;
}

TEST(Sampler, ReferenceVectorsFromPyTorch) {
  using V = std::vector<int64_t>;
  EXPECT_EQ(sampler_indices(10, 2, 0, true, 0, false, 0), (V{4, 7, 3, 0, 6}));
  EXPECT_EQ(sampler_indices(10, 2, 0, true, 0, false, 1), (V{5, 1, 0, 9, 7}));
  EXPECT_EQ(sampler_indices(10, 2, 1, true, 0, false, 0), (V{1, 5, 9, 8, 2}));
  EXPECT_EQ(sampler_indices(10, 2, 1, true, 0, false, 1), (V{6, 2, 8, 3, 4}));
}

TEST(Sampler, PaddingAndDropLastWithoutShuffle) {
  using V = std::vector<int64_t>;
  // 7 items over 3 ranks: padded to 9 with 0, 1.
  EXPECT_EQ(sampler_indices(7, 3, 0, false, 0, false, 0), (V{0, 3, 6}));
  EXPECT_EQ(sampler_indices(7, 3, 1, false, 0, false, 0), (V{1, 4, 0}));
  EXPECT_EQ(sampler_indices(7, 3, 2, false, 0, false, 0), (V{2, 5, 1}));
  // drop_last cuts to 6.
  EXPECT_EQ(sampler_indices(7, 3, 2, false, 0, true, 0), (V{2, 5}));
  // Padding longer than the data repeats the whole list: 2 items over 5 ranks -> 0 1 0 1 0.
  EXPECT_EQ(sampler_indices(2, 5, 4, false, 0, false, 0), (V{0}));
  EXPECT_EQ(sampler_indices(2, 5, 3, false, 0, false, 0), (V{1}));
  EXPECT_TRUE(sampler_indices(0, 2, 1, true, 0, false, 0).empty());
}

TEST(Sampler, InvalidArgumentsAreErrors) {
  EXPECT_THROW(dtrain::DistributedSampler(10, 0, 0), dtrain::Error);
  EXPECT_THROW(dtrain::DistributedSampler(10, 2, 2), dtrain::Error);
  EXPECT_THROW(dtrain::DistributedSampler(10, 2, -1), dtrain::Error);
  EXPECT_THROW(dtrain::DistributedSampler(-1, 2, 0), dtrain::Error);
  EXPECT_THROW(dtrain::eval_shard(10, 2, 2), dtrain::Error);
}

TEST(Sampler, EvalShardCoversEveryIndexOnce) {
  for (int64_t size : {0, 1, 7, 10, 13}) {
    for (int world : {1, 2, 3, 4, 16}) {
      std::vector<int> seen(static_cast<size_t>(size), 0);
      for (int rank = 0; rank < world; ++rank) {
        const auto shard = dtrain::eval_shard(size, world, rank);
        for (size_t k = 0; k < shard.size(); ++k) {
          EXPECT_EQ(shard[k], rank + static_cast<int64_t>(k) * world);
          ASSERT_GE(shard[k], 0);
          ASSERT_LT(shard[k], size);
          ++seen[static_cast<size_t>(shard[k])];
        }
      }
      for (int64_t i = 0; i < size; ++i) {
        EXPECT_EQ(seen[static_cast<size_t>(i)], 1)
            << "size " << size << " world " << world << " index " << i;
      }
    }
  }
}

// Every case the Python script prints: "size world rank shuffle drop_last seed epoch : i j k".
const char* kReferenceScript = R"PY(
import sys
try:
    import torch
    from torch.utils.data import DistributedSampler
except Exception as e:
    print("IMPORT-FAILED", e)
    sys.exit(3)
for size in (7, 10, 13, 100):
    for world in (1, 2, 3, 4):
        for shuffle in (0, 1):
            for drop_last in (0, 1):
                for seed in (0, 5):
                    for rank in range(world):
                        s = DistributedSampler(list(range(size)), num_replicas=world, rank=rank,
                                               shuffle=bool(shuffle), seed=seed,
                                               drop_last=bool(drop_last))
                        for epoch in (0, 1, 2):
                            s.set_epoch(epoch)
                            print(size, world, rank, shuffle, drop_last, seed, epoch, ":",
                                  " ".join(str(i) for i in s))
print("DONE")
)PY";

TEST(Sampler, MatchesPythonDistributedSampler) {
  TempDir dir;
  const auto run = run_python(dir, kReferenceScript, "");
  ASSERT_TRUE(run.status == 0 && run.output.find("DONE") != std::string::npos)
      << python_failure("PyTorch's DistributedSampler", run);

  std::istringstream lines(run.output);
  std::string line;
  int cases = 0;
  while (std::getline(lines, line)) {
    if (line == "DONE") break;
    std::istringstream in(line);
    int64_t size, epoch;
    int world, rank, shuffle, drop_last;
    uint64_t seed;
    std::string colon;
    ASSERT_TRUE(in >> size >> world >> rank >> shuffle >> drop_last >> seed >> epoch >> colon &&
                colon == ":")
        << "unexpected line from the reference script: " << line;
    std::vector<int64_t> expected;
    for (int64_t v; in >> v;) expected.push_back(v);
    EXPECT_EQ(sampler_indices(size, world, rank, shuffle != 0, seed, drop_last != 0, epoch),
              expected)
        << "case: " << line.substr(0, line.find(':'));
    ++cases;
  }
  // sizes 4 x (1 + 2 + 3 + 4) ranks x 2 shuffle x 2 drop_last x 2 seeds x 3 epochs
  EXPECT_EQ(cases, 4 * 10 * 2 * 2 * 2 * 3);
}

}  // namespace
