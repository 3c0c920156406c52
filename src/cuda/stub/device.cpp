// CPU build: no GPU to bind.
#include "cuda/device.h"
#include "dtrain/error.h"

namespace dtrain::detail {

bool built_with_cuda() { return false; }
void set_current_device(int) { throw Error("this dtrain was built without CUDA", "run.device"); }
std::string device_name(int) { return ""; }
std::string pci_bus_id(int) { return ""; }

}  // namespace dtrain::detail
