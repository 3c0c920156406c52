// One rank's files of one checkpoint, written at once or on a thread of its own
// (checkpoint/background_write.h).
#include "checkpoint/background_write.h"

#include <chrono>
#include <exception>
#include <utility>

#include "checkpoint/weights.h"
#include "cuda/host_copy.h"
#include "util/clock.h"
#include "util/format.h"

namespace dtrain::detail {

bool background_saves(const CheckpointConfig& c, const at::Device& device) {
  return c.async == AsyncSave::kOn || (c.async == AsyncSave::kAuto && device.is_cuda());
}

std::vector<MarkedFile> write_captured(const CapturedCheckpoint& c) {
  wait_for_mark(c.copied);  // the device-to-host copies are done
  const double rate = c.mb_per_s * 1e6;
  auto write = [&](const std::string& name, const ContentWriter& produce) {
    return write_checkpoint_file(c.dir, name, produce, [rate](size_t n) {
      if (rate > 0) std::this_thread::sleep_for(std::chrono::duration<double>(n / rate));
    });
  };
  // Each file encoded as it is written (never whole in memory, Note [background saves]).
  std::vector<MarkedFile> files;
  files.push_back(
      write(rank_file_name(c.rank.rank), [&](const ByteSink& out) { encode_to(c.rank, out); }));
  if (c.shared) {
    files.push_back(write("state.pt", [&](const ByteSink& out) { encode_to(*c.shared, out); }));
    // for Python: torch.load, and how the raw data became the inputs (json.load)
    files.push_back(write(
        "model.pt", [&](const ByteSink& out) { weights_to(c.model_kind, c.shared->model, out); }));
    files.push_back(write("preprocess.json", [&](const ByteSink& out) {
      out(c.preprocess.data(), c.preprocess.size());
    }));
  }
  return files;
}

WriteResult write_result(const CapturedCheckpoint& c) {
  WriteResult r;
  const auto t0 = Clock::now();
  try {
    r.files = write_captured(c);
  } catch (const std::exception& e) {
    r.failure = first_line(e.what());
  }
  r.seconds = seconds_since(t0);
  return r;
}

BackgroundWrite::~BackgroundWrite() {
  if (thread_.joinable()) thread_.join();
}

void BackgroundWrite::start(CapturedCheckpoint c) {
  finished_ = false;
  result_ = Result{};
  thread_ = std::thread([this, c = std::move(c)] {
    result_ = write_result(c);
    finished_ = true;
  });
}

BackgroundWrite::Result BackgroundWrite::wait(double* waited) {
  const auto t0 = Clock::now();
  if (thread_.joinable()) thread_.join();
  if (waited) *waited = seconds_since(t0);
  Result r = std::move(result_);
  result_ = Result{};
  return r;
}

}  // namespace dtrain::detail
