// torchvision's automatic augmentation (data/images/augment_ops.h, auto_augment.h): every op on
// batches mixing ops and magnitudes against torchvision's _apply_op on each image alone, byte for
// byte (tests/unit/augment_reference.py, run in DTRAIN_REF_PYTHON with Debian's python3-torch and
// python3-torchvision); the policies' drawn ops applied in turn, likewise; the op spaces and the
// ImageNet policy against torchvision's; the draws' structure and distributions; the policy names.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "data/images/augment_ops.h"
#include "data/images/auto_augment.h"
#include "image_reference.h"
#include "test_support.h"

namespace dtrain::detail {
namespace {

using AugOp = AugmentOp;

using test::augment_python;

std::string aug_number(double v) {  // every bit of a double, for Python's float()
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// Image j of a batch: random bytes; every sixth alike: one channel constant, a narrow range of
// values, two values, all one value, mostly one value (AutoContrast's and Equalize's cases).
at::Tensor aug_images(int64_t n, int64_t c, int64_t h, int64_t w, uint64_t seed) {
  at::Tensor t = at::empty({n, c, h, w}, at::kByte);
  uint8_t* p = t.data_ptr<uint8_t>();
  const int64_t plane = h * w;
  for (int64_t j = 0; j < n; ++j) {
    SampleRandom r(seed, 0, j);
    for (int64_t k = 0; k < c * plane; ++k) {
      uint8_t v = static_cast<uint8_t>(r.below(256));
      switch (j % 6) {
        case 1:
          v = k < plane ? 77 : v;
          break;
        case 2:
          v = static_cast<uint8_t>(100 + v % 11);
          break;
        case 3:
          v = v < 128 ? 3 : 250;
          break;
        case 4:
          v = 42;
          break;
        case 5:
          v = v < 230 ? 9 : v;
          break;
        default:
          break;
      }
      p[j * c * plane + k] = v;
    }
  }
  return t;
}

// A batch of images, each with its ops, and dtrain's result.
struct AugJob {
  std::string what;
  at::Tensor images;
  std::vector<std::vector<OpDraw>> ops;
  at::Tensor ours;
};

// torchvision's results for each job (each image's ops applied in turn), one run for all, against
// dtrain's: byte-equal, image by image.
void aug_expect_torchvision(const std::vector<AugJob>& jobs) {
  test::TempDir dir;
  std::vector<uint8_t> bytes;
  std::ofstream lines(dir.file("jobs"));
  for (const AugJob& j : jobs) {
    const int64_t c = j.images.size(1), h = j.images.size(2), w = j.images.size(3);
    for (int64_t i = 0; i < j.images.size(0); ++i) {
      lines << bytes.size() + static_cast<size_t>(i * c * h * w) << " " << c << " " << h << " "
            << w;
      for (const OpDraw& d : j.ops[static_cast<size_t>(i)])
        lines << " " << augment_op_name(d.op) << " " << aug_number(d.magnitude);
      lines << "\n";
    }
    const uint8_t* p = j.images.data_ptr<uint8_t>();
    bytes.insert(bytes.end(), p, p + j.images.numel());
  }
  lines.close();
  test::write_bytes(dir.file("images"), bytes);
  augment_python(
      dir, "ops '" + dir.file("images") + "' '" + dir.file("jobs") + "' '" + dir.file("out") + "'");
  std::vector<uint8_t> out = test::read_bytes(dir.file("out"));
  ASSERT_EQ(out.size(), bytes.size()) << "augment_reference.py's output";
  size_t offset = 0;
  for (const AugJob& j : jobs) {
    ASSERT_EQ(j.ours.sizes(), j.images.sizes()) << j.what;
    ASSERT_EQ(j.ours.scalar_type(), at::kByte) << j.what;
    const at::Tensor theirs = at::from_blob(out.data() + offset, j.images.sizes(), at::kByte);
    offset += static_cast<size_t>(j.images.numel());
    for (int64_t i = 0; i < j.images.size(0); ++i) {
      const at::Tensor diff = (j.ours[i].to(at::kInt) - theirs[i].to(at::kInt)).abs();
      const int64_t differing = diff.gt(0).sum().item<int64_t>();
      if (differing == 0) continue;
      std::string list;
      for (const OpDraw& d : j.ops[static_cast<size_t>(i)])
        list += std::string(" ") + augment_op_name(d.op) + "(" + aug_number(d.magnitude) + ")";
      ADD_FAILURE() << j.what << ": image " << i << " with" << list << ": " << differing << " of "
                    << j.ours[i].numel() << " pixels differ, by up to " << diff.max().item<int>();
    }
  }
}

// Each op with magnitudes that cover its tables' extremes, negative ones and rounding cases.
const std::vector<std::pair<AugOp, std::vector<double>>>& aug_cases() {
  static const std::vector<std::pair<AugOp, std::vector<double>>> cases = {
      {AugOp::kIdentity, {0}},
      {AugOp::kShearX, {0, 0.3, -0.3, 0.99, -0.99, 0.5, -0.133}},
      {AugOp::kShearY, {0, 0.3, -0.3, 0.99, -0.99, 0.5, -0.133}},
      {AugOp::kTranslateX, {0, 32, -32, 5.9, -13.7, 13.141993522644043, -1}},
      {AugOp::kTranslateY, {0, 32, -32, 5.9, -13.7, 16.767372131347656, -1}},
      {AugOp::kRotate, {0, 30, -30, 135, -135, 90, -90, 12.3, 4.5}},
      {AugOp::kBrightness, {0, 0.99, -0.99, 0.9, -0.9, 0.3, -0.5, -1}},
      {AugOp::kColor, {0, 0.99, -0.99, 0.9, -0.9, 0.3, -0.5, -1}},
      {AugOp::kContrast, {0, 0.99, -0.99, 0.9, -0.9, 0.3, -0.5, -1}},
      {AugOp::kSharpness, {0, 0.99, -0.99, 0.9, -0.9, 0.3, -0.5, -1}},
      {AugOp::kPosterize, {8, 7, 6, 4, 2, 1, 0}},
      {AugOp::kSolarize, {255, 0, 128, 127.5, 8.5, 200}},
      {AugOp::kAutoContrast, {0}},
      {AugOp::kEqualize, {0}},
      {AugOp::kInvert, {0}},
  };
  return cases;
}

// Every case six times over (each kind of image), shuffled into one batch: groups of several
// images per op, each with its own magnitude, in no order.
std::vector<std::vector<OpDraw>> aug_batch_ops() {
  std::vector<std::vector<OpDraw>> ops;
  for (const auto& [op, magnitudes] : aug_cases())
    for (size_t k = 0; k < std::max<size_t>(magnitudes.size(), 6); ++k)
      ops.push_back({{op, magnitudes[k % magnitudes.size()]}});
  SampleRandom r(11, 0, 0);
  for (size_t i = ops.size() - 1; i > 0; --i)
    std::swap(ops[i], ops[static_cast<size_t>(r.below(static_cast<int64_t>(i) + 1))]);
  return ops;
}

TEST(AutoAugment, EveryOpOfAMixedBatchIsTorchvisionsByteForByte) {
  const auto ops = aug_batch_ops();
  const auto n = static_cast<int64_t>(ops.size());
  std::vector<OpDraw> round;
  for (const auto& o : ops) round.push_back(o[0]);
  // 3 and 1 channels, not square; 2 rows (Sharpness leaves it); 3x3 (the blur's one inner pixel).
  const std::vector<std::vector<int64_t>> shapes = {
      {3, 37, 29}, {1, 37, 29}, {3, 29, 40}, {3, 2, 7}, {1, 3, 3}};
  std::vector<AugJob> jobs;
  for (const auto& s : shapes) {
    const std::string what =
        "images " + std::to_string(s[0]) + "x" + std::to_string(s[1]) + "x" + std::to_string(s[2]);
    const at::Tensor images = aug_images(n, s[0], s[1], s[2], 5 + s[1]);
    const at::Tensor before = images.clone();
    jobs.push_back({what, images, ops, apply_augment_ops(images, round)});
    EXPECT_TRUE(images.equal(before)) << what << ": the input changed";
  }
  aug_expect_torchvision(jobs);
}

TEST(AutoAugment, AWholeBatchOfOneOpAndAllIdentity) {
  const at::Tensor images = aug_images(6, 3, 11, 13, 3);
  EXPECT_TRUE(apply_augment_ops(images, std::vector<OpDraw>(6)).is_same(images));  // nothing to do
  // What torchvision refuses: a negative factor, posterize's bits beyond 8, a threshold over 255.
  for (const OpDraw bad : {OpDraw{AugOp::kContrast, -1.5}, OpDraw{AugOp::kPosterize, 9},
                           OpDraw{AugOp::kSolarize, 256}}) {
    std::vector<OpDraw> ops(6);
    ops[2] = bad;
    test::expect_all(test::message_of([&] { apply_augment_ops(images, ops); }),
                     {augment_op_name(bad.op), "magnitude"});
  }
  EXPECT_THROW(apply_augment_ops(images, std::vector<OpDraw>(5)), Error);
  std::vector<AugJob> jobs;
  for (const auto& [op, magnitudes] : aug_cases()) {
    std::vector<std::vector<OpDraw>> ops;
    for (int64_t i = 0; i < 6; ++i)
      ops.push_back({{op, magnitudes[static_cast<size_t>(i) % magnitudes.size()]}});
    jobs.push_back({augment_op_name(op), images, ops, apply_augment(images, ops)});
  }
  aug_expect_torchvision(jobs);
}

// The policies' own draws applied in turn (RandAugment's 2 or 3 ops, AutoAugment's 0 to 2), as
// torchvision's forward applies them one after another.
TEST(AutoAugment, DrawnOpsAppliedInTurnAreTorchvisions) {
  const int64_t n = 48, h = 31, w = 26;
  const at::Tensor images = aug_images(n, 3, h, w, 9);
  const std::vector<AugmentPolicy> policies = {
      AugmentPolicy(AutoAugment::kTrivialAugmentWide, h, w),
      AugmentPolicy(AutoAugment::kRandAugment, h, w, 2, 9),
      AugmentPolicy(AutoAugment::kRandAugment, h, w, 3, 30),
      AugmentPolicy(AutoAugment::kAutoAugment, h, w)};
  std::vector<AugJob> jobs;
  for (const AugmentPolicy& policy : policies) {
    std::vector<std::vector<OpDraw>> ops;
    for (int64_t i = 0; i < n; ++i) {
      SampleRandom r(21, 3, i);
      ops.push_back(policy.draw(r));
    }
    jobs.push_back({to_string(policy.kind()), images, ops, apply_augment(images, ops)});
  }
  aug_expect_torchvision(jobs);
}

TEST(AutoAugment, OpSpacesAndTheImagenetPolicyAreTorchvisions) {
  const int64_t h = 37, w = 29;
  test::TempDir dir;
  std::istringstream lines(
      augment_python(dir, "tables " + std::to_string(h) + " " + std::to_string(w)));
  std::map<std::string, std::vector<std::string>> theirs;  // space -> its lines without the name
  std::vector<std::string> policy_lines;
  for (std::string line; std::getline(lines, line);) {
    const size_t space = line.find(' ');
    if (line.substr(0, space) == "policy")
      policy_lines.push_back(line.substr(space + 1));
    else
      theirs[line.substr(0, space)].push_back(line.substr(space + 1));
  }
  auto line_of = [](const OpSpace& o) {
    std::string s = std::string(augment_op_name(o.op)) + (o.is_signed ? " 1" : " 0");
    for (const double v : o.magnitudes) s += " " + aug_number(v);
    return s;
  };
  auto expect_space = [&](const std::string& name, const std::vector<OpSpace>& ours) {
    const auto& t = theirs[name];
    ASSERT_EQ(t.size(), ours.size()) << name;
    for (size_t k = 0; k < ours.size(); ++k) {
      std::istringstream f(t[k]);
      std::string op;
      int is_signed = 0;
      f >> op >> is_signed;
      std::vector<double> values;
      for (std::string v; f >> v;) values.push_back(std::strtod(v.c_str(), nullptr));
      EXPECT_EQ(op, augment_op_name(ours[k].op)) << name << " op " << k;
      EXPECT_EQ(is_signed != 0, ours[k].is_signed) << name << " " << op;
      EXPECT_EQ(values, ours[k].magnitudes)
          << name << " " << op << ": torchvision's\n  " << t[k] << "\nours\n  " << line_of(ours[k]);
    }
  };
  expect_space("trivial", trivial_augment_space(31));
  expect_space("rand", rand_augment_space(31, h, w));
  expect_space("auto", auto_augment_space(10, h, w));
  EXPECT_EQ(AugmentPolicy(AutoAugment::kRandAugment, h, w).space().size(), 14u);
  EXPECT_EQ(AugmentPolicy(AutoAugment::kAutoAugment, h, w).space().size(), 14u);
  const auto& ours = imagenet_policies();
  ASSERT_EQ(policy_lines.size(), ours.size());
  for (size_t k = 0; k < ours.size(); ++k) {
    std::string expected;
    for (const PolicyOp& p : ours[k])
      expected += std::string(expected.empty() ? "" : " ") + augment_op_name(p.op) + " " +
                  aug_number(p.probability) + " " + std::to_string(p.magnitude_bin);
    std::istringstream f(policy_lines[k]);
    std::string got;
    for (std::string op, prob, bin; f >> op >> prob >> bin;)
      got += std::string(got.empty() ? "" : " ") + op + " " +
             aug_number(std::strtod(prob.c_str(), nullptr)) + " " + bin;
    EXPECT_EQ(got, expected) << "sub-policy " << k;
  }
}

// The magnitude `m` is one of `space`'s op's, signed only where the op is.
void aug_expect_in_space(const std::vector<OpSpace>& space, const OpDraw& d, int64_t bin = -1) {
  for (const OpSpace& o : space) {
    if (o.op != d.op) continue;
    if (o.magnitudes.empty()) {
      EXPECT_EQ(d.magnitude, 0.0) << augment_op_name(d.op);
      return;
    }
    EXPECT_TRUE(o.is_signed || d.magnitude >= 0) << augment_op_name(d.op);
    bool found = false;
    for (size_t k = 0; k < o.magnitudes.size(); ++k)
      found = found || ((bin < 0 || static_cast<int64_t>(k) == bin) &&
                        o.magnitudes[k] == std::abs(d.magnitude));
    EXPECT_TRUE(found) << augment_op_name(d.op) << " " << d.magnitude;
    return;
  }
  ADD_FAILURE() << augment_op_name(d.op) << " is not in the op space";
}

TEST(AutoAugment, TrivialAugmentDrawsOneOpOfFourteenAndAnyBin) {
  const AugmentPolicy policy(AutoAugment::kTrivialAugmentWide, 32, 32);
  const int draws = 28000;
  std::map<AugOp, int> per_op;
  std::map<AugOp, int> negative;
  std::set<std::pair<AugOp, double>> seen;
  for (int i = 0; i < draws; ++i) {
    SampleRandom r(1, 0, i);
    const auto ops = policy.draw(r);
    ASSERT_EQ(ops.size(), 1u);
    aug_expect_in_space(policy.space(), ops[0]);
    ++per_op[ops[0].op];
    negative[ops[0].op] += ops[0].magnitude < 0;
    seen.insert({ops[0].op, std::abs(ops[0].magnitude)});
  }
  ASSERT_EQ(per_op.size(), 14u);
  for (const auto& [op, count] : per_op) {
    EXPECT_NEAR(count, draws / 14, 250) << augment_op_name(op);  // 2000, sd 43
    const OpSpace* s = nullptr;
    for (const auto& o : policy.space()) s = o.op == op ? &o : s;
    if (s->is_signed)
      EXPECT_NEAR(negative[op], count / 2.0, 0.1 * count) << augment_op_name(op);  // sd 0.025
    else
      EXPECT_EQ(negative[op], 0) << augment_op_name(op);
  }
  // Every bin drawn: 31 distinct magnitudes for the tables without repeats, 7 for Posterize.
  auto distinct = [&](AugOp op) {
    int k = 0;
    for (const auto& p : seen) k += p.first == op;
    return k;
  };
  EXPECT_EQ(distinct(AugOp::kRotate), 31);
  EXPECT_EQ(distinct(AugOp::kSolarize), 31);
  EXPECT_EQ(distinct(AugOp::kPosterize), 7);
}

TEST(AutoAugment, RandAugmentDrawsNumOpsAtItsMagnitude) {
  const AugmentPolicy policy(AutoAugment::kRandAugment, 40, 30, 3, 17);
  std::map<AugOp, int> per_op;
  for (int i = 0; i < 7000; ++i) {
    SampleRandom r(2, 1, i);
    const auto ops = policy.draw(r);
    ASSERT_EQ(ops.size(), 3u);
    for (const auto& d : ops) {
      aug_expect_in_space(policy.space(), d, 17);
      ++per_op[d.op];
    }
  }
  ASSERT_EQ(per_op.size(), 14u);
  for (const auto& [op, count] : per_op)
    EXPECT_NEAR(count, 1500, 200) << augment_op_name(op);  // sd 37
  EXPECT_THROW(AugmentPolicy(AutoAugment::kRandAugment, 8, 8, 2, 31), Error);
  test::expect_all(test::message_of([] { AugmentPolicy(AutoAugment::kRandAugment, 8, 8, 2, -1); }),
                   {"data.rand_augment_magnitude", "0..30"});
  test::expect_all(test::message_of([] { AugmentPolicy(AutoAugment::kRandAugment, 8, 8, -1, 9); }),
                   {"data.rand_augment_ops"});
}

TEST(AutoAugment, AutoAugmentDrawsSubPoliciesWithTheirProbabilities) {
  const AugmentPolicy policy(AutoAugment::kAutoAugment, 24, 24);
  const auto& policies = imagenet_policies();
  double expected_ops = 0;  // mean over the sub-policies of p1 + p2
  std::map<AugOp, double> expected_per_op;
  for (const auto& s : policies)
    for (const auto& p : s) {
      expected_ops += p.probability / static_cast<double>(policies.size());
      expected_per_op[p.op] += p.probability / static_cast<double>(policies.size());
    }
  const int draws = 20000;
  int total = 0;
  std::map<AugOp, int> per_op;
  std::map<AugOp, int> negative;
  for (int i = 0; i < draws; ++i) {
    SampleRandom r(3, 2, i);
    const auto ops = policy.draw(r);
    ASSERT_LE(ops.size(), 2u);
    total += static_cast<int>(ops.size());
    for (const auto& d : ops) {
      aug_expect_in_space(policy.space(), d);
      ++per_op[d.op];
      negative[d.op] += d.magnitude < 0;
    }
  }
  EXPECT_NEAR(total / double(draws), expected_ops, 0.03);
  for (const auto& [op, p] : expected_per_op)
    EXPECT_NEAR(per_op[op] / double(draws), p, 0.015) << augment_op_name(op);
  EXPECT_NEAR(negative[AugOp::kRotate], per_op[AugOp::kRotate] / 2.0, 0.1 * per_op[AugOp::kRotate]);
  EXPECT_EQ(negative[AugOp::kSolarize] + negative[AugOp::kPosterize], 0);
  // The same (seed, epoch, index) draws the same; none draws nothing.
  SampleRandom a(5, 1, 7), b(5, 1, 7), c(5, 1, 7);
  const auto x = policy.draw(a), y = policy.draw(b);
  ASSERT_EQ(x.size(), y.size());
  for (size_t k = 0; k < x.size(); ++k)
    EXPECT_TRUE(x[k].op == y[k].op && x[k].magnitude == y[k].magnitude);
  EXPECT_TRUE(AugmentPolicy(AutoAugment::kNone, 8, 8).draw(c).empty());
}

TEST(AutoAugment, PolicyNamesAndBadValuesNameTheirKey) {
  EXPECT_EQ(Config::from_string("data: {auto_augment: trivial_augment_wide}\n", "a.yaml")
                .data.auto_augment,
            AutoAugment::kTrivialAugmentWide);
  test::expect_all(test::message_of([] {
                     Config::from_string("data: {auto_augment: randaugment}\n", "a.yaml");
                   }),
                   {"data.auto_augment", "randaugment", "none", "trivial_augment_wide",
                    "rand_augment", "auto_augment"});
  test::expect_all(test::message_of([] {
                     Config::from_string("data: {rand_augment_magnitude: 31}\n", "a.yaml");
                   }),
                   {"data.rand_augment_magnitude", "31"});
  test::expect_all(
      test::message_of([] { Config::from_string("data: {random_erase: 1.5}\n", "a.yaml"); }),
      {"data.random_erase", "1.5"});
  test::expect_all(
      test::message_of([] { Config::from_string("train: {mixup_alpha: -0.2}\n", "a.yaml"); }),
      {"train.mixup_alpha", "-0.2"});
  test::expect_all(
      test::message_of([] { Config::from_string("train: {label_smoothing: 1}\n", "a.yaml"); }),
      {"train.label_smoothing"});
  // The same ops for the same (seed, epoch, index), whichever batch the sample comes in.
  DataConfig d;
  d.auto_augment = AutoAugment::kTrivialAugmentWide;
  const BatchAugment augment(d, 3, 8, 8);
  const at::Tensor images = at::randint(0, 256, {4, 3, 8, 8}, at::kByte);
  const at::Tensor both = augment(images, {10, 11, 12, 13}, 2);
  const at::Tensor one = augment(images.narrow(0, 2, 1), {12}, 2);
  EXPECT_TRUE(at::equal(both.narrow(0, 2, 1), one));
  EXPECT_FALSE(at::equal(both, images));
  EXPECT_TRUE(at::equal(BatchAugment()(images, {1, 2, 3, 4}, 0), images));
}

}  // namespace
}  // namespace dtrain::detail
