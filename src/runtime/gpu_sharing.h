// Ranks of one host that share a GPU and talk through NCCL.
//
// Note [ranks sharing a GPU]: NCCL refuses two ranks of one host on one GPU ("Duplicate GPU
// detected": it compares each peer's host hash and PCI bus id), so a config written for 4 GPUs
// could not be tried with NCCL on a machine with one. NCCL takes the host hash from NCCL_HOSTID
// when it is set: each rank of a host with more ranks than GPUs gets an identity of its own
// ("<host>.dtrain-rank<R>"), and with NCCL's peer-to-peer and shared-memory transports off the
// ranks talk through NCCL's socket transport (over loopback when the whole job is on this host).
// It is the real NCCL code path (communicator, collectives, the all-reduce inside CUDA graphs,
// failures and aborts), at the speed of sockets: use it to try a multi-GPU config and its faults,
// never to measure speed. One rank per GPU (the normal case) sets nothing. The variables are set
// in this process before its first NCCL call (Runtime::setup), and the log says so on each host.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace dtrain::detail {

struct GpuSharing {
  // NCCL's variables this rank sets (name, value); empty when each rank has a GPU of its own.
  std::vector<std::pair<std::string, std::string>> env;
  std::string note;  // the log line: why, the variables, the cost; "" when env is empty
};

// `local_world` ranks of the job on `host` with `gpus` GPUs; `one_host`: every rank of the job is
// on this host (loopback then carries NCCL's sockets).
GpuSharing gpu_sharing(int rank, const std::string& host, int local_world, int gpus, bool one_host);

// Sets the variables of `s` in this process (overwriting what was set: ranks that share a GPU
// must not share a host identity). Before the process's first NCCL call.
void apply_gpu_sharing(const GpuSharing& s);

}  // namespace dtrain::detail
