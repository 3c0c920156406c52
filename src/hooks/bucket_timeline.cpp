// The bucket timeline on rank 0 at the end of a run with the gradient engine.
#include <memory>
#include <string>

#include "dtrain/log.h"
#include "hooks/standard.h"
#include "util/format.h"

namespace dtrain::detail {
namespace {

// The gradient engine's last synchronized step: when each bucket was ready, when it was handed
// to the communicator and when the wait for it returned, against the end of backward (ms since
// that step's synchronized backward began, host clock, rank 0). The report's diagnosis
// (telemetry/diagnosis.h) turns the same numbers into the exposed waits and a fix.
class BucketTimeline : public Hook {
 public:
  std::string name() const override { return "bucket timeline"; }

  void on_end(TrainSummary& s) override {
    if (s.buckets.empty() || s.stop_signal != 0) return;  // a signal's stop: kept short
    auto ms = [](double seconds) { return format("%.2f", seconds * 1e3); };
    std::string tl =
        "gradient buckets of the last step (ms from the last backward's start; "
        "backward ended at " +
        ms(s.backward_end) + "):";
    for (const auto& b : s.buckets)
      tl += "\n  bucket " + std::to_string(b.bucket) + ": " + std::to_string(b.bytes / 1024) +
            " KiB, ready " + ms(b.ready) + ", launched " + ms(b.launched) + ", done " + ms(b.done) +
            (b.launched < s.backward_end ? "  (during backward)" : "");
    log::detail(tl);
  }
};

}  // namespace

std::shared_ptr<Hook> make_bucket_timeline() { return std::make_shared<BucketTimeline>(); }

}  // namespace dtrain::detail
