// What `dtrain env` reports: the facts of this machine (versions of the stack, the GPUs NVML and
// CUDA see) and of this rank (its place in the job, its device, its CPUs and threads), as plain
// values and as JSON (the output of `dtrain env --json`, gathered from every rank).
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cuda/versions.h"
#include "dtrain/config.h"
#include "dtrain/runtime.h"

namespace dtrain::cli {

struct GpuFacts {
  int nvml_index = -1;
  int cuda_index = -1;  // -1: NVML sees it, CUDA does not (CUDA_VISIBLE_DEVICES, a CPU build)
  std::string name, pci_bus_id;
  int cc_major = 0, cc_minor = 0;
  double memory_total = 0, memory_used = 0;  // bytes
  double utilization = 0;                    // percent, NVML's last sample period
};

struct MachineFacts {
  std::string version_text;  // dtrain's --version line
  std::string dtrain, libtorch;
  bool cuda_build = false;
  detail::CudaVersions cuda;
  bool nvml_ok = false;
  std::string nvml_reason;   // why not nvml_ok
  std::string driver;        // NVIDIA driver version (NVML)
  int nvml_cuda_driver = 0;  // the CUDA version the driver supports, as NVML says
  bool nvjpeg_ok = false;
  std::string nvjpeg;        // "nvJPEG 13.0.1", or why none loads (nvjpeg_status())
  std::string jpeg_decoder;  // the batched decoder on GPU 0: "hardware" or "CUDA"; "" when none
  std::string mpi_library, mpi_standard;
  int cuda_devices = 0;        // visible to CUDA in this process
  int online_cpus = 0;         // CPUs of this host that are online (sysconf), whatever the binding
  int host_cpus = 0;           // of those, the ones the job could use (cgroup; cpu_binding.h)
  std::vector<GpuFacts> gpus;  // NVML's, else CUDA's without figures
  std::optional<std::string> cuda_visible_devices;
  std::map<std::string, std::string> environment;  // the launcher-related variables that are set
};

struct RankFacts {
  int rank = 0, world = 1, local_rank = 0, local_world = 1;
  std::string host;
  std::string launcher;       // launch_check.h: mpirun, srun, none
  std::string launch_error;   // the launch check's Error (training stops); "" when none
  std::string launch_advice;  // launch_check.h's advice; "" when none
  std::string device;         // "cuda:0", "cpu"
  std::string gpu_pci;        // the bound GPU's PCI bus id ("" on the CPU)
  std::string cpus;           // the affinity mask: "0-3,8"
  int cpu_count = 0;
  int node_cpus_used = 0;  // CPUs in the union of the masks of this host's ranks (0: unknown)
  int threads = 1;         // intra-op threads run.threads gives this rank
  std::string threads_reason;
  std::string
      data_problem;  // data_problem() of the config's data on this rank's host ("" when none)
};

// What stops the config's data from being read on this host, before any of it is read: "data.path:
// no such folder: DIR (...)" when the format reads files and data.path is not a folder here; ""
// otherwise (synthetic data, no config, a folder that is there).
std::string data_problem(const DataConfig& data);

// `env` holds the variables the program read (launcher_variables() and env_variables()).
MachineFacts machine_facts(const std::map<std::string, std::string>& env);
// A collective over the runtime's ranks of one node (the ranks sharing CPUs).
RankFacts rank_facts(const Runtime& rt, const std::map<std::string, std::string>& env,
                     const RunConfig& run, int cuda_devices);

nlohmann::json to_json(const MachineFacts& m);
nlohmann::json to_json(const RankFacts& r);

}  // namespace dtrain::cli
