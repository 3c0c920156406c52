// Agreement on hook requests (stop, save) across ranks.
//
// Note [hook requests]: a hook runs on every rank but decides on its own rank's view (a signal
// that reached one process, a file one rank wrote, a metric it computed), so a request can be
// made on some ranks and not others. Acting on it alone would leave the others waiting in the
// next collective. Every step boundary therefore contributes this rank's requests to a small
// all-reduce (max of "rank + 1" per kind) on the control communicator (Note [control and data
// planes]). To keep that off the
// critical path it is pipelined: the all-reduce started at boundary s is read at boundary s + 1,
// so with several ranks a request takes effect one step after it was made, on every rank at the
// same step; with one rank it takes effect at once. After an evaluation and at the end of
// training the loop agrees synchronously (now()). Every rank starts and reads the same sequence
// of agreements, so the collectives always match.
#pragma once

#include <ATen/ATen.h>

#include <memory>

#include "dtrain/comm.h"
#include "dtrain/hooks.h"

namespace dtrain::detail {

struct Agreed {
  int stop_by = -1;  // the highest rank that asked to stop (-1: none)
  int save_by = -1;  // the highest rank that asked to save (-1: none)
  int signal = 0;    // the highest stop signal behind a stop request (0: none)
  bool stop() const { return stop_by >= 0; }
  bool save() const { return save_by >= 0; }
};

class RequestAgreement {
 public:
  explicit RequestAgreement(Communicator& control);
  // At a step boundary: starts agreeing on `local`'s requests (and clears them); returns what
  // was agreed from the previous boundary (one rank: from this one).
  Agreed at_step(LoopControl& local);
  // Everything asked for so far, agreed now (waits for the boundary in flight too).
  Agreed now(LoopControl& local);

 private:
  at::Tensor flags(LoopControl& local) const;  // (3,) int64: stop, save as rank + 1 or 0; signal
  static Agreed decode(const at::Tensor& flags);
  static Agreed merge(Agreed a, const Agreed& b);

  Communicator& control_;
  std::unique_ptr<Work> inflight_;
  at::Tensor inflight_flags_;
};

}  // namespace dtrain::detail
