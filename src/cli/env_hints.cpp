#include "cli/env_hints.h"

#include <algorithm>

#include "runtime/cpu_binding.h"
#include "util/versions.h"

namespace dtrain::cli {
namespace {

std::string gpu_count_text(size_t n) { return std::to_string(n) + " GPU(s)"; }

std::string visible_note(const MachineFacts& m) {
  if (!m.cuda_visible_devices) return "";
  return " (CUDA_VISIBLE_DEVICES=" +
         (m.cuda_visible_devices->empty() ? std::string("''") : *m.cuda_visible_devices) +
         " hides the others)";
}

}  // namespace

std::vector<Hint> env_hints(const MachineFacts& m, const RankFacts& r, DeviceKind device) {
  std::vector<Hint> out;
  auto stop = [&](std::string t) { out.push_back({true, std::move(t)}); };
  auto advise = [&](std::string t) { out.push_back({false, std::move(t)}); };

  // The launcher's numbers against MPI's (runtime/launch_check.h).
  if (!r.launch_error.empty()) stop(r.launch_error);
  if (!r.launch_advice.empty()) advise(r.launch_advice);
  if (!r.data_problem.empty()) stop(r.data_problem);

  const size_t nvml_gpus = m.nvml_ok ? m.gpus.size() : 0;
  if (device == DeviceKind::kCuda && m.cuda_devices == 0) {
    std::string why;
    if (!m.cuda_build)
      why = "this dtrain was built with a CPU-only LibTorch";
    else if (nvml_gpus > 0)
      why = "NVML sees " + gpu_count_text(nvml_gpus) + visible_note(m);
    else
      why = m.nvml_ok ? "NVML sees none either" : m.nvml_reason;
    stop("run.device is cuda but no CUDA device is visible (" + why + ")");
  } else if (!m.cuda_build && nvml_gpus > 0) {
    advise("NVML sees " + gpu_count_text(nvml_gpus) +
           " but this dtrain was built with a CPU-only LibTorch: it trains on the CPU. Build it "
           "against a CUDA LibTorch to use them");
  } else if (m.cuda_build && m.cuda_devices == 0 && device != DeviceKind::kCpu) {
    advise(nvml_gpus > 0 ? "NVML sees " + gpu_count_text(nvml_gpus) + " but CUDA none" +
                               visible_note(m) + ": ranks train on the CPU"
                         : "no GPU is visible to this CUDA build: ranks train on the CPU");
  }

  if (r.device != "cpu" && m.cuda_devices > 0 && r.local_world > m.cuda_devices)
    advise(std::to_string(r.local_world) + " ranks on " + r.host + " share " +
           gpu_count_text(static_cast<size_t>(m.cuda_devices)) +
           ": ranks on one GPU slow each other down and share its memory; start one rank per GPU");

  // A launcher that binds each rank to a few CPUs of a larger host (Open MPI binds to one core
  // each for 2 ranks or fewer) leaves most of them idle (runtime/cpu_binding.h).
  if (r.cpu_count > 0) {
    const detail::CpuBinding b{r.rank,
                               r.host,
                               r.cpu_count,
                               r.threads,
                               r.local_world,
                               r.node_cpus_used,
                               m.host_cpus > 0 ? m.host_cpus : m.online_cpus,
                               r.launcher == "srun"};
    const std::string idle = detail::idle_cpus_advice(b);
    if (!idle.empty()) advise(idle);
  }

  // The driver must support the CUDA runtime: an older major version cannot run it at all; an
  // older minor version of the same major runs it (CUDA's minor version compatibility) except
  // for code compiled on the fly (PTX).
  const int runtime = m.cuda.runtime > 0 ? m.cuda.runtime : m.cuda.runtime_compiled;
  const int driver = m.cuda.driver > 0 ? m.cuda.driver : m.nvml_cuda_driver;
  if (m.cuda_build && runtime > 0 && driver > 0 && driver < runtime) {
    const std::string facts = "the NVIDIA driver" + (m.driver.empty() ? "" : " " + m.driver) +
                              " supports CUDA up to " + detail::cuda_version_text(driver) +
                              ", older than this dtrain's CUDA runtime " +
                              detail::cuda_version_text(runtime);
    if (driver / 1000 < runtime / 1000)
      stop(facts + ": CUDA cannot start. Update the driver, or build against a LibTorch for CUDA " +
           std::to_string(driver / 1000) + ".x");
    else
      advise(facts +
             ": it runs through CUDA's minor version compatibility, but kernels compiled "
             "at run time (PTX) fail. Update the driver to be safe");
  }

  if (!m.nvml_ok && m.cuda_devices > 0 && r.device != "cpu")
    advise(m.nvml_reason +
           ": the metrics and the report carry no GPU utilization, memory or power");
  return out;
}

}  // namespace dtrain::cli
