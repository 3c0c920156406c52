#include "runtime/gpu_sharing.h"

#include <cstdlib>

namespace dtrain::detail {

GpuSharing gpu_sharing(int rank, const std::string& host, int local_world, int gpus,
                       bool one_host) {
  GpuSharing s;
  if (gpus <= 0 || local_world <= gpus) return s;
  s.env = {{"NCCL_HOSTID", host + ".dtrain-rank" + std::to_string(rank)},
           {"NCCL_P2P_DISABLE", "1"},
           {"NCCL_SHM_DISABLE", "1"}};
  if (one_host) {
    s.env.emplace_back("NCCL_SOCKET_IFNAME", "lo");
    s.env.emplace_back("NCCL_IB_DISABLE", "1");
  }
  std::string vars;
  for (size_t i = 1; i < s.env.size(); ++i)
    vars += (vars.empty() ? "" : ", ") + s.env[i].first + "=" + s.env[i].second;
  s.note = std::to_string(local_world) + " ranks on " + host + " share " + std::to_string(gpus) +
           " GPU(s) through NCCL, which refuses two ranks of one host on one GPU: each rank of " +
           host + " takes a host identity of its own (NCCL_HOSTID=" + host +
           ".dtrain-rank<rank>) and NCCL connects them through sockets" +
           (one_host ? " over loopback" : "") + " (" + vars +
           "). This is NCCL's real code path, but far slower than one rank per GPU (sockets, and "
           "the ranks take turns on the GPU): use it to try a multi-GPU config, not to measure "
           "speed (Note [ranks sharing a GPU])";
  return s;
}

void apply_gpu_sharing(const GpuSharing& s) {
  for (const auto& [name, value] : s.env) ::setenv(name.c_str(), value.c_str(), /*overwrite=*/1);
}

}  // namespace dtrain::detail
