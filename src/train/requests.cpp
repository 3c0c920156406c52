#include "train/requests.h"

#include <algorithm>

namespace dtrain::detail {

RequestAgreement::RequestAgreement(Communicator& control) : control_(control) {}

at::Tensor RequestAgreement::flags(LoopControl& local) const {
  const int64_t me = control_.rank() + 1;
  at::Tensor f = at::tensor(
      {local.stop_requested() ? me : int64_t{0}, local.save_requested() ? me : int64_t{0},
       static_cast<int64_t>(local.stop_signal())},
      at::kLong);
  local.clear();
  return f;
}

Agreed RequestAgreement::decode(const at::Tensor& flags) {
  auto a = flags.accessor<int64_t, 1>();
  return Agreed{static_cast<int>(a[0]) - 1, static_cast<int>(a[1]) - 1, static_cast<int>(a[2])};
}

Agreed RequestAgreement::merge(Agreed a, const Agreed& b) {
  a.stop_by = std::max(a.stop_by, b.stop_by);
  a.save_by = std::max(a.save_by, b.save_by);
  a.signal = std::max(a.signal, b.signal);
  return a;
}

Agreed RequestAgreement::at_step(LoopControl& local) {
  if (control_.world() == 1) {  // nothing to agree on: no tensor, no collective (every step)
    Agreed agreed{local.stop_requested() ? 0 : -1, local.save_requested() ? 0 : -1,
                  local.stop_signal()};
    local.clear();
    return agreed;
  }
  Agreed agreed;
  if (inflight_) {
    inflight_->wait();
    inflight_.reset();
    agreed = decode(inflight_flags_);
  }
  inflight_flags_ = flags(local);
  inflight_ = control_.all_reduce_async(inflight_flags_, ReduceOp::kMax);
  return agreed;
}

Agreed RequestAgreement::now(LoopControl& local) {
  Agreed agreed;
  if (inflight_) {
    inflight_->wait();
    inflight_.reset();
    agreed = decode(inflight_flags_);
  }
  at::Tensor f = flags(local);
  if (control_.world() > 1) control_.all_reduce(f, ReduceOp::kMax);
  return merge(agreed, decode(f));
}

}  // namespace dtrain::detail
