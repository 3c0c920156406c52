#include "cli/env_facts.h"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "config/data_formats.h"
#include "cuda/device.h"
#include "cuda/jpeg_batch.h"
#include "dtrain/error.h"
#include "dtrain/session.h"
#include "dtrain/version.h"
#include "runtime/binding.h"
#include "runtime/cpu_binding.h"
#include "runtime/launch_check.h"
#include "runtime/threads.h"
#include "telemetry/nvml.h"
#include "util/dir.h"
#include "util/torch_compat.h"
#include "util/versions.h"

namespace dtrain::cli {
namespace {

using nlohmann::json;

// "" as JSON null: a fact that is unknown or absent.
json text_or_null(const std::string& s) { return s.empty() ? json(nullptr) : json(s); }

std::string mpi_library_version() {
  char buf[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int len = 0;
  if (MPI_Get_library_version(buf, &len) != MPI_SUCCESS) return "";
  std::string s(buf, strnlen(buf, std::min<size_t>(static_cast<size_t>(len), sizeof buf)));
  const size_t nl = s.find_first_of("\r\n");  // Open MPI's goes on with its build details
  if (nl != std::string::npos) s.resize(nl);
  while (!s.empty() && (s.back() == ' ' || s.back() == ',')) s.pop_back();
  return s;
}

std::string mpi_standard_version() {
  int major = 0, minor = 0;
  if (MPI_Get_version(&major, &minor) != MPI_SUCCESS) return "";
  return std::to_string(major) + "." + std::to_string(minor);
}

}  // namespace

MachineFacts machine_facts(const std::map<std::string, std::string>& env) {
  MachineFacts m;
  m.version_text = version_text();
  m.dtrain = DTRAIN_VERSION;
  m.libtorch = compat::libtorch_version();
  m.cuda_build = detail::built_with_cuda();
  m.cuda = detail::cuda_versions();
  const detail::Nvml& nvml = detail::Nvml::system();
  m.nvml_ok = nvml.ok();
  m.nvml_reason = nvml.reason();
  m.driver = nvml.driver_version();
  m.nvml_cuda_driver = nvml.cuda_driver_version();
  m.online_cpus = static_cast<int>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
  m.host_cpus = detail::host_cpus();
  m.mpi_library = mpi_library_version();
  m.mpi_standard = mpi_standard_version();
  m.cuda_devices = cuda_device_count();
  // nvJPEG, and which of its decoders data.decode gpu gets here (the GPU's JPEG engines or CUDA).
  const detail::NvjpegStatus nvjpeg = detail::nvjpeg_status();
  m.nvjpeg_ok = nvjpeg.usable, m.nvjpeg = nvjpeg.text;
  if (nvjpeg.usable && m.cuda_devices > 0) {
    try {
      m.jpeg_decoder = detail::JpegBatchDecoder(0).backend();
    } catch (const Error& e) {
      m.nvjpeg_ok = false;
      m.nvjpeg += "; its decoder cannot be made on GPU 0: " + e.cause();
    }
  }
  std::vector<std::string> cuda_pci;
  for (int j = 0; j < m.cuda_devices; ++j)
    cuda_pci.push_back(detail::normalize_pci_bus_id(detail::pci_bus_id(j)));
  if (m.nvml_ok) {
    for (const detail::NvmlDeviceInfo& d : nvml.devices()) {
      GpuFacts g;
      g.nvml_index = d.index;
      g.name = d.name;
      g.pci_bus_id = d.pci_bus_id;
      g.cc_major = d.cc_major, g.cc_minor = d.cc_minor;
      for (int j = 0; j < m.cuda_devices; ++j)
        if (cuda_pci[static_cast<size_t>(j)] == d.pci_bus_id) g.cuda_index = j;
      detail::Nvml::Device h = nullptr;
      std::string why;
      if (nvml.find(d.pci_bus_id, &h, &why)) {
        const detail::NvmlReading r = nvml.read(h);
        g.memory_total = r.memory_total, g.memory_used = r.memory_used;
        g.utilization = r.utilization;
      }
      m.gpus.push_back(g);
    }
  } else {
    for (int j = 0; j < m.cuda_devices; ++j) {
      GpuFacts g;
      g.cuda_index = j;
      g.name = detail::device_name(j);
      g.pci_bus_id = cuda_pci[static_cast<size_t>(j)];
      m.gpus.push_back(g);
    }
  }
  if (auto it = env.find("CUDA_VISIBLE_DEVICES"); it != env.end())
    m.cuda_visible_devices = it->second;
  m.environment = env;
  return m;
}

RankFacts rank_facts(const Runtime& rt, const std::map<std::string, std::string>& env,
                     const RunConfig& run, int cuda_devices) {
  RankFacts r;
  r.rank = rt.rank(), r.world = rt.world();
  r.local_rank = rt.local_rank(), r.local_world = rt.local_world();
  r.host = rt.host();
  r.launcher = detail::launcher_name(env);
  try {
    detail::check_launch(env, r.rank, r.world, r.local_rank);
  } catch (const Error& e) {
    r.launch_error = e.cause();
  }
  r.launch_advice = detail::launch_advice(env, r.world);
  const int gpu = detail::device_for_rank(run.device, r.local_rank, cuda_devices);
  r.device = gpu >= 0 ? "cuda:" + std::to_string(gpu) : "cpu";
  if (gpu >= 0) r.gpu_pci = detail::normalize_pci_bus_id(detail::pci_bus_id(gpu));
  const std::vector<int> cpus = detail::affinity_cpu_list();
  r.cpus = detail::cpu_list_text(cpus);
  r.cpu_count = detail::affinity_cpus();
  MPI_Comm node;
  MPI_Comm_split_type(rt.mpi_comm(), MPI_COMM_TYPE_SHARED, r.rank, MPI_INFO_NULL, &node);
  const detail::NodeCpus node_cpus = detail::node_cpus(node);
  MPI_Comm_free(&node);
  r.node_cpus_used = node_cpus.used;
  const detail::ThreadChoice t =
      detail::choose_threads(r.cpu_count, node_cpus.sharing, run.threads);
  r.threads = t.threads;
  r.threads_reason = t.reason;
  return r;
}

json to_json(const MachineFacts& m) {
  const detail::CudaVersions& c = m.cuda;
  json gpus = json::array();
  for (const GpuFacts& g : m.gpus) {
    json j = {{"name", g.name},
              {"pci_bus_id", g.pci_bus_id},
              {"nvml_index", g.nvml_index < 0 ? json(nullptr) : json(g.nvml_index)},
              {"cuda_index", g.cuda_index < 0 ? json(nullptr) : json(g.cuda_index)}};
    if (g.nvml_index >= 0) {
      j["compute_capability"] = std::to_string(g.cc_major) + "." + std::to_string(g.cc_minor);
      j["memory_total"] = g.memory_total;
      j["memory_used"] = g.memory_used;
      j["utilization"] = g.utilization;
    }
    gpus.push_back(j);
  }
  return {
      {"version_text", m.version_text},
      {"dtrain", m.dtrain},
      {"libtorch", m.libtorch},
      {"build", m.cuda_build ? "cuda" : "cpu"},
      {"cuda",
       {{"compiled", text_or_null(detail::cuda_version_text(c.runtime_compiled))},
        {"runtime", text_or_null(detail::cuda_version_text(c.runtime))},
        {"driver", text_or_null(detail::cuda_version_text(c.driver))}}},
      {"driver",
       {{"version", text_or_null(m.driver)},
        {"cuda", text_or_null(detail::cuda_version_text(m.nvml_cuda_driver))}}},
      {"cudnn",
       {{"compiled", text_or_null(detail::cudnn_version_text(c.cudnn_compiled))},
        {"runtime", text_or_null(detail::cudnn_version_text(c.cudnn))}}},
      {"nccl", text_or_null(detail::nccl_version_text(c.nccl))},
      {"nvjpeg",
       {{"ok", m.nvjpeg_ok}, {"text", m.nvjpeg}, {"decoder", text_or_null(m.jpeg_decoder)}}},
      {"mpi",
       {{"library", text_or_null(m.mpi_library)}, {"standard", text_or_null(m.mpi_standard)}}},
      {"nvml", {{"ok", m.nvml_ok}, {"reason", text_or_null(m.nvml_reason)}}},
      {"cuda_devices", m.cuda_devices},
      {"gpus", gpus},
      {"cuda_visible_devices",
       m.cuda_visible_devices ? json(*m.cuda_visible_devices) : json(nullptr)},
      {"environment", m.environment},
  };
}

std::string data_problem(const DataConfig& data) {
  if (!config::format_reads(data.format, "data.path")) return "";  // generated data
  const std::string dir = data.path.empty() ? "." : data.path;
  if (detail::is_dir(dir)) return "";
  return "data.path: no such folder: " + dir + " (data.format " + to_string(data.format) +
         " reads its files there; set data.path to the folder that holds them)";
}

json to_json(const RankFacts& r) {
  return {{"rank", r.rank},
          {"world", r.world},
          {"local_rank", r.local_rank},
          {"local_world", r.local_world},
          {"host", r.host},
          {"launcher", r.launcher},
          {"device", r.device},
          {"gpu_pci_bus_id", text_or_null(r.gpu_pci)},
          {"cpus", r.cpus},
          {"cpu_count", r.cpu_count},
          {"threads", r.threads},
          {"threads_reason", r.threads_reason},
          {"data_problem", text_or_null(r.data_problem)}};
}

}  // namespace dtrain::cli
