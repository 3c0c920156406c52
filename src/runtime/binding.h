// Which device a rank computes on: the rule Runtime::setup applies and `dtrain env` reports.
#pragma once

#include "dtrain/config.h"

namespace dtrain::detail {

// GPU local_rank % gpus when there are GPUs and run.device is not cpu; -1 for the CPU. (With
// run.device cuda and no GPU, setup stops with an Error before asking.)
int device_for_rank(DeviceKind device, int local_rank, int gpus);

}  // namespace dtrain::detail
