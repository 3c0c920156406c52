// The loader on a GPU (Note [batches on the device]): workers copy a batch to the device only when
// it is the one after the batch in use, so at most two of its batches hold device memory however
// many wait in pinned host memory, and batches still come out in plan order with their values.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "cuda/memory.h"
#include "dtrain/data/dataset.h"
#include "dtrain/data/loader.h"
#include "gpu_support.h"

namespace dtrain::test {
namespace {

TEST(GpuLoader, AtMostTwoBatchesOnTheDevice) {
  constexpr int64_t kRow = 1 << 20;  // floats a sample: 4 MiB
  constexpr int64_t kBatches = 8, kBatch = 2;
  const at::Tensor x = at::arange(kBatches * kBatch, at::kFloat).reshape({-1, 1}).repeat({1, kRow});
  const at::Tensor y = at::arange(kBatches * kBatch, at::kLong);
  auto ds = std::make_shared<TensorDataset>(x, y, DataSpec{}, "rows");
  std::vector<std::vector<int64_t>> plan;
  for (int64_t b = 0; b < kBatches; ++b) plan.push_back({2 * b + 1, 2 * b});
  LoaderOptions o;
  o.workers = 4;
  o.prefetch = 4;
  o.pin_memory = true;
  o.device = kGpu;
  const int64_t batch_bytes = kBatch * kRow * 4;

  const int64_t base = detail::memory_stats(kGpu).allocated;
  Loader loader(ds, plan, o);
  auto on_device = [&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(400));  // the workers fill every slot
    return detail::memory_stats(kGpu).allocated - base;
  };
  // Nothing handed out yet: only the first batch is on the device; the other three wait pinned.
  EXPECT_LE(on_device(), batch_bytes + (1 << 20));
  for (int64_t b = 0; b < kBatches; ++b) {
    auto batch = loader.next();
    ASSERT_TRUE(batch.has_value());
    ASSERT_TRUE(batch->inputs.is_cuda());
    // The batch in use and the next one, never more.
    EXPECT_LE(on_device(), 2 * batch_bytes + (1 << 20)) << "batch " << b;
    const at::Tensor rows = batch->inputs.select(1, kRow - 1).cpu();
    EXPECT_TRUE(rows.equal(at::tensor({2.f * b + 1, 2.f * b}))) << "batch " << b;
    EXPECT_TRUE(batch->targets.cpu().equal(at::tensor({2 * b + 1, 2 * b}, at::kLong))) << b;
  }
  EXPECT_FALSE(loader.next().has_value());
}

}  // namespace
}  // namespace dtrain::test
