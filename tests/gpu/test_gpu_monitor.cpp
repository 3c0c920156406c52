// The `gpu` tier (tests/gpu/main.cpp skips without CUDA): NVML's sampler on a real GPU. The
// monitor finds GPU 0 by CUDA's PCI bus id, and a busy loop of matrix products shows as
// utilization above 50% with memory in use; NVML's figures agree with CUDA's facts.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>

#include "cuda/device.h"
#include "cuda/versions.h"
#include "telemetry/gpu_monitor.h"
#include "telemetry/nvml.h"

namespace dtrain::detail {
namespace {

TEST(GpuMonitor, SeesABusyGpu) {
  const Nvml& nvml = Nvml::system();
  ASSERT_TRUE(nvml.ok()) << nvml.reason();
  const std::string pci = pci_bus_id(0);
  ASSERT_FALSE(pci.empty());
  Nvml::Device h = nullptr;
  std::string why;
  const auto info = nvml.find(pci, &h, &why);
  ASSERT_TRUE(info) << why;
  EXPECT_EQ(info->pci_bus_id, normalize_pci_bus_id(pci));
  EXPECT_EQ(info->name, device_name(0));
  EXPECT_GT(nvml.cuda_driver_version(), 0);
  EXPECT_FALSE(nvml.driver_version().empty());

  GpuMonitor monitor(pci, 0.05);
  ASSERT_TRUE(monitor.active()) << monitor.inactive_reason();
  const at::Tensor a = at::randn({4096, 4096}, at::TensorOptions().device(at::kCUDA, 0));
  at::Tensor b = a.mm(a);
  (void)b.sum().item<float>();  // waits for the GPU
  (void)monitor.take_window();  // from here on: busy
  const auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 3.0) {
    for (int i = 0; i < 20; ++i) b = a.mm(a);
    (void)b.sum().item<float>();  // never more than a few ms of work queued ahead
  }
  const auto w = monitor.take_window();
  ASSERT_TRUE(w);
  std::printf(
      "GPU %d: %d samples, utilization %.1f%%, memory %.0f / %.0f MiB, %.0f W, SM %.0f MHz\n",
      w->index, w->samples, w->utilization, w->memory_used / 1048576.0, w->memory_total / 1048576.0,
      w->power_w, w->sm_clock_mhz);
  EXPECT_EQ(w->index, info->index);
  EXPECT_GE(w->samples, 20);  // 3 s at 20 samples per second, however loaded the host is
  EXPECT_GT(w->utilization, 50.0);
  EXPECT_GT(w->memory_used, 64.0 * 1024 * 1024);  // two 64 MiB matrices and the context at least
  EXPECT_GT(w->memory_total, w->memory_used);
  EXPECT_GT(w->sm_clock_mhz, 0.0);
  const auto run = monitor.run_mean();
  ASSERT_TRUE(run);
  EXPECT_GE(run->samples, w->samples);
}

TEST(GpuVersions, TheCudaStackIsKnown) {
  const CudaVersions v = cuda_versions();
  EXPECT_GT(v.runtime_compiled, 0);
  EXPECT_GT(v.runtime, 0);
  EXPECT_GT(v.driver, 0);
  EXPECT_GE(v.driver / 1000, v.runtime / 1000) << "the driver's CUDA is older than the runtime";
  EXPECT_GT(v.nccl, 0);
  // NVML speaks for the kernel driver; cudaDriverGetVersion for the libcuda loaded, which a CUDA
  // forward-compatibility package may make newer: the same major version or more.
  EXPECT_GE(v.driver / 1000, Nvml::system().cuda_driver_version() / 1000);
}

}  // namespace
}  // namespace dtrain::detail
