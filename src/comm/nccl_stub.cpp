// CPU build: there is no NCCL backend; asking for it is a clear error. (What the CUDA build's
// NcclCommunicator adds to the interface, abort() and its Errors afterwards, is Communicator's
// default here: no NCCL communicator can exist.)
#include "dtrain/comm.h"
#include "dtrain/error.h"

namespace dtrain {

std::unique_ptr<Communicator> make_nccl_communicator(MPI_Comm, int) {
  throw Error(
      "this dtrain was built without CUDA, so the NCCL backend is not available; "
      "use dist.backend=mpi",
      "dist.backend");
}

}  // namespace dtrain
