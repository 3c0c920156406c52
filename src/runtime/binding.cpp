#include "runtime/binding.h"

namespace dtrain::detail {

int device_for_rank(DeviceKind device, int local_rank, int gpus) {
  if (device == DeviceKind::kCpu || gpus <= 0) return -1;
  return local_rank % gpus;
}

}  // namespace dtrain::detail
