// Loader: plan order whatever order workers finish in, the prefetch bound, worker exceptions
// rethrown by next(), a destructor that returns promptly, and synchronous loading (workers = 0).
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "dtrain/data/dataset.h"
#include "dtrain/data/loader.h"
#include "dtrain/error.h"

namespace {

struct BoomError : std::runtime_error {
  explicit BoomError(int64_t i) : std::runtime_error("boom at " + std::to_string(i)), index(i) {}
  int64_t index;
};

// Sample i is the value i (inputs (N, 1) float, targets (N,) int64). get() sleeps a random
// 0..max_delay_ms, counts batches loaded but not yet taken back by the test, and throws
// BoomError when asked for `fail_index`.
class SlowDataset : public dtrain::Dataset {
 public:
  SlowDataset(int64_t size, int max_delay_ms, int64_t fail_index = -1)
      : size_(size), max_delay_ms_(max_delay_ms), fail_index_(fail_index) {}
  int64_t size() const override { return size_; }
  dtrain::Batch get(const std::vector<int64_t>& indices) const override {
    if (max_delay_ms_ > 0) {
      thread_local std::mt19937 rng(std::hash<std::thread::id>()(std::this_thread::get_id()));
      std::uniform_int_distribution<int> delay(0, max_delay_ms_);
      std::this_thread::sleep_for(std::chrono::milliseconds(delay(rng)));
    }
    ++calls;
    for (int64_t i : indices) {
      if (i == fail_index_) throw BoomError(i);
    }
    at::Tensor t = at::empty({static_cast<int64_t>(indices.size())}, at::kLong);
    for (size_t k = 0; k < indices.size(); ++k) t.data_ptr<int64_t>()[k] = indices[k];
    const int64_t now = ++outstanding;
    int64_t seen = max_outstanding.load();
    while (now > seen && !max_outstanding.compare_exchange_weak(seen, now)) {
    }
    return dtrain::Batch{t.to(at::kFloat).unsqueeze(1), t};
  }
  dtrain::DataSpec spec() const override { return {}; }
  std::string describe() const override { return "slow test dataset"; }

  mutable std::atomic<int64_t> outstanding{0}, max_outstanding{0}, calls{0};

 private:
  int64_t size_;
  int max_delay_ms_;
  int64_t fail_index_;
};

// Batches of 1..4 consecutive indices covering [0, size).
std::vector<std::vector<int64_t>> make_plan(int64_t size) {
  std::vector<std::vector<int64_t>> plan;
  int64_t i = 0, len = 1;
  while (i < size) {
    std::vector<int64_t> b;
    for (int64_t k = 0; k < len && i < size; ++k) b.push_back(i++);
    plan.push_back(b);
    len = len % 4 + 1;
  }
  return plan;
}

std::vector<int64_t> as_vector(const at::Tensor& t) {
  at::Tensor c = t.contiguous();
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

dtrain::LoaderOptions options(int64_t workers, int64_t prefetch) {
  dtrain::LoaderOptions o;
  o.workers = workers;
  o.prefetch = prefetch;
  o.pin_memory = true;  // ignored on the CPU device
  return o;
}

TEST(Loader, KeepsPlanOrderWithRandomDelays) {
  for (int64_t workers : {0, 1, 3, 8}) {
    SCOPED_TRACE("workers " + std::to_string(workers));
    auto ds = std::make_shared<SlowDataset>(120, 4);
    const auto plan = make_plan(120);
    dtrain::Loader loader(ds, plan, options(workers, 3));
    EXPECT_EQ(loader.size(), static_cast<int64_t>(plan.size()));
    for (size_t i = 0; i < plan.size(); ++i) {
      auto b = loader.next();
      ASSERT_TRUE(b.has_value()) << "batch " << i;
      ds->outstanding--;
      EXPECT_EQ(as_vector(b->targets), plan[i]) << "batch " << i;
      EXPECT_EQ(b->inputs.sizes().vec(),
                (std::vector<int64_t>{static_cast<int64_t>(plan[i].size()), 1}));
      EXPECT_TRUE(b->inputs.device().is_cpu());
    }
    EXPECT_FALSE(loader.next().has_value());
    EXPECT_FALSE(loader.next().has_value());
    EXPECT_EQ(ds->calls.load(), static_cast<int64_t>(plan.size()));
    EXPECT_GE(loader.wait_seconds(), 0.0);
  }
}

TEST(Loader, PrefetchBoundsBatchesInMemory) {
  const int64_t workers = 4, prefetch = 2;
  auto ds = std::make_shared<SlowDataset>(200, 2);
  const auto plan = make_plan(200);
  dtrain::Loader loader(ds, plan, options(workers, prefetch));
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> pause(0, 6);
  int64_t n = 0;
  while (auto b = loader.next()) {
    ds->outstanding--;  // the test holds no batch from here on
    ++n;
    // A slow consumer lets the workers run ahead as far as the loader allows.
    std::this_thread::sleep_for(std::chrono::milliseconds(pause(rng)));
  }
  EXPECT_EQ(n, static_cast<int64_t>(plan.size()));
  // Loaded-but-unreturned batches never exceed prefetch; the test's own counter may see one
  // more, because a worker can start on the next index before the test decrements.
  EXPECT_LE(ds->max_outstanding.load(), prefetch + 1);
  EXPECT_LE(ds->max_outstanding.load(), prefetch + workers);
  EXPECT_GE(ds->max_outstanding.load(), 1);
}

TEST(Loader, WorkerExceptionIsRethrownByNextForThatBatch) {
  for (int64_t workers : {0, 2, 4}) {
    SCOPED_TRACE("workers " + std::to_string(workers));
    const auto plan = make_plan(40);
    const size_t bad = 5;
    auto ds = std::make_shared<SlowDataset>(40, 2, plan[bad].front());
    dtrain::Loader loader(ds, plan, options(workers, 3));
    for (size_t i = 0; i < bad; ++i) {
      auto b = loader.next();
      ASSERT_TRUE(b.has_value());
      EXPECT_EQ(as_vector(b->targets), plan[i]);
    }
    try {
      loader.next();
      ADD_FAILURE() << "next() did not rethrow the dataset's exception";
    } catch (const BoomError& e) {
      EXPECT_EQ(e.index, plan[bad].front());
    } catch (const std::exception& e) {
      ADD_FAILURE() << "next() threw a different exception: " << e.what();
    }
    // The loader goes on with the rest of the plan.
    for (size_t i = bad + 1; i < plan.size(); ++i) {
      auto b = loader.next();
      ASSERT_TRUE(b.has_value());
      EXPECT_EQ(as_vector(b->targets), plan[i]);
    }
    EXPECT_FALSE(loader.next().has_value());
  }
}

TEST(Loader, DestructorWithUnfinishedPlanReturnsPromptly) {
  auto ds = std::make_shared<SlowDataset>(4000, 20);
  const auto plan = make_plan(4000);
  for (int taken : {0, 2}) {
    const auto start = std::chrono::steady_clock::now();
    {
      dtrain::Loader loader(ds, plan, options(3, 4));
      for (int i = 0; i < taken; ++i) ASSERT_TRUE(loader.next().has_value());
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    // At most one in-flight load (<= 20 ms) per worker remains when the destructor runs.
    EXPECT_LT(seconds, 2.0) << "taken " << taken;
  }
  // The loader stopped instead of loading the whole plan.
  EXPECT_LT(ds->calls.load(), 100);
}

TEST(Loader, SynchronousLoadingCountsWaitTime) {
  auto ds = std::make_shared<SlowDataset>(10, 0);
  std::vector<std::vector<int64_t>> plan = {{3, 1}, {9}, {}, {0, 2, 4}};
  dtrain::Loader loader(ds, plan, options(0, 1));
  for (const auto& expected : plan) {
    auto b = loader.next();
    ASSERT_TRUE(b.has_value());
    EXPECT_EQ(as_vector(b->targets), expected);
    EXPECT_EQ(b->size(), static_cast<int64_t>(expected.size()));
  }
  EXPECT_FALSE(loader.next().has_value());

  auto slow = std::make_shared<SlowDataset>(10, 0);
  dtrain::Loader empty(slow, {}, options(2, 2));
  EXPECT_FALSE(empty.next().has_value());
}

TEST(Loader, WaitSecondsMeasuresStalls) {
  // Every get() takes >= 0 ms and up to 10 ms; with one worker and a consumer that never
  // pauses, next() must wait for most batches.
  auto ds = std::make_shared<SlowDataset>(30, 10);
  dtrain::Loader loader(ds, make_plan(30), options(1, 2));
  const auto start = std::chrono::steady_clock::now();
  while (loader.next()) {
  }
  const double total =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GT(loader.wait_seconds(), 0.0);
  EXPECT_LE(loader.wait_seconds(), total + 1e-6);
}

TEST(Loader, InvalidOptionsAreErrors) {
  auto ds = std::make_shared<SlowDataset>(10, 0);
  EXPECT_THROW(dtrain::Loader(ds, make_plan(10), options(2, 0)), dtrain::Error);
  EXPECT_THROW(dtrain::Loader(ds, make_plan(10), options(-1, 2)), dtrain::Error);
  EXPECT_THROW(dtrain::Loader(nullptr, make_plan(10), options(2, 2)), dtrain::Error);
}

TEST(Loader, TensorDatasetBatchesThroughLoader) {
  at::Tensor x = at::arange(20, at::kFloat).reshape({10, 2});  // (10, 2)
  at::Tensor y = at::arange(10, at::kLong);                    // (10,)
  auto ds = std::make_shared<dtrain::TensorDataset>(x, y, dtrain::DataSpec{}, "arange");
  dtrain::Loader loader(ds, {{9, 0}, {4}}, options(2, 2));
  auto b = loader.next();
  ASSERT_TRUE(b.has_value());
  EXPECT_TRUE(b->inputs.equal(at::tensor({18.f, 19.f, 0.f, 1.f}).reshape({2, 2})));
  EXPECT_EQ(as_vector(b->targets), (std::vector<int64_t>{9, 0}));
  b = loader.next();
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(as_vector(b->targets), (std::vector<int64_t>{4}));
  // An index out of range is an error from the dataset, rethrown by next().
  dtrain::Loader bad(ds, {{10}}, options(1, 1));
  EXPECT_THROW(bad.next(), dtrain::Error);
}

}  // namespace
