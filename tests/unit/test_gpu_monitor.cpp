// NVML and the GPU monitor without a GPU: the sums behind the figures, PCI bus ids, the library
// missing (this machine) or failing to start, and the whole sampler against the stand-in NVML
// (tests/fake_nvml: two GPUs with fixed figures) loaded by path. Version numbers as text.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "telemetry/gpu_monitor.h"
#include "telemetry/gpu_samples.h"
#include "telemetry/nvml.h"
#include "test_paths.h"
#include "test_support.h"
#include "util/versions.h"

namespace dtrain::detail {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

NvmlReading reading(double util, double power, double mem, double sm) {
  NvmlReading r;
  r.ok = true;
  r.utilization = util;
  r.power_w = power;
  r.memory_used = mem;
  r.memory_total = 100;
  r.sm_clock_mhz = sm;
  r.memory_clock_mhz = sm / 2;
  return r;
}

TEST(GpuSampleSums, WindowsAreMeansSinceThePreviousTakeAndLevelsAreTheLastSample) {
  GpuSampleSums s(3);
  EXPECT_FALSE(s.take_window());
  EXPECT_FALSE(s.run_mean());
  s.add(reading(10, 100, 1, 1000));
  s.add(reading(20, 200, 2, 1100));
  s.add(reading(60, 300, 3, 1200));
  NvmlReading failed;  // read nothing: not a sample
  failed.utilization = 99;
  s.add(failed);
  auto w = s.take_window();
  ASSERT_TRUE(w);
  EXPECT_EQ(w->index, 3);
  EXPECT_EQ(w->samples, 3);
  EXPECT_DOUBLE_EQ(w->utilization, (10 + 20 + 60) / 3.0);
  EXPECT_DOUBLE_EQ(w->power_w, (100 + 200 + 300) / 3.0);
  EXPECT_DOUBLE_EQ(w->memory_used, 3);
  EXPECT_DOUBLE_EQ(w->memory_total, 100);
  EXPECT_DOUBLE_EQ(w->sm_clock_mhz, 1200);
  EXPECT_DOUBLE_EQ(w->memory_clock_mhz, 600);

  s.add(reading(40, 50, 7, 900));
  w = s.take_window();
  ASSERT_TRUE(w);
  EXPECT_EQ(w->samples, 1);
  EXPECT_DOUBLE_EQ(w->utilization, 40);
  EXPECT_DOUBLE_EQ(w->power_w, 50);

  // No sample since: the latest sample's figures, marked by samples = 0.
  w = s.take_window();
  ASSERT_TRUE(w);
  EXPECT_EQ(w->samples, 0);
  EXPECT_DOUBLE_EQ(w->utilization, 40);
  EXPECT_DOUBLE_EQ(w->memory_used, 7);

  const auto run = s.run_mean();
  ASSERT_TRUE(run);
  EXPECT_EQ(run->samples, 4);
  EXPECT_DOUBLE_EQ(run->utilization, (10 + 20 + 60 + 40) / 4.0);
  EXPECT_DOUBLE_EQ(run->power_w, (100 + 200 + 300 + 50) / 4.0);
  EXPECT_DOUBLE_EQ(run->memory_used, 7);
  EXPECT_DOUBLE_EQ(run->sm_clock_mhz, 900);
}

TEST(GpuSampleSums, TheRunMeanLeavesOutTheStartUpOnceASteadySampleCame) {
  GpuSampleSums s(0);
  s.add(reading(2, 80, 1, 1000));  // start-up: the GPU mostly idle
  s.add(reading(4, 90, 1, 1000));
  s.start_steady();
  // No sample since start_steady: every sample so far, rather than nothing.
  ASSERT_TRUE(s.run_mean());
  EXPECT_EQ(s.run_mean()->samples, 2);
  EXPECT_DOUBLE_EQ(s.run_mean()->utilization, 3);
  EXPECT_FALSE(s.run_mean()->steady);  // the diagnosis does not judge by these
  s.add(reading(96, 600, 5, 1900));
  s.add(reading(100, 700, 5, 1900));
  const auto run = s.run_mean();
  ASSERT_TRUE(run);
  EXPECT_EQ(run->samples, 2);
  EXPECT_TRUE(run->steady);
  EXPECT_DOUBLE_EQ(run->utilization, 98);
  EXPECT_DOUBLE_EQ(run->power_w, 650);
}

TEST(Nvml, PciBusIdsOfCudaAndNvmlAreOneSpelling) {
  EXPECT_EQ(normalize_pci_bus_id("0000:19:00.0"), "0000:19:00.0");
  EXPECT_EQ(normalize_pci_bus_id("00000000:19:00.0"), "0000:19:00.0");
  EXPECT_EQ(normalize_pci_bus_id("00000000:3b:00.0"), "0000:3B:00.0");
  EXPECT_EQ(normalize_pci_bus_id("0001:3B:1f.7"), "0001:3B:1F.7");
  EXPECT_EQ(normalize_pci_bus_id("3b:00.0"), "0000:3B:00.0");
  EXPECT_EQ(normalize_pci_bus_id("12345678:3b:00.0"), "12345678:3B:00.0");
  for (const char* bad : {"", "gpu0", "0000:19:00", "0000:1g:00.0", "0000:19:20.0", "0000:19:00.8",
                          "0000:100:00.0", ":19:00.0", "0000::00.0", "123456789:19:00.0"})
    EXPECT_EQ(normalize_pci_bus_id(bad), "") << bad;
}

TEST(Nvml, AMissingLibraryIsAReasonNotAFailure) {
  Nvml n({"libdtrain-no-such-nvml.so.1", "libdtrain-no-such-nvml.so"});
  EXPECT_FALSE(n.ok());
  EXPECT_NE(n.reason().find("NVML not found (libdtrain-no-such-nvml.so.1"), std::string::npos)
      << n.reason();
  EXPECT_EQ(n.reason().find("libdtrain-no-such-nvml.so:"), std::string::npos) << n.reason();
  EXPECT_NE(n.reason().find("): no GPU statistics"), std::string::npos) << n.reason();
  EXPECT_EQ(n.device_count(), 0);
  EXPECT_TRUE(n.devices().empty());
  EXPECT_EQ(n.driver_version(), "");
  EXPECT_EQ(n.cuda_driver_version(), 0);
  Nvml::Device h = nullptr;
  std::string why;
  EXPECT_FALSE(n.find("0000:19:00.0", &h, &why));
  EXPECT_EQ(why, n.reason());
}

// This machine's driver library, if it has none (the CPU machines the unit tier runs on).
bool system_has_nvml() {
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib) dlclose(lib);
  return lib != nullptr;
}

TEST(GpuMonitor, WithoutNvmlGivesNoFiguresAndSaysWhy) {
  if (system_has_nvml()) GTEST_SKIP() << "this machine has NVML (the gpu tier covers it)";
  EXPECT_FALSE(Nvml::system().ok());
  EXPECT_NE(Nvml::system().reason().find("libnvidia-ml.so.1"), std::string::npos);
  const auto t0 = std::chrono::steady_clock::now();
  {
    GpuMonitor m("0000:19:00.0", 0.01);
    EXPECT_FALSE(m.active());
    EXPECT_NE(m.inactive_reason().find("NVML not found (libnvidia-ml.so.1"), std::string::npos)
        << m.inactive_reason();
    EXPECT_FALSE(m.take_window());
    EXPECT_FALSE(m.run_mean());
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);
}

TEST(GpuMonitor, ACpuRankHasNoMonitor) {
  GpuMonitor m("", 0.5);
  EXPECT_FALSE(m.active());
  EXPECT_EQ(m.inactive_reason(), "no GPU (a CPU rank)");
  EXPECT_FALSE(m.take_window());
}

TEST(GpuMonitor, TheIntervalMustBePositive) {
  const std::string msg = test::message_of([] { GpuMonitor m("", 0.0); });
  EXPECT_NE(msg.find("run.gpu_sample_s"), std::string::npos) << msg;
  EXPECT_NE(msg.find("more than 0"), std::string::npos) << msg;
}

// ---- the stand-in NVML: tests/fake_nvml/fake_nvml.cpp ------------------------------------
TEST(Nvml, ReadsTheFakeDriversFacts) {
  Nvml n({dtrain::test::fake_nvml()});
  ASSERT_TRUE(n.ok()) << n.reason();
  EXPECT_EQ(n.reason(), "");
  EXPECT_EQ(n.driver_version(), "555.42.06");
  EXPECT_EQ(n.cuda_driver_version(), 12050);
  ASSERT_EQ(n.device_count(), 2);
  const auto all = n.devices();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].index, 0);
  EXPECT_EQ(all[0].name, "Fake GPU H200");
  EXPECT_EQ(all[0].pci_bus_id, "0000:19:00.0");
  EXPECT_EQ(all[0].cc_major, 9);
  EXPECT_EQ(all[0].cc_minor, 0);
  EXPECT_EQ(all[1].name, "Fake GPU A100");
  EXPECT_EQ(all[1].pci_bus_id, "0000:3B:00.0");

  Nvml::Device h = nullptr;
  std::string why;
  auto d = n.find("0000:3b:00.0", &h, &why);  // CUDA's spelling, lower case
  ASSERT_TRUE(d) << why;
  EXPECT_EQ(d->index, 1);
  EXPECT_EQ(d->cc_major, 8);
  NvmlReading r = n.read(h);
  EXPECT_TRUE(r.ok);
  EXPECT_DOUBLE_EQ(r.memory_total, 40 * kGiB);
  EXPECT_DOUBLE_EQ(r.memory_used, 2 * kGiB);
  EXPECT_DOUBLE_EQ(r.sm_clock_mhz, 1410);
  EXPECT_DOUBLE_EQ(r.memory_clock_mhz, 1593);
  EXPECT_DOUBLE_EQ(r.power_w, 0);
  ASSERT_EQ(r.failed.size(), 1u);
  EXPECT_EQ(r.failed[0], "power: Not Supported");

  d = n.find("0000:19:00.0", &h, &why);
  ASSERT_TRUE(d) << why;
  EXPECT_EQ(d->index, 0);
  r = n.read(h);
  EXPECT_TRUE(r.failed.empty());
  EXPECT_DOUBLE_EQ(r.utilization, 37);
  EXPECT_DOUBLE_EQ(r.power_w, 123.456);
  EXPECT_DOUBLE_EQ(r.memory_used, 1 * kGiB);

  EXPECT_FALSE(n.find("0000:99:00.0", &h, &why));
  EXPECT_EQ(why, "NVML has no GPU 0000:99:00.0 (nvmlDeviceGetHandleByPciBusId_v2: Not Found)");
  EXPECT_FALSE(n.find("gpu0", &h, &why));
  EXPECT_EQ(why, "'gpu0' is not a PCI bus id");
}

TEST(Nvml, ADriverThatDoesNotStartIsAReason) {
  ::setenv("FAKE_NVML_INIT_ERROR", "9", 1);
  Nvml n({dtrain::test::fake_nvml()});
  ::unsetenv("FAKE_NVML_INIT_ERROR");
  EXPECT_FALSE(n.ok());
  EXPECT_EQ(n.reason(),
            "NVML could not start (nvmlInit_v2: Driver Not Loaded [9]): no GPU statistics");
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(GpuMonitor, SamplesTheGpuWithThatPciBusIdInTheBackground) {
  Nvml n({dtrain::test::fake_nvml()});
  ASSERT_TRUE(n.ok()) << n.reason();
  GpuMonitor m("0000:19:00.0", 0.01, n);
  ASSERT_TRUE(m.active()) << m.inactive_reason();
  EXPECT_EQ(m.inactive_reason(), "");
  auto first = m.take_window();  // the sample taken at construction, at least
  ASSERT_TRUE(first);
  EXPECT_GE(first->samples, 1);
  EXPECT_EQ(first->index, 0);
  EXPECT_DOUBLE_EQ(first->utilization, 37);
  EXPECT_DOUBLE_EQ(first->power_w, 123.456);
  EXPECT_DOUBLE_EQ(first->memory_used, 1 * kGiB);
  EXPECT_DOUBLE_EQ(first->memory_total, 80 * kGiB);
  EXPECT_DOUBLE_EQ(first->sm_clock_mhz, 1980);
  EXPECT_DOUBLE_EQ(first->memory_clock_mhz, 2619);
  // Every 10 ms: a window of 300 ms holds many samples (a loaded machine may delay some).
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto w = m.take_window();
  ASSERT_TRUE(w);
  EXPECT_GE(w->samples, 5);
  EXPECT_DOUBLE_EQ(w->utilization, 37);
  auto run = m.run_mean();
  ASSERT_TRUE(run);
  EXPECT_GE(run->samples, first->samples + w->samples);
  EXPECT_DOUBLE_EQ(run->utilization, 37);
}

TEST(GpuMonitor, StopsPromptlyWhateverTheInterval) {
  Nvml n({dtrain::test::fake_nvml()});
  ASSERT_TRUE(n.ok()) << n.reason();
  const auto t0 = std::chrono::steady_clock::now();
  {
    GpuMonitor m("00000000:3B:00.0", 60.0, n);  // NVML's spelling; no power on this one
    ASSERT_TRUE(m.active()) << m.inactive_reason();
    auto w = m.take_window();
    ASSERT_TRUE(w);
    EXPECT_EQ(w->index, 1);
    EXPECT_EQ(w->samples, 1);
    EXPECT_DOUBLE_EQ(w->power_w, 0);
    EXPECT_DOUBLE_EQ(w->memory_used, 2 * kGiB);
  }
  EXPECT_LT(seconds_since(t0), 1.0);
}

TEST(GpuMonitor, AGpuNvmlDoesNotKnowGivesNoFigures) {
  Nvml n({dtrain::test::fake_nvml()});
  GpuMonitor m("0000:99:00.0", 0.01, n);
  EXPECT_FALSE(m.active());
  EXPECT_EQ(m.inactive_reason(),
            "NVML has no GPU 0000:99:00.0 (nvmlDeviceGetHandleByPciBusId_v2: Not Found): no GPU "
            "statistics");
  EXPECT_FALSE(m.take_window());
}

// ---- NVIDIA's version numbers as text (the formulas of cuda_runtime_api.h, cudnn_version.h,
// nccl.h) ---------------------------------------------------------------------------------------
TEST(Versions, NvidiasNumbersReadAsTheirUsersWriteThem) {
  EXPECT_EQ(cuda_version_text(12040), "12.4");
  EXPECT_EQ(cuda_version_text(11080), "11.8");
  EXPECT_EQ(cuda_version_text(12090), "12.9");
  EXPECT_EQ(cuda_version_text(0), "");
  EXPECT_EQ(cudnn_version_text(90100), "9.1.0");  // 9.x: 10000 * major + 100 * minor + patch
  EXPECT_EQ(cudnn_version_text(91002), "9.10.2");
  EXPECT_EQ(cudnn_version_text(8902), "8.9.2");  // 8.x: 1000 * major + 100 * minor + patch
  EXPECT_EQ(cudnn_version_text(0), "");
  EXPECT_EQ(nccl_version_text(22105), "2.21.5");  // 2.9 on: 10000 * major + 100 * minor + patch
  EXPECT_EQ(nccl_version_text(20903), "2.9.3");
  EXPECT_EQ(nccl_version_text(2804), "2.8.4");  // before: 1000 * major + 100 * minor + patch
  EXPECT_EQ(nccl_version_text(0), "");
}

}  // namespace
}  // namespace dtrain::detail
