// CUDA build: binding this process to a GPU.
#include "cuda/device.h"

#include <c10/cuda/CUDAFunctions.h>

namespace dtrain::detail {

bool built_with_cuda() { return true; }

void set_current_device(int index) { c10::cuda::set_device(static_cast<c10::DeviceIndex>(index)); }

}  // namespace dtrain::detail
