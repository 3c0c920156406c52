// The end-of-run diagnosis: where the time went, in plain words, each finding with the numbers
// behind it and the config change that would help. A pure function of plain numbers (no
// LibTorch), so that constructed cases test it (tests/unit/test_diagnosis.cpp); the report hook
// (src/hooks/report.cpp) gathers the numbers from the run and prints the findings.
//
// Shares are of the step time: the sum of the data, compute, communication and optimizer phases
// (PhaseTimes::total(), evaluation excluded), on rank 0. The thresholds and why (each a finding
// above kNearHigh times it, "close" within the band below that: see the Note before #pragma once):
//   - data-bound above 10%: with prefetching, a loader that keeps up leaves the training thread
//     waiting only for the first batches (well under 1%); a tenth of the step spent waiting is a
//     gain a user sees once the loader keeps up, and far above the noise of the host clock. The
//     launcher's binding is named as the cause when it gives rank 0 fewer CPUs than its loader
//     threads and its training thread while at least half of the host's CPUs stay idle.
//   - communication-bound above 10%: the all-reduce hidden behind backward is counted in compute;
//     what is left in `comm` is the wait after backward (plus one small agreement per step), so
//     a tenth of the step there is communication that overlap did not hide. When the gradient
//     buckets explain under a tenth of it (the last step's exposed waits against the mean
//     collective time per step), the finding says the ranks waited for each other instead: nothing
//     was exposed on the wire, the ranks waited for each other. When every bucket that waited is
//     under kLatencyBoundBytes the wait is latency (each all-reduce's fixed cost) and skew, so
//     the fixes leave out what only shrinks the bytes (bf16 gradients) and name fewer ranks.
//   The gradients' wait and the ranks' waiting for each other are one verdict,
//   "communication-bound": which of them it was is read from the last step's buckets alone, a
//   sample that changes from run to run, so it is said in the finding, not its kind.
//   A fix that raises the per-rank batch says that it changes the training recipe (scale the
//   learning rate with it and compare the loss curves), wherever it is offered.
//   - launch-bound on CUDA below 60% GPU busy (NVML, 3 or more samples after the first loss window)
//   when
//     neither the data nor the communication
//     explains the idle GPU; without NVML figures, an eager step of a small model (under 20M
//     parameters) whose forward/backward takes the host under 5 ms per micro-batch: a few hundred
//     kernels at 5-10 us of launch cost each, so the launches are the step.
//   - the slowest rank when the ranks' data + compute + optimizer seconds differ by more than
//     10% on GPUs, 20% on CPUs (ranks that share a host's memory bandwidth, caches and other
//     processes spread wider): synchronous data parallelism runs at the slowest rank's pace, the
//     others wait for it.
//   - memory headroom when the peak is under half of 90% of the device (micro_batch: auto leaves
//     10% free): the micro-batch can at least double. The growth is the largest power of two
//     under 0.9 * total / peak, a lower bound (weights and optimizer state do not grow with it).
//   - memory by kind, whenever the peak is measured (CUDA): rank 0's peak split into weights,
//     gradients, optimizer state and the rest (activations and the step's workspace: the
//     reducer's buckets, library workspaces, the batch), Note [memory ladder].
// A verdict holds across identical runs: a share (data wait, communication, the ranks' spread)
// above kNearHigh times its threshold is a finding; one between kNearLow and kNearHigh times it
// is "close", named in one line beside the verdict (the dominant phase when nothing is above), so
// that identical runs whose noise moves a share across its threshold give the same verdict. On
// CPUs, identical 2-rank runs measured communication shares of 20% to 66%, and a spread of 17%
// in one of three. Binding advice (--bind-to none, --map-by slot:PE=N, mpirun-local.sh's binding)
// is given only where the affinity seen makes it new: more CPUs only for ranks of one CPU each
// while half of the host is idle, cores of their own only for ranks whose CPUs overlap.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dtrain/records.h"

namespace dtrain::detail {

constexpr double kDataBoundShare = 0.10;
constexpr double kCommBoundShare = 0.10;
constexpr double kExposedShare = 0.10;
// A bucket under this many bytes is latency-bound on any interconnect: at 10 GB/s 256 KiB takes
// about 26 us, the order of one all-reduce's fixed cost (the diagnosis then suggests nothing that
// shrinks the bytes, such as bf16 gradients).
constexpr int64_t kLatencyBoundBytes = 256 << 10;
constexpr double kLowGpuBusyPercent = 60;
constexpr double kSmallModelParameters = 20e6;
constexpr double kLaunchBoundMicroSeconds = 5e-3;
constexpr double kRankSpread = 0.10;
constexpr double kUsableMemory = 0.9;
// The band around a threshold t of a share where it is "close": [kNearLow * t, kNearHigh * t].
constexpr double kNearLow = 0.5, kNearHigh = 1.5;

// What the diagnosis looks at: a run's settings and measurements.
struct DiagnosisInput {
  bool on_cuda = false;
  int world = 1;
  int64_t steps = 0;
  PhaseTimes phases;                    // rank 0, the whole run
  std::vector<PhaseTimes> rank_phases;  // every rank's, index = rank (empty: unknown)
  std::vector<std::string> rank_hosts;  // index = rank (empty: unknown)
  // The loader: data.workers, data.prefetch, data.pin_memory.
  int64_t workers = 0, prefetch = 0;
  bool pin_memory = false;
  // The launcher's binding on rank 0's host (runtime/cpu_binding.h): the CPUs rank 0 may use, the
  // host's CPUs no rank may use (0: none idle, or unknown) and what would give each rank more.
  int rank_cpus = 0, idle_cpus = 0;
  std::string binding_fix;
  // Ranks of rank 0's host whose CPU masks overlap rank 0's, itself included (1: its CPUs are its
  // own, as launch/mpirun-local.sh binds them): binding is advised only where ranks share CPUs.
  int sharing_ranks = 1;
  // The gradient engine's last synchronized step on rank 0 (empty: no engine, or CUDA graph), and
  // the settings: dist.bucket_cap_mb, dist.first_bucket_mb, dist.overlap, dist.grad_dtype.
  std::vector<BucketTiming> buckets;
  double backward_end = 0;
  double bucket_cap_mb = 0, first_bucket_mb = 0;
  bool overlap = true;
  std::string grad_dtype = "fp32";
  // Launches: NVML's mean GPU busy percent over the run (absent: no NVML figures), how steps ran
  // (TrainSummary::step_mode), train.cuda_graph ("auto" | "on" | "off"), the model's size.
  std::optional<double> gpu_busy_percent;
  std::string step_mode;
  std::string cuda_graph = "auto";
  int64_t parameters = 0;
  // Batches: the micro-batch at the start and at the end, the per-rank batch.
  int64_t first_micro_batch = 0, micro_batch = 0, rank_batch = 0;
  // Rank 0's device memory: the caching allocator's peak and the device's size (0: CPU).
  int64_t memory_peak = 0, memory_total = 0;
  // Rank 0's memory by kind: weights, gradients, optimizer state (its shard of
  // `optimizer_shards` ranks).
  int64_t weight_bytes = 0, gradient_bytes = 0, optimizer_state_bytes = 0;
  int optimizer_shards = 1;
  // Recoveries: steps redone after out-of-memory, steps skipped for non-finite gradients (fp16,
  // train.skip_nonfinite); train.precision.
  int64_t oom_retries = 0, skipped_steps = 0;
  std::string precision = "fp32";
};

struct Finding {
  std::string kind;  // "data-bound", "communication-bound", "close",
                     // "launch-bound", "memory headroom", "memory by kind",
                     // "slowest rank", "out of memory", "skipped steps", "compute-bound",
                     // "optimizer-bound", "no steps"
  std::string what;  // the finding and its numbers
  std::string fix;   // the change that would help ("" when there is nothing to change)
};

// The findings, bottlenecks first. When none of data, communication, launches or a slow rank
// limits the run, one finding names the phase that dominates.
std::vector<Finding> diagnose(const DiagnosisInput& in);

// Bucket b's wait after backward that nothing hid: from when the step could wait for it (the
// end of backward, or the previous bucket's wait returning) to when its wait returned.
double exposed_wait(const std::vector<BucketTiming>& buckets, size_t b, double backward_end);

// The largest power of two n >= 1 with n * peak <= kUsableMemory * total (1 when unknown).
int64_t micro_batch_growth(int64_t peak, int64_t total);

// "diagnosis:\n  data-bound: ...\n    fix: ...\n" for the log and report.txt.
std::string diagnosis_text(const std::vector<Finding>& findings);

}  // namespace dtrain::detail
