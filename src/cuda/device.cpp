// CUDA build: binding this process to a GPU.
#include "cuda/device.h"

#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>

namespace dtrain::detail {

bool built_with_cuda() { return true; }

void set_current_device(int index) { c10::cuda::set_device(static_cast<c10::DeviceIndex>(index)); }

std::string device_name(int index) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, index) != cudaSuccess) return "";
  return prop.name;
}

std::string pci_bus_id(int index) {
  char id[32] = {};
  if (cudaDeviceGetPCIBusId(id, sizeof id, index) != cudaSuccess) return "";
  return id;
}

}  // namespace dtrain::detail
