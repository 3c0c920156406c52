// make_datasets: synthetic tasks are deterministic per seed and shaped as DataSpec says; idx
// splits load from data.path with the train split's statistics; errors name the key or file.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <chrono>
#include <cmath>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "data/pixels.h"
#include "dtrain/config.h"
#include "dtrain/data/dataset.h"
#include "dtrain/data/idx.h"
#include "dtrain/error.h"
#include "test_support.h"

namespace {

using dtrain::test::is_directory;
using dtrain::test::message_of;
using dtrain::test::TempDir;
using dtrain::test::write_gzip;

dtrain::DataConfig synthetic(const std::string& task, std::vector<int64_t> shape = {},
                             int64_t classes = 4, int64_t size = 256, int64_t test_size = 64) {
  dtrain::DataConfig cfg;
  cfg.format = dtrain::DataFormat::kSynthetic;
  cfg.synthetic_task = dtrain::test::task_of(task);
  cfg.synthetic_shape = std::move(shape);
  cfg.synthetic_size = size;
  cfg.synthetic_test_size = test_size;
  cfg.synthetic_features = 5;
  cfg.synthetic_classes = classes;
  cfg.synthetic_noise = 0.01;
  return cfg;
}

const dtrain::TensorDataset& tensors(const std::shared_ptr<dtrain::Dataset>& ds) {
  auto* t = dynamic_cast<const dtrain::TensorDataset*>(ds.get());
  if (t == nullptr) throw std::runtime_error("not a TensorDataset");
  return *t;
}

TEST(Datasets, SyntheticRegressionIsDeterministicAndShaped) {
  const auto cfg = synthetic("regression");
  auto a = dtrain::make_datasets(cfg, 7);
  auto b = dtrain::make_datasets(cfg, 7);
  auto c = dtrain::make_datasets(cfg, 8);
  ASSERT_TRUE(a.train && a.test);
  EXPECT_EQ(a.train->size(), 256);
  EXPECT_EQ(a.test->size(), 64);
  const auto& tr = tensors(a.train);
  EXPECT_EQ(tr.inputs().sizes().vec(), (std::vector<int64_t>{256, 5}));
  EXPECT_EQ(tr.targets().sizes().vec(), (std::vector<int64_t>{256, 1}));
  EXPECT_EQ(tr.inputs().scalar_type(), at::kFloat);
  EXPECT_EQ(tr.targets().scalar_type(), at::kFloat);
  EXPECT_EQ(tensors(a.test).inputs().sizes().vec(), (std::vector<int64_t>{64, 5}));
  const auto spec = a.train->spec();
  EXPECT_EQ(spec.input_shape, (std::vector<int64_t>{5}));
  EXPECT_EQ(spec.target_dim, 1);
  EXPECT_EQ(spec.num_classes, 0);

  EXPECT_TRUE(tr.inputs().equal(tensors(b.train).inputs()));
  EXPECT_TRUE(tr.targets().equal(tensors(b.train).targets()));
  EXPECT_TRUE(tensors(a.test).targets().equal(tensors(b.test).targets()));
  EXPECT_FALSE(tr.inputs().equal(tensors(c.train).inputs()));
  // Train and test are different samples.
  EXPECT_FALSE(tr.inputs().narrow(0, 0, 64).equal(tensors(a.test).inputs()));

  // One linear map (w, b) explains both splits up to the noise: fit it on train by least
  // squares, then predict test.
  auto augment = [](const at::Tensor& x) {
    return at::cat({x.to(at::kDouble), at::ones({x.size(0), 1}, at::kDouble)}, 1);
  };
  const at::Tensor xa = augment(tr.inputs());
  const at::Tensor ya = tr.targets().to(at::kDouble);
  const at::Tensor coef = at::linalg_solve(xa.t().matmul(xa), xa.t().matmul(ya));  // (F+1, 1)
  const at::Tensor train_rmse = (xa.matmul(coef) - ya).pow(2).mean().sqrt();
  const at::Tensor xt = augment(tensors(a.test).inputs());
  const at::Tensor yt = tensors(a.test).targets().to(at::kDouble);
  const at::Tensor test_rmse = (xt.matmul(coef) - yt).pow(2).mean().sqrt();
  EXPECT_LT(train_rmse.item<double>(), 0.02);
  EXPECT_GT(train_rmse.item<double>(), 0.005);  // the noise is there
  EXPECT_LT(test_rmse.item<double>(), 0.02);
  EXPECT_GT(yt.std().item<double>(), 0.5);  // the targets are not trivial
}

TEST(Datasets, SyntheticClassification) {
  const auto cfg = synthetic("classification");
  auto a = dtrain::make_datasets(cfg, 3);
  auto b = dtrain::make_datasets(cfg, 3);
  const auto& t = tensors(a.train);
  EXPECT_EQ(t.inputs().sizes().vec(), (std::vector<int64_t>{256, 5}));
  EXPECT_EQ(t.targets().sizes().vec(), (std::vector<int64_t>{256}));
  EXPECT_EQ(t.targets().scalar_type(), at::kLong);
  EXPECT_GE(t.targets().min().item<int64_t>(), 0);
  EXPECT_LT(t.targets().max().item<int64_t>(), 4);
  EXPECT_GT((at::bincount(t.targets()) > 0).sum().item<int64_t>(), 1);  // several classes occur
  EXPECT_EQ(a.train->spec().num_classes, 4);
  EXPECT_EQ(a.train->spec().target_dim, 0);
  EXPECT_TRUE(t.targets().equal(tensors(b.train).targets()));
  EXPECT_EQ(a.test->size(), 64);

  auto bad = cfg;
  bad.synthetic_task = dtrain::SyntheticTask::kTokens;
  const std::string msg = message_of([&] { dtrain::make_datasets(bad, 0); });
  EXPECT_NE(msg.find("data.synthetic_task"), std::string::npos) << msg;
  // An unknown task stops at the parser, naming the key (past it, a task is an enum).
  EXPECT_NE(message_of([] {
              dtrain::Config::from_string("data: {synthetic_task: nonsense}\n");
            }).find("data.synthetic_task"),
            std::string::npos);
  auto no_test = cfg;
  no_test.synthetic_test_size = 0;
  EXPECT_EQ(dtrain::make_datasets(no_test, 0).test, nullptr);
}

TEST(Datasets, UnknownFormatNamesTheKey) {
  const std::string msg =
      message_of([] { dtrain::Config::from_string("data: {format: parquet}\n", "d.yaml"); });
  EXPECT_NE(msg.find("data.format"), std::string::npos) << msg;
  EXPECT_NE(msg.find("parquet"), std::string::npos) << msg;
}

TEST(Datasets, IdxMissingFileNamesPathAndKey) {
  dtrain::DataConfig cfg;
  cfg.format = dtrain::DataFormat::kIdx;
  cfg.path = "/nonexistent/dtrain-data";
  const std::string msg = message_of([&] { dtrain::make_datasets(cfg, 0); });
  EXPECT_NE(msg.find("/nonexistent/dtrain-data/train-images-idx3-ubyte.gz"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("data.train_images"), std::string::npos) << msg;
}

std::vector<unsigned char> idx(std::vector<unsigned char> header_dims,
                               const std::vector<unsigned char>& data) {
  header_dims.insert(header_dims.end(), data.begin(), data.end());
  return header_dims;
}

// data.normalize's statistics of IDX images are exact (from the stored bytes) and so the same
// on any number of threads: `dtrain eval` on one rank recomputes what a run on several wrote.
TEST(Datasets, IdxStatisticsAreExactOnAnyThreadCount) {
  TempDir dir;
  const int64_t n = 2000, side = 28;
  std::vector<unsigned char> px(static_cast<size_t>(n * side * side));
  uint32_t r = 12345;
  for (auto& p : px)
    r = r * 1664525u + 1013904223u, p = static_cast<unsigned char>((r >> 24) % 200 + 40);
  write_gzip(dir.file("img.gz"), idx({0, 0, 8, 3, 0, 0, 0x07, 0xd0, 0, 0, 0, 28, 0, 0, 0, 28}, px));
  std::vector<unsigned char> labels(static_cast<size_t>(n), 1);
  write_gzip(dir.file("lab.gz"), idx({0, 0, 8, 1, 0, 0, 0x07, 0xd0}, labels));
  dtrain::DataConfig cfg;
  cfg.format = dtrain::DataFormat::kIdx;
  cfg.path = dir.path();
  cfg.train_images = "img.gz";
  cfg.train_labels = "lab.gz";
  cfg.test_images = cfg.test_labels = "";
  cfg.normalize = true;
  // The formula in long double, over the bytes in file order.
  long double sum = 0, sq = 0;
  for (unsigned char p : px) sum += p / 255.0L;
  const long double mean = sum / px.size();
  for (unsigned char p : px) sq += (p / 255.0L - mean) * (p / 255.0L - mean);
  const double sd = static_cast<double>(std::sqrt(sq / px.size()));
  const int threads = at::get_num_threads();
  std::vector<double> means, sds;
  for (int t : {1, 2, 4}) {
    at::set_num_threads(t);
    const auto spec = dtrain::make_datasets(cfg, 0).train->spec();
    ASSERT_EQ(spec.recipe.mean.size(), 1u);
    means.push_back(spec.recipe.mean[0]);
    sds.push_back(spec.recipe.std[0]);
  }
  at::set_num_threads(threads);
  EXPECT_NEAR(means[0], static_cast<double>(mean), 1e-15);
  EXPECT_NEAR(sds[0], sd, 1e-15);
  for (size_t i = 1; i < means.size(); ++i) {
    EXPECT_EQ(means[i], means[0]);
    EXPECT_EQ(sds[i], sds[0]);
  }
}

TEST(Datasets, IdxSplitsUseTrainStatistics) {
  TempDir dir;
  // train: 4 images 1x2, test: 2 images 1x2 (dims: N, 1, 2)
  const std::vector<unsigned char> train_px = {0, 255, 51, 102, 153, 204, 0, 0};
  const std::vector<unsigned char> test_px = {255, 0, 51, 51};
  write_gzip(dir.file("tr-img.gz"),
             idx({0, 0, 8, 3, 0, 0, 0, 4, 0, 0, 0, 1, 0, 0, 0, 2}, train_px));
  write_gzip(dir.file("tr-lab.gz"), idx({0, 0, 8, 1, 0, 0, 0, 4}, {0, 1, 2, 3}));
  write_gzip(dir.file("te-img.gz"), idx({0, 0, 8, 3, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 2}, test_px));
  write_gzip(dir.file("te-lab.gz"), idx({0, 0, 8, 1, 0, 0, 0, 2}, {3, 3}));

  dtrain::DataConfig cfg;
  cfg.format = dtrain::DataFormat::kIdx;
  cfg.path = dir.path();
  cfg.train_images = "tr-img.gz";
  cfg.train_labels = "tr-lab.gz";
  cfg.test_images = dir.file("te-img.gz");  // absolute names are used as is
  cfg.test_labels = "te-lab.gz";
  cfg.normalize = true;
  auto splits = dtrain::make_datasets(cfg, 0);
  ASSERT_TRUE(splits.train && splits.test);
  const auto& train = tensors(splits.train);
  const auto& test = tensors(splits.test);
  EXPECT_EQ(train.inputs().sizes().vec(), (std::vector<int64_t>{4, 1, 1, 2}));
  EXPECT_EQ(splits.train->spec().input_shape, (std::vector<int64_t>{1, 1, 2}));
  // data.num_classes 0: the classes come from the train labels, 0..3 -> 3 + 1.
  EXPECT_EQ(splits.train->spec().num_classes, 4);
  EXPECT_EQ(splits.test->spec().num_classes, 4);

  // Expected statistics from the formula (population std of pixel / 255).
  double mean = 0, sq = 0;
  for (unsigned char p : train_px) {
    mean += p / 255.0;
    sq += (p / 255.0) * (p / 255.0);
  }
  mean /= train_px.size();
  const double sd = std::sqrt(sq / train_px.size() - mean * mean);
  EXPECT_NEAR(train.inputs().mean().item<double>(), 0.0, 1e-6);
  EXPECT_NEAR(train.inputs().flatten()[1].item<double>(), (1.0 - mean) / sd, 1e-5);
  EXPECT_NEAR(test.inputs().flatten()[0].item<double>(), (1.0 - mean) / sd, 1e-5);
  EXPECT_NEAR(test.inputs().flatten()[2].item<double>(), (0.2 - mean) / sd, 1e-5);
  EXPECT_EQ(test.targets()[0].item<int64_t>(), 3);

  // Without normalization the pixels stay in [0, 1].
  cfg.normalize = false;
  auto raw = dtrain::make_datasets(cfg, 0);
  EXPECT_FLOAT_EQ(tensors(raw.train).inputs().flatten()[1].item<float>(), 1.0f);

  // A missing test file names its key.
  cfg.test_labels = "nope.gz";
  const std::string msg = message_of([&] { dtrain::make_datasets(cfg, 0); });
  EXPECT_NE(msg.find("data.test_labels"), std::string::npos) << msg;
  EXPECT_NE(msg.find(dir.file("nope.gz")), std::string::npos) << msg;
}

TEST(Datasets, TensorDatasetGetValidatesIndices) {
  at::Tensor x = at::arange(12, at::kFloat).reshape({6, 2});
  at::Tensor y = at::arange(6, at::kLong);
  dtrain::TensorDataset ds(x, y, dtrain::DataSpec{}, "arange");
  auto b = ds.get({5, 0, 5});
  EXPECT_EQ(b.size(), 3);
  EXPECT_EQ(b.targets[0].item<int64_t>(), 5);
  EXPECT_EQ(b.inputs[1][1].item<float>(), 1.0f);
  EXPECT_EQ(ds.get({}).size(), 0);
  const std::string msg = message_of([&] { ds.get({1, 6}); });
  EXPECT_NE(msg.find("6"), std::string::npos) << msg;
  EXPECT_NE(msg.find("arange"), std::string::npos) << msg;
  EXPECT_THROW(ds.get({-1}), dtrain::Error);
  EXPECT_THROW(dtrain::TensorDataset(x, at::arange(5, at::kLong), {}, "bad"), dtrain::Error);
}

TEST(Datasets, RealFashionMnistIsStandardized) {
  dtrain::DataConfig cfg;  // defaults point at Debian's dataset-fashion-mnist
  ASSERT_TRUE(is_directory(cfg.path))
      << cfg.path << " is missing: install Debian's dataset-fashion-mnist package";
  auto splits = dtrain::make_datasets(cfg, 0);
  ASSERT_TRUE(splits.train && splits.test);
  EXPECT_EQ(splits.train->size(), 60000);
  EXPECT_EQ(splits.test->size(), 10000);
  const auto& train = tensors(splits.train);
  EXPECT_NEAR(train.inputs().mean().item<double>(), 0.0, 1e-3);
  EXPECT_NEAR(train.inputs().std().item<double>(), 1.0, 1e-3);
  // The test split uses the train statistics, so it is close to but not exactly standard.
  EXPECT_NEAR(tensors(splits.test).inputs().mean().item<double>(), 0.0, 0.05);
}

// ---- synthetic images and tokens, for the image and sequence models -----------------------

TEST(SyntheticTokens, NextTokenWindows) {
  const auto cfg = synthetic("tokens", {8}, 50, 64, 16);
  const auto a = dtrain::make_datasets(cfg, 3);
  const auto& t = tensors(a.train);
  EXPECT_EQ(t.inputs().sizes(), (std::vector<int64_t>{64, 8}));
  EXPECT_EQ(t.targets().sizes(), (std::vector<int64_t>{64, 8}));
  EXPECT_EQ(t.inputs().scalar_type(), at::kLong);
  EXPECT_EQ(t.targets().scalar_type(), at::kLong);
  // targets are the inputs shifted by one
  EXPECT_TRUE(t.targets().narrow(1, 0, 7).equal(t.inputs().narrow(1, 1, 7)));
  EXPECT_GE(t.inputs().min().item<int64_t>(), 0);
  EXPECT_LT(t.inputs().max().item<int64_t>(), 50);
  EXPECT_GE(t.targets().min().item<int64_t>(), 0);
  EXPECT_LT(t.targets().max().item<int64_t>(), 50);
  // ids spread over the vocabulary
  EXPECT_GT((at::bincount(t.inputs().reshape({-1})) > 0).sum().item<int64_t>(), 40);
  const auto spec = a.train->spec();
  EXPECT_EQ(spec.input_shape, (std::vector<int64_t>{8}));
  EXPECT_EQ(spec.num_classes, 50);
  EXPECT_EQ(spec.input_dtype, at::kLong);
  ASSERT_TRUE(a.test);
  EXPECT_EQ(a.test->size(), 16);
  // deterministic per seed; another seed gives other tokens
  const auto b = dtrain::make_datasets(cfg, 3);
  EXPECT_TRUE(t.inputs().equal(tensors(b.train).inputs()));
  EXPECT_TRUE(t.targets().equal(tensors(b.train).targets()));
  EXPECT_FALSE(t.inputs().equal(tensors(dtrain::make_datasets(cfg, 4).train).inputs()));
  EXPECT_FALSE(tensors(a.test).inputs().equal(t.inputs().narrow(0, 0, 16)));
}

TEST(SyntheticTokens, TenMillionTokensQuickly) {
  const auto cfg = synthetic("tokens", {1024}, 50304, 10000, 0);  // ~10M tokens
  const auto start = std::chrono::steady_clock::now();
  const auto a = dtrain::make_datasets(cfg, 0);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(a.train->size(), 10000);
  EXPECT_FALSE(a.test);
  EXPECT_LT(seconds, 15.0);
}

TEST(SyntheticTokens, ShapeIsRequired) {
  for (const auto& shape : {std::vector<int64_t>{}, std::vector<int64_t>{8, 8}}) {
    const std::string msg =
        message_of([&] { dtrain::make_datasets(synthetic("tokens", shape, 50, 8, 0), 0); });
    EXPECT_NE(msg.find("data.synthetic_shape"), std::string::npos) << msg;
  }
}

TEST(SyntheticImages, ShapesLabelsAndErrors) {
  const auto cfg = synthetic("images", {3, 8, 8}, 5, 256, 32);
  const auto a = dtrain::make_datasets(cfg, 1);
  const auto& t = tensors(a.train);
  EXPECT_EQ(t.inputs().sizes(), (std::vector<int64_t>{256, 3, 8, 8}));
  EXPECT_EQ(t.inputs().scalar_type(), at::kFloat);
  EXPECT_NEAR(t.inputs().mean().item<double>(), 0.0, 0.02);
  EXPECT_NEAR(t.inputs().std().item<double>(), 1.0, 0.02);
  EXPECT_EQ(t.targets().sizes(), (std::vector<int64_t>{256}));
  EXPECT_EQ(t.targets().scalar_type(), at::kLong);
  EXPECT_EQ(t.targets().min().item<int64_t>(), 0);
  EXPECT_EQ(t.targets().max().item<int64_t>(), 4);
  const auto spec = a.train->spec();
  EXPECT_EQ(spec.input_shape, (std::vector<int64_t>{3, 8, 8}));
  EXPECT_EQ(spec.num_classes, 5);
  EXPECT_EQ(spec.target_dim, 0);
  ASSERT_TRUE(a.test);
  EXPECT_EQ(a.test->size(), 32);
  EXPECT_TRUE(t.inputs().equal(tensors(dtrain::make_datasets(cfg, 1).train).inputs()));
  for (const auto& shape : {std::vector<int64_t>{}, std::vector<int64_t>{3, 8}}) {
    const std::string msg =
        message_of([&] { dtrain::make_datasets(synthetic("images", shape, 5, 8, 0), 0); });
    EXPECT_NE(msg.find("data.synthetic_shape"), std::string::npos) << msg;
  }
}

TEST(SyntheticImages, Uint8PixelsAreStandardizedOnTheDevice) {
  // uint8 0..255 in memory, (x / 255 - 1/2) * sqrt(12) for the model (Note [uint8 pixels]).
  auto cfg = synthetic("images", {3, 8, 8}, 5, 256, 0);
  cfg.synthetic_uint8 = true;
  const auto a = dtrain::make_datasets(cfg, 1);
  const auto& t = tensors(a.train);
  EXPECT_EQ(t.inputs().scalar_type(), at::kByte);
  EXPECT_EQ(t.inputs().min().item<int64_t>(), 0);
  EXPECT_EQ(t.inputs().max().item<int64_t>(), 255);
  const auto spec = a.train->spec();
  EXPECT_EQ(spec.input_dtype, at::kFloat);  // what the model receives
  ASSERT_EQ(spec.pixel_mean.size(), 3u);
  ASSERT_EQ(spec.pixel_std.size(), 3u);
  const dtrain::detail::PixelNormalizer pixels(spec, at::kCPU);
  ASSERT_TRUE(pixels.active());
  const at::Tensor x = pixels(t.inputs());
  EXPECT_EQ(x.scalar_type(), at::kFloat);
  EXPECT_NEAR(x.mean().item<double>(), 0.0, 0.02);
  EXPECT_NEAR(x.std().item<double>(), 1.0, 0.02);
  const at::Tensor want = t.inputs().to(at::kDouble).div(255.0).sub(0.5).mul(std::sqrt(12.0));
  EXPECT_LT((x.to(at::kDouble) - want).abs().max().item<double>(), 1e-6);
  // channels-last batches stay channels-last; float batches pass through untouched.
  const at::Tensor cl = t.inputs().contiguous(at::MemoryFormat::ChannelsLast);
  EXPECT_TRUE(pixels(cl).is_contiguous(at::MemoryFormat::ChannelsLast));
  const at::Tensor f = at::randn({2, 3, 8, 8});
  EXPECT_TRUE(pixels(f).is_same(f));
  EXPECT_FALSE(dtrain::detail::PixelNormalizer(dtrain::DataSpec{}, at::kCPU).active());
  // Per-channel statistics: channel c gets its own mean and std.
  dtrain::DataSpec two;
  two.input_shape = {2, 1, 1};
  two.pixel_mean = {0.25, 0.75};
  two.pixel_std = {0.5, 0.125};
  const at::Tensor px = at::tensor({0, 255, 51, 102}, at::kByte).view({2, 2, 1, 1});
  const at::Tensor y = dtrain::detail::PixelNormalizer(two, at::kCPU)(px).flatten();
  const double expected[] = {(0 / 255.0 - 0.25) / 0.5, (255 / 255.0 - 0.75) / 0.125,
                             (51 / 255.0 - 0.25) / 0.5, (102 / 255.0 - 0.75) / 0.125};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(y[i].item<double>(), expected[i], 1e-6) << i;
  // Wrong channel counts are errors, in the spec and in a batch.
  two.pixel_std = {0.5};
  EXPECT_NE(message_of([&] { dtrain::detail::PixelNormalizer(two, at::kCPU); }).find("per channel"),
            std::string::npos);
  EXPECT_NE(message_of([&] {
              pixels(at::zeros({2, 1, 8, 8}, at::kByte));
            }).find("channels"),
            std::string::npos);
  // uint8 is for images only, and the error names the key.
  auto tokens = synthetic("tokens", {8}, 16, 8, 0);
  tokens.synthetic_uint8 = true;
  EXPECT_NE(message_of([&] { dtrain::make_datasets(tokens, 0); }).find("data.synthetic_uint8"),
            std::string::npos);
}

}  // namespace

// ---- the Dataset invariant (dataset.h): get() in the order of the indices, on the CPU, and
// safe from several loader threads at once ---------------------------------------------------

TEST(Datasets, GetFollowsTheIndicesOnTheCpuFromManyThreadsAtOnce) {
  const std::vector<dtrain::DataConfig> cfgs = {
      synthetic("regression"), synthetic("classification"), synthetic("tokens", {8}, 50, 256, 0),
      synthetic("images", {3, 4, 4}, 5, 256, 0)};
  for (const auto& cfg : cfgs) {
    const auto splits = dtrain::make_datasets(cfg, 5);
    const auto& ds = tensors(splits.train);
    // Batches in every order: descending, repeated, one sample, random.
    std::vector<std::vector<int64_t>> batches = {{255, 3, 3, 0, 128}, {7}};
    at::Tensor perm = at::randperm(256, at::kLong);
    for (int64_t b = 0; b < 8; ++b) {
      auto p = perm.narrow(0, 32 * b, 32);
      batches.emplace_back(p.data_ptr<int64_t>(), p.data_ptr<int64_t>() + 32);
    }
    constexpr int kThreads = 8, kRounds = 20;
    std::vector<std::string> failures(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
      threads.emplace_back([&, t] {
        for (int r = 0; r < kRounds; ++r)
          for (size_t b = 0; b < batches.size(); ++b) {
            const auto& idx = batches[(b + static_cast<size_t>(t)) % batches.size()];
            const dtrain::Batch got = ds.get(idx);
            const at::Tensor i = at::tensor(idx, at::kLong);
            if (!got.inputs.device().is_cpu() || !got.targets.device().is_cpu() ||
                !got.inputs.equal(ds.inputs().index_select(0, i)) ||
                !got.targets.equal(ds.targets().index_select(0, i)))
              failures[t] = "batch " + std::to_string(b) + " differs";
          }
      });
    for (auto& th : threads) th.join();
    for (int t = 0; t < kThreads; ++t)
      EXPECT_EQ(failures[t], "") << ds.describe() << ", thread " << t;
  }
}
