// A damaged file is an error, never a hang (issue 29, point 8): seeded mutations of the files of
// model state dtrain reads, each read in a child process under a time and memory limit
// (fuzz_harness.h): a checkpoint's state.pt and rank-<R>.pt (torch::jit::pickle_save archives)
// and weights files (model.pt, torch.save's format). Each is mutated two ways: its raw bytes
// (the zip archive), and the pickle inside with the archive rebuilt around it, as a damaged or
// hand-edited checkpoint whose COMPLETE entry was updated to match would be. Every case must
// return or end in a dtrain::Error naming the file.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <caffe2/serialize/inline_container.h>

#include <cstdint>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "checkpoint/state.h"
#include "checkpoint/torch_file.h"
#include "dtrain/error.h"
#include "fuzz_harness.h"
#include "test_support.h"

namespace {

namespace d = dtrain::detail;
using dtrain::test::fuzz;
using dtrain::test::FuzzTally;
using dtrain::test::message_of;
using dtrain::test::TempDir;

// A small state as the checkpoint writer makes it: two tensors sharing one storage (tied
// weights), an optimizer and a scaler entry, the config as text.
d::SharedState small_state() {
  d::SharedState s;
  s.position.step = 12;
  s.position.steps_per_epoch = 6;
  s.position.samples = 384;
  s.position.micro_batch = 16;
  s.position.window_loss = 2.5;
  s.position.window_steps = 2;
  s.position.last_loss = 1.25;
  s.world = 2;
  s.global_batch = 32;
  s.config = {{"train.lr", "0.01"}, {"model.name", "mlp"}, {"data.format", "idx"}};
  s.config_hash = "0123456789abcdef";
  s.dtrain_version = "0.1.0";
  s.libtorch_version = "1.13.1";
  const at::Tensor w = at::arange(12, at::kFloat).reshape({3, 4});
  s.model = {{"fc.weight", w},
             {"head.weight", w},
             {"fc.bias", at::ones({3})},
             {"bn.num_batches_tracked", at::full({}, 7, at::kLong)}};
  s.optimizer = {{"exp_avg.0", at::full({3, 4}, 0.5)}, {"step.0", at::full({}, 3.0)}};
  s.scaler = {{"scale", at::full({}, 65536.0)}};
  return s;
}

d::RankState small_rank() {
  d::RankState r;
  r.rank = 1;
  r.world = 2;
  r.step = 12;
  r.cpu_rng = at::arange(64, at::kByte);
  return r;
}

// The archive `bytes` with its data.pkl replaced by `pickle`, its other records as they were.
std::string with_pickle(const std::string& bytes, const std::string& pickle) {
  std::istringstream in(bytes);
  caffe2::serialize::PyTorchStreamReader reader(&in);
  std::string out;
  caffe2::serialize::PyTorchStreamWriter writer([&out](const void* data, size_t n) {
    out.append(static_cast<const char*>(data), n);
    return n;
  });
  writer.writeRecord("data.pkl", pickle.data(), pickle.size());
  for (const std::string& name : reader.getAllRecords()) {
    if (name == "data.pkl" || name == "version" || name == ".data/version") continue;
    auto [ptr, n] = reader.getRecord(name);
    writer.writeRecord(name, ptr.get(), n);
  }
  writer.writeEndOfFile();
  return out;
}

std::string pickle_of(const std::string& bytes) {
  std::istringstream in(bytes);
  caffe2::serialize::PyTorchStreamReader reader(&in);
  auto [ptr, n] = reader.getRecord("data.pkl");
  return std::string(static_cast<const char*>(ptr.get()), n);
}

// Reads every value of every tensor (a view that reached past its storage would show here).
void touch(const d::NamedTensors& ts) {
  for (const auto& nt : ts) (void)nt.second.contiguous();
}

// The mutations must reach the reader: some cases end in an Error.
void expect_some_errors(const FuzzTally& t, const char* what) {
  EXPECT_GT(t.errors, 0) << what << ": no mutation was caught; the mutator does nothing?";
}

void decode_state(const std::string& bytes) {
  try {
    const d::SharedState s = d::decode_shared(bytes, "fuzz/state.pt");
    touch(s.model), touch(s.optimizer), touch(s.scaler);
  } catch (const dtrain::Error& e) {
    if (e.where() != "fuzz/state.pt")
      throw std::runtime_error("an Error not naming the file: " + std::string(e.what()));
    throw;
  }
}

void decode_rank(const std::string& bytes) {
  try {
    const d::RankState r = d::decode_rank(bytes, "fuzz/rank-00001.pt");
    (void)r.cpu_rng.contiguous();
  } catch (const dtrain::Error& e) {
    if (e.where() != "fuzz/rank-00001.pt")
      throw std::runtime_error("an Error not naming the file: " + std::string(e.what()));
    throw;
  }
}

TEST(FuzzCheckpoint, TheSeedsReadAndTheHarnessSeesEachOutcome) {
  // The unmutated inputs are read, so what the mutations find is the mutations' doing.
  const std::string state = d::encode(small_state());
  EXPECT_EQ(d::decode_shared(with_pickle(state, pickle_of(state)), "x").model.size(), 4u);
  // The harness tells a return, an Error, another exception, a crash and a hang apart.
  using dtrain::test::Outcome;
  using dtrain::test::run_case;
  EXPECT_EQ(run_case([] {}).outcome, Outcome::kReturned);
  const auto e = run_case([] { throw dtrain::Error("bad bytes", "f.pt"); });
  EXPECT_EQ(e.outcome, Outcome::kError);
  EXPECT_NE(e.message.find("f.pt"), std::string::npos) << e.message;
  EXPECT_EQ(run_case([] { throw std::runtime_error("x"); }).outcome, Outcome::kFailed);
  EXPECT_EQ(run_case([] { ::raise(SIGSEGV); }).outcome, Outcome::kFailed);
  const auto spin = run_case(
      [] {
        while (true) std::this_thread::yield();
      },
      1);
  EXPECT_EQ(spin.outcome, Outcome::kFailed);
  EXPECT_NE(spin.message.find("a hang"), std::string::npos) << spin.message;
  // after a case that killed its child, the next case runs in a new one
  const auto three = dtrain::test::run_cases(3, [](int c) {
    if (c == 1) ::abort();
  });
  ASSERT_EQ(three.size(), 3u);
  EXPECT_EQ(three[0].outcome, Outcome::kReturned);
  EXPECT_EQ(three[1].outcome, Outcome::kFailed);
  EXPECT_EQ(three[2].outcome, Outcome::kReturned);
  const auto hog = run_case([] {
    // Past RLIMIT_AS: bad_alloc. The blocks stay untouched, so reaching the limit takes no time
    // on a machine slow to fault pages in (filling them took 20 s on one, past the 10 s alarm).
    std::vector<std::unique_ptr<char[]>> held;
    while (true) held.emplace_back(new char[size_t(64) << 20]);
  });
  EXPECT_EQ(hog.outcome, Outcome::kFailed);
  EXPECT_NE(hog.message.find("not a dtrain::Error"), std::string::npos) << hog.message;
}

TEST(FuzzCheckpoint, TheReportedHangIsAnErrorOrAResumeNow) {
  // The pickle whose memo index asked LibTorch's unpickler for 2^32 entries: LONG_BINPUT with
  // 0xfffffff0 after the first value.
  const std::string state = d::encode(small_state());
  std::string pickle = pickle_of(state);
  const size_t put = pickle.find('q');  // the first BINPUT
  ASSERT_NE(put, std::string::npos);
  pickle.replace(put, 2, std::string("r\xf0\xff\xff\xff", 5));
  const auto r = dtrain::test::run_case([&] { decode_state(with_pickle(state, pickle)); });
  EXPECT_NE(r.outcome, dtrain::test::Outcome::kFailed) << r.message;
  // A storage that declares more values than its record holds is an Error before any allocation.
  std::string big = pickle_of(state);
  const size_t numel = big.find("cpu");
  ASSERT_NE(numel, std::string::npos);
  const std::string msg = message_of([&] {
    std::string p = big;
    // after 'cpu' and its BINPUT: the storage size as BININT (J) 0x7fffffff
    const size_t at = p.find_first_of("KMJ", numel + 3);
    p.replace(at, p[at] == 'K' ? 2 : p[at] == 'M' ? 3 : 5, std::string("J\xff\xff\xff\x7f", 5));
    d::decode_shared(with_pickle(state, p), "fuzz/state.pt");
  });
  EXPECT_NE(msg.find("fuzz/state.pt: not a readable checkpoint file"), std::string::npos) << msg;
}

TEST(FuzzCheckpoint, MutatedStateFilesEndInAnErrorOrLoad) {
  const std::string state = d::encode(small_state());
  expect_some_errors(fuzz("state.pt bytes", 1, 400, state, 0, decode_state), "state.pt bytes");
  const std::string pickle = pickle_of(state);
  expect_some_errors(fuzz("state.pt pickle", 2, 1500, pickle, 0,
                          [&](const std::string& p) { decode_state(with_pickle(state, p)); }),
                     "state.pt pickle");
}

TEST(FuzzCheckpoint, MutatedRankFilesEndInAnErrorOrLoad) {
  const std::string rank = d::encode(small_rank());
  expect_some_errors(fuzz("rank-00001.pt bytes", 3, 200, rank, 0, decode_rank), "rank bytes");
  const std::string pickle = pickle_of(rank);
  expect_some_errors(fuzz("rank-00001.pt pickle", 4, 400, pickle, 0,
                          [&](const std::string& p) { decode_rank(with_pickle(rank, p)); }),
                     "rank pickle");
}

TEST(FuzzCheckpoint, MutatedWeightFilesEndInAnErrorOrLoad) {
  TempDir dir;
  const std::string path = dir.file("model.pt");
  const d::SharedState s = small_state();
  const std::string weights = d::torch_save_bytes(s.model);
  auto load = [&](const std::string& bytes) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
    try {
      touch(d::torch_load_file(path));
    } catch (const dtrain::Error& e) {
      if (e.where() != path)
        throw std::runtime_error("an Error not naming the file: " + std::string(e.what()));
      throw;
    }
  };
  expect_some_errors(fuzz("model.pt bytes", 5, 300, weights, 0, load), "model.pt bytes");
  const std::string pickle = pickle_of(weights);
  expect_some_errors(fuzz("model.pt pickle", 6, 1000, pickle, 0,
                          [&](const std::string& p) { load(with_pickle(weights, p)); }),
                     "model.pt pickle");
}

}  // namespace
