// src/telemetry/diagnosis.h on constructed runs: data-bound or not, communication-bound with the
// buckets' exposed waits, launch-bound on CUDA, the memory headroom's arithmetic, the slowest
// rank, recoveries, and quiet (one "compute-bound" line) when nothing limits the run. Expected
// shares and factors are computed here from their definitions.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "telemetry/diagnosis.h"
#include "util/format.h"

namespace {

using dtrain::BucketTiming;
using dtrain::PhaseTimes;
using dtrain::detail::diagnose;
using dtrain::detail::DiagnosisInput;
using dtrain::detail::Finding;
using dtrain::detail::format;

PhaseTimes phases(double data, double compute, double comm, double optimizer) {
  PhaseTimes p;
  p.data = data, p.compute = compute, p.comm = comm, p.optimizer = optimizer;
  return p;
}

DiagnosisInput run(const PhaseTimes& p, int world = 1) {
  DiagnosisInput in;
  in.world = world;
  in.steps = 100;
  in.phases = p;
  in.rank_phases.assign(static_cast<size_t>(world), p);
  in.workers = 2, in.prefetch = 4;
  in.bucket_cap_mb = 25, in.first_bucket_mb = 1;
  in.parameters = 1000000;
  in.first_micro_batch = in.micro_batch = in.rank_batch = 64;
  return in;
}

// By value: the findings are often a temporary.
std::optional<Finding> find(const std::vector<Finding>& fs, const std::string& kind) {
  for (const Finding& f : fs)
    if (f.kind == kind) return f;
  return std::nullopt;
}

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

std::string all_text(const std::vector<Finding>& fs) { return dtrain::detail::diagnosis_text(fs); }

std::string percent(double share) {
  return std::to_string(static_cast<int>(std::lround(100 * share))) + "%";
}

TEST(Diagnosis, SlowLoaderIsDataBoundAndNamesTheWorkers) {
  const PhaseTimes p = phases(4.1, 5.0, 0.5, 0.4);
  const auto fs = diagnose(run(p));
  std::optional<Finding> f = find(fs, "data-bound");
  ASSERT_TRUE(f) << all_text(fs);
  EXPECT_TRUE(has(f->what, percent(4.1 / 10.0) + " of step time waiting for data")) << f->what;
  EXPECT_TRUE(has(f->what, "4.1 of 10.0 s")) << f->what;
  EXPECT_TRUE(has(f->fix, "raise data.workers from 2 (e.g. to 4)")) << f->fix;
  EXPECT_TRUE(has(f->fix, "data.prefetch is 4")) << f->fix;
  EXPECT_FALSE(find(fs, "compute-bound")) << "a bottleneck was found: no dominant-phase line";
}

TEST(Diagnosis, ABindingThatStarvesTheLoaderIsNamedWithItsFix) {
  // mpirun -np 2 on a 16-CPU host: each rank bound to 1 core, 2 loader threads, 14 CPUs idle.
  DiagnosisInput in = run(phases(4.1, 5.0, 0.5, 0.4));
  in.rank_cpus = 1, in.idle_cpus = 14;
  in.binding_fix =
      "with mpirun, --bind-to none or --map-by slot:PE=8 gives each of the 2 rank(s) more";
  std::optional<Finding> f = find(diagnose(in), "data-bound");
  ASSERT_TRUE(f);
  EXPECT_TRUE(has(f->what,
                  "each rank may use 1 CPU(s) (the launcher's binding) for its 2 loader "
                  "thread(s) and its training thread, while 14 CPUs of the host stay idle"))
      << f->what;
  EXPECT_EQ(f->fix.rfind("give each rank more CPUs: with mpirun, --bind-to none", 0), 0u) << f->fix;
  EXPECT_TRUE(has(f->fix, "raise data.workers from 2")) << f->fix;
  // Enough CPUs for the loader and the training thread, or none idle: the binding is not named.
  in.rank_cpus = 3;
  EXPECT_FALSE(has(find(diagnose(in), "data-bound")->what, "binding"));
  in.rank_cpus = 1, in.idle_cpus = 0;
  EXPECT_FALSE(has(find(diagnose(in), "data-bound")->what, "binding"));
  // Ranks of more than one CPU each (launch/mpirun-local.sh's share): no --bind-to advice.
  in.rank_cpus = 2, in.idle_cpus = 12;
  EXPECT_FALSE(has(find(diagnose(in), "data-bound")->fix, "--bind-to")) << "2 CPUs each";
}

TEST(Diagnosis, LoaderThatKeepsUpIsNotDataBound) {
  // 4% waiting: under half the 10% threshold: nothing said of the data.
  const auto fs = diagnose(run(phases(0.4, 9.1, 0.0, 0.5)));
  EXPECT_FALSE(find(fs, "data-bound")) << all_text(fs);
  EXPECT_FALSE(find(fs, "close")) << all_text(fs);
  ASSERT_TRUE(find(fs, "compute-bound")) << all_text(fs);
  // Over 1.5 times it (16%): data-bound.
  EXPECT_TRUE(find(diagnose(run(phases(1.6, 7.9, 0.0, 0.5))), "data-bound"));
}

// Issue 54, point 5: identical runs whose data wait lands at 9% and at 11% (either side of the
// 10% threshold) give the same verdict, the data wait named as close beside it.
TEST(Diagnosis, AShareNearItsThresholdDoesNotFlipTheVerdict) {
  for (double data : {0.6, 0.9, 1.1, 1.4}) {
    const auto fs = diagnose(run(phases(data, 9.5 - data, 0.0, 0.5)));
    ASSERT_EQ(fs.size(), 2u) << all_text(fs);
    EXPECT_EQ(fs[0].kind, "compute-bound") << all_text(fs);
    EXPECT_EQ(fs[1].kind, "close") << all_text(fs);
    EXPECT_TRUE(has(fs[1].what, "data wait " + percent(data / 10) + " (15% makes it a finding)"))
        << fs[1].what;
  }
}

// Three identical 2-rank CPU runs under launch/mpirun-local.sh (each rank a core of its own)
// measured 66%, 30% and 20% of the step in communication, the last step's exposed bucket wait at
// 5%, 0% and 42% of the collective time per step, and in the second a 17% spread between the
// ranks: one verdict, communication-bound, and no advice to bind what is already bound.
TEST(Diagnosis, IdenticalCpuRunsGiveOneVerdictAndNoBindingTheyHave) {
  struct Measured {
    double compute, comm, exposed_ms;
    double spread;
  };
  for (const Measured& m : {Measured{3.2, 6.6, 12.0 * 0.66 / 2.16, 0.0},
                            Measured{6.6, 3.0, 0.0, 0.17}, Measured{7.6, 2.0, 5.6, 0.02}}) {
    DiagnosisInput in = run(phases(0.05, m.compute, m.comm, 0.35), 2);
    in.rank_phases[1] = phases(0.05, m.compute * (1 + m.spread) + 0.35 * m.spread, 0, 0.35);
    in.buckets = {{0, 200 << 10, 0.001, 0.001, 0.001 + m.exposed_ms * 1e-3}};
    in.backward_end = 0.001;
    in.rank_cpus = 1, in.sharing_ranks = 1, in.idle_cpus = 0;
    const auto fs = diagnose(in);
    ASSERT_FALSE(fs.empty());
    EXPECT_EQ(fs[0].kind, "communication-bound") << all_text(fs);
    EXPECT_FALSE(find(fs, "slowest rank")) << all_text(fs);
    const std::string text = all_text(fs);
    EXPECT_FALSE(has(text, "cores of its own")) << text;
    EXPECT_FALSE(has(text, "binding")) << text;
    EXPECT_FALSE(has(text, "--bind-to")) << text;
    // Ranks whose CPUs overlap (mpirun --bind-to none on a shared host): the binding is advised
    // where the ranks waited for each other.
    in.sharing_ranks = 2;
    if (m.exposed_ms < 1)
      EXPECT_TRUE(has(all_text(diagnose(in)), "give each rank cores of its own")) << all_text(fs);
  }
}

TEST(Diagnosis, ManyWorkersAlreadySuggestsPrefetchAndPinning) {
  DiagnosisInput in = run(phases(3, 6, 0, 1));
  in.workers = 8, in.on_cuda = true, in.pin_memory = false;
  std::optional<Finding> f = find(diagnose(in), "data-bound");
  ASSERT_TRUE(f);
  EXPECT_TRUE(has(f->fix, "data.workers is already 8")) << f->fix;
  EXPECT_TRUE(has(f->fix, "raise data.prefetch from 4")) << f->fix;
  EXPECT_TRUE(has(f->fix, "data.pin_memory=true")) << f->fix;
  in.workers = 0;
  f = find(diagnose(in), "data-bound");
  ASSERT_TRUE(f);
  EXPECT_TRUE(has(f->fix, "set data.workers (now 0")) << f->fix;
}

TEST(Diagnosis, ExposedWaitStartsAtBackwardEndOrThePreviousWait) {
  // Bucket 0 done at 12 ms, bucket 1 at 30 ms; backward ended at 10 ms.
  const std::vector<BucketTiming> b = {{0, 1 << 20, 0.002, 0.002, 0.012},
                                       {1, 24 << 20, 0.009, 0.010, 0.030}};
  EXPECT_DOUBLE_EQ(dtrain::detail::exposed_wait(b, 0, 0.010), 0.012 - 0.010);
  EXPECT_DOUBLE_EQ(dtrain::detail::exposed_wait(b, 1, 0.010), 0.030 - 0.012);
  // A bucket whose wait returned before backward ended (hidden) has none.
  const std::vector<BucketTiming> hidden = {{0, 1024, 0.001, 0.001, 0.004}};
  EXPECT_EQ(dtrain::detail::exposed_wait(hidden, 0, 0.010), 0.0);
}

TEST(Diagnosis, CommunicationBoundNamesTheBucketsAndTheirWaits) {
  DiagnosisInput in = run(phases(0.1, 6.0, 3.0, 0.9), /*world=*/2);
  in.buckets = {{0, 1 << 20, 0.002, 0.002, 0.012}, {1, 24 << 20, 0.009, 0.010, 0.030}};
  in.backward_end = 0.010;
  const auto fs = diagnose(in);
  std::optional<Finding> f = find(fs, "communication-bound");
  ASSERT_TRUE(f) << all_text(fs);
  EXPECT_TRUE(has(f->what, percent(3.0 / 10.0) + " of step time waiting for gradient all-reduces"))
      << f->what;
  EXPECT_TRUE(has(f->what, "backward ended at 10.0 ms")) << f->what;
  EXPECT_TRUE(has(f->what, "2 bucket(s) waited " + format("%.1f ms", 1e3 * (0.030 - 0.010))))
      << f->what;
  // The worst first: bucket 1 (24 MiB) 18 ms, then bucket 0 (1 MiB) 2 ms.
  const size_t b1 = f->what.find(
      "bucket 1 (24.0 MiB) ready 9.0 ms, launched 10.0 ms, done 30.0 ms: 18.0 ms exposed");
  const size_t b0 = f->what.find(
      "bucket 0 (1.0 MiB) ready 2.0 ms, launched 2.0 ms, done 12.0 ms: 2.0 ms exposed");
  ASSERT_NE(b1, std::string::npos) << f->what;
  ASSERT_NE(b0, std::string::npos) << f->what;
  EXPECT_LT(b1, b0);
  // A sharded optimizer's gradient engine reduce-scatters: the finding says so.
  in.optimizer_shards = 2;
  f = find(diagnose(in), "communication-bound");
  ASSERT_TRUE(f);
  EXPECT_TRUE(has(f->what, "waiting for gradient reduce-scatters after backward")) << f->what;
  EXPECT_FALSE(has(f->what, "all-reduce")) << f->what;
  // The worst bucket could only start as backward ended: smaller buckets; and bf16 on the wire.
  EXPECT_TRUE(has(f->fix, "lower dist.bucket_cap_mb from 25")) << f->fix;
  EXPECT_TRUE(has(f->fix, "dist.grad_dtype=bf16")) << f->fix;
  // Overlap off is the first thing to fix.
  in.overlap = false;
  f = find(diagnose(in), "communication-bound");
  ASSERT_TRUE(f);
  EXPECT_EQ(f->fix.rfind("set dist.overlap=true", 0), 0u) << f->fix;
  // With bf16 already on the wire, it is not suggested again.
  in.overlap = true, in.grad_dtype = "bf16";
  EXPECT_FALSE(has(find(diagnose(in), "communication-bound")->fix, "grad_dtype"));
  // One host: nothing of a network between hosts; two: the finding and the fix name it.
  in.rank_hosts = {"n1", "n1"};
  EXPECT_FALSE(has(find(diagnose(in), "communication-bound")->what, "hosts")) << f->what;
  in.rank_hosts = {"n1", "n2"};
  f = find(diagnose(in), "communication-bound");
  ASSERT_TRUE(f);
  EXPECT_TRUE(has(f->what,
                  "the 2 ranks are on 2 hosts: every reduce-scatter crosses the network "
                  "between them"))
      << f->what;
  EXPECT_TRUE(has(f->fix, "a faster network between the hosts")) << f->fix;
}

TEST(Diagnosis, CollectiveTimeTheBucketsDoNotExplainIsWaitingForOtherRanks) {
  // 30 ms of collectives per step, but the last step's buckets waited 0.03 ms after backward.
  DiagnosisInput in = run(phases(0.1, 6.0, 3.0, 0.9), 2);
  in.buckets = {{0, 1024, 0.00003, 0.00003, 0.00008}};
  in.backward_end = 0.00005;
  const auto fs = diagnose(in);
  // One verdict, communication-bound, either way: the finding says which (one step's sample).
  std::optional<Finding> f = find(fs, "communication-bound");
  ASSERT_TRUE(f) << all_text(fs);
  EXPECT_TRUE(has(f->what, "but not for the gradients: the last step's 1 bucket(s) waited 0.03 ms"))
      << f->what;
  EXPECT_TRUE(has(f->what, "against 30.0 ms of collective time per step")) << f->what;
  EXPECT_TRUE(has(f->fix, "a larger per-rank batch")) << f->fix;
  EXPECT_FALSE(has(f->fix, "cores of its own")) << "rank 0's CPUs are its own: " << f->fix;
  in.sharing_ranks = 2;  // ranks whose CPUs overlap: cores of their own would help
  EXPECT_TRUE(has(find(diagnose(in), "communication-bound")->fix,
                  "give each rank cores of its own (launch/mpirun-local.sh binds them; rank 0 "
                  "shares its CPUs with 1 other rank(s))"));
  // Buckets that waited a tenth of it or more: the gradients' wait, the buckets named.
  in.buckets = {{0, 1024, 0.00003, 0.00003, 0.00405}};
  EXPECT_TRUE(has(find(diagnose(in), "communication-bound")->what, "bucket 0 (1 KiB)"));
}

TEST(Diagnosis, ManySmallBucketsSuggestBiggerOnes) {
  DiagnosisInput in = run(phases(0.1, 6.0, 3.0, 0.9), 2);
  for (int b = 0; b < 40; ++b)
    in.buckets.push_back({b, 64 << 10, 0.001 * b, 0.001 * b, 0.05 + 0.001 * b});
  in.backward_end = 0.045;
  std::optional<Finding> f = find(diagnose(in), "communication-bound");
  ASSERT_TRUE(f);
  EXPECT_TRUE(has(f->fix, "raise dist.bucket_cap_mb from 25 (40 buckets of 0.06 MiB")) << f->fix;
}

// The 11-parameter case: one bucket of 44 bytes that waited 3 ms after backward. Its time is the
// all-reduce's fixed cost and the ranks' skew: bf16 on the wire would change nothing, so it is not
// offered; the per-rank batch is, as the recipe change it is.
TEST(Diagnosis, SmallBucketsAreLatencyNotBandwidth) {
  DiagnosisInput in = run(phases(0.1, 1.0, 0.3, 0.1), 2);  // 3 ms of collectives per step, 20%
  in.parameters = 11;
  in.buckets = {{0, 44, 0.0001, 0.0001, 0.0031}};
  in.backward_end = 0.0001;
  const auto fs = diagnose(in);
  std::optional<Finding> f = find(fs, "communication-bound");
  ASSERT_TRUE(f) << all_text(fs);
  EXPECT_TRUE(has(f->what,
                  "the buckets are small (0 KiB in all, 0 KiB of them exposed): the wait is each "
                  "all-reduce's fixed cost and the ranks' skew, not bytes on the wire"))
      << f->what;
  EXPECT_FALSE(has(f->fix, "grad_dtype")) << f->fix;
  EXPECT_TRUE(has(f->fix, "fewer ranks")) << f->fix;
  EXPECT_TRUE(has(f->fix,
                  "a larger per-rank batch (train.global_batch) gives backward more to hide it "
                  "behind, but it changes the training recipe: scale train.lr with it"))
      << f->fix;
  // One bucket of 1 MiB that waited as long: bytes on the wire, and bf16 halves them.
  in.buckets = {{0, 1 << 20, 0.0001, 0.0001, 0.0031}};
  f = find(diagnose(in), "communication-bound");
  ASSERT_TRUE(f);
  EXPECT_FALSE(has(f->what, "the buckets are small")) << f->what;
  EXPECT_TRUE(has(f->fix, "set dist.grad_dtype=bf16")) << f->fix;
  EXPECT_FALSE(has(f->fix, "fewer ranks")) << f->fix;
}

// Every fix that raises the per-rank batch says it changes the recipe.
TEST(Diagnosis, ALargerBatchIsOfferedAsARecipeChange) {
  DiagnosisInput in = run(phases(0.1, 6.0, 0.1, 0.9), 1);
  in.on_cuda = true;
  in.memory_total = int64_t{80} << 30, in.memory_peak = int64_t{4} << 30;
  in.gpu_busy_percent = 30.0;
  const auto fs = diagnose(in);
  for (const char* kind : {"launch-bound", "memory headroom"}) {
    std::optional<Finding> f = find(fs, kind);
    ASSERT_TRUE(f) << kind << all_text(fs);
    EXPECT_TRUE(has(f->fix, "train.global_batch")) << f->fix;
    EXPECT_TRUE(has(f->fix, "it changes the training recipe: scale train.lr with it"))
        << kind << ": " << f->fix;
  }
}

TEST(Diagnosis, OneRankIsNeverCommunicationBound) {
  EXPECT_FALSE(find(diagnose(run(phases(0.1, 6.0, 3.0, 0.9), 1)), "communication-bound"));
}

TEST(Diagnosis, HeadroomIsThePowerOfTwoThatFitsNinetyPercent) {
  const double gib = 1024.0 * 1024 * 1024;
  DiagnosisInput in = run(phases(0.1, 9, 0, 0.9));
  in.on_cuda = true, in.gpu_busy_percent = 95;
  in.memory_peak = static_cast<int64_t>(9.9 * gib),
  in.memory_total = static_cast<int64_t>(141 * gib);
  const int64_t expected = int64_t{1} << static_cast<int>(std::floor(std::log2(0.9 * 141 / 9.9)));
  EXPECT_EQ(expected, 8);
  EXPECT_EQ(dtrain::detail::micro_batch_growth(in.memory_peak, in.memory_total), expected);
  in.micro_batch = 32;  // of a per-rank batch of 64
  std::optional<Finding> f = find(diagnose(in), "memory headroom");
  ASSERT_TRUE(f);
  EXPECT_TRUE(
      has(f->what, "peak 9.9 of 141.0 GiB on rank 0: micro_batch can grow about 8x (now 32)"))
      << f->what;
  EXPECT_TRUE(has(f->fix, "raise train.micro_batch toward 64"))
      << f->fix;  // capped at the rank's batch
  // Less than twice the room: no headroom line; above 90%: a warning instead.
  EXPECT_EQ(dtrain::detail::micro_batch_growth(60, 100), 1);
  EXPECT_EQ(dtrain::detail::micro_batch_growth(45, 100), 2);
  in.memory_peak = static_cast<int64_t>(0.6 * 141 * gib);
  EXPECT_FALSE(find(diagnose(in), "memory headroom"));
  in.memory_peak = static_cast<int64_t>(0.95 * 141 * gib);
  f = find(diagnose(in), "memory headroom");
  ASSERT_TRUE(f);
  EXPECT_TRUE(has(f->what, "less than 10% of the device left")) << f->what;
  // A CPU run (no device total) has no memory line.
  in.memory_total = 0;
  EXPECT_FALSE(find(diagnose(in), "memory headroom"));
}

TEST(Diagnosis, SlowestRankIsNamedWithItsHost) {
  DiagnosisInput in = run(phases(0.5, 8.0, 0.8, 0.5), 4);
  in.on_cuda = true;  // GPUs: 15% apart makes a finding (CPUs: 30%)
  in.rank_hosts = {"node-a", "node-a", "node-b", "node-b"};
  in.rank_phases[3] = phases(0.5, 10.0, 0.1, 0.5);  // 11 s against 9 s
  const auto fs = diagnose(in);
  std::optional<Finding> f = find(fs, "slowest rank");
  ASSERT_TRUE(f) << all_text(fs);
  EXPECT_TRUE(has(f->what, "rank 3 on node-b spent 11.0 s")) << f->what;
  EXPECT_TRUE(has(f->what, percent(11.0 / 9.0 - 1) + " more than rank 0 on node-a (9.0 s)"))
      << f->what;
  EXPECT_TRUE(has(f->what, "most of it in compute")) << f->what;
  EXPECT_TRUE(has(f->fix, "rank 3's host")) << f->fix;
  EXPECT_FALSE(has(f->fix, "binding")) << "the ranks' CPUs are their own: " << f->fix;
  in.sharing_ranks = 2;
  EXPECT_TRUE(has(find(diagnose(in), "slowest rank")->fix, "its CPU binding"));
  in.sharing_ranks = 1;
  // A rank slow in its data wait: the loader is named.
  in.rank_phases[3] = phases(2.5, 8.0, 0.1, 0.5);
  f = find(diagnose(in), "slowest rank");
  ASSERT_TRUE(f);
  EXPECT_TRUE(has(f->what, "most of it in data wait")) << f->what;
  EXPECT_TRUE(has(f->fix, "rank 3's loader")) << f->fix;
  EXPECT_TRUE(has(f->what, "the other ranks wait for it in every all-reduce")) << f->what;
  in.optimizer_shards = 4;  // sharded: the gradients are reduce-scattered
  f = find(diagnose(in), "slowest rank");
  ASSERT_TRUE(f);
  EXPECT_TRUE(has(f->what, "the other ranks wait for it in every reduce-scatter")) << f->what;
  // CPU ranks 22% apart: close, not a finding.
  in.on_cuda = false, in.optimizer_shards = 1;
  in.rank_phases[3] = phases(0.5, 10.0, 0.1, 0.5);
  const auto cpu = diagnose(in);
  EXPECT_FALSE(find(cpu, "slowest rank")) << all_text(cpu);
  ASSERT_TRUE(find(cpu, "close")) << all_text(cpu);
  EXPECT_TRUE(has(find(cpu, "close")->what, "the ranks' busy time apart by 22% (30% makes it"))
      << all_text(cpu);
}

TEST(Diagnosis, QuietWhenBalanced) {
  DiagnosisInput in = run(phases(0.2, 9.3, 0.3, 0.2), 2);
  in.rank_phases[1] = phases(0.2, 9.7, 0.1, 0.2);  // 4% apart: within 10%
  const auto fs = diagnose(in);
  ASSERT_EQ(fs.size(), 1u) << all_text(fs);
  EXPECT_EQ(fs[0].kind, "compute-bound");
  EXPECT_EQ(fs[0].what,
            percent(9.3 / 10.0) + " of step time in forward/backward: the CPU is the limit");
  EXPECT_TRUE(fs[0].fix.empty());
  in.on_cuda = true, in.gpu_busy_percent = 93;
  EXPECT_TRUE(has(diagnose(in)[0].what, "the GPU is the limit"));
}

TEST(Diagnosis, OptimizerDominating) {
  const auto fs = diagnose(run(phases(0.1, 3.0, 0.0, 6.9)));
  ASSERT_TRUE(find(fs, "optimizer-bound")) << all_text(fs);
  EXPECT_TRUE(has(find(fs, "optimizer-bound")->what, percent(6.9 / 10.0)));
}

TEST(Diagnosis, LowGpuBusyIsLaunchBound) {
  DiagnosisInput in = run(phases(0.1, 9.0, 0.0, 0.9));
  in.on_cuda = true, in.gpu_busy_percent = 35, in.cuda_graph = "off";
  std::optional<Finding> f = find(diagnose(in), "launch-bound");
  ASSERT_TRUE(f);
  EXPECT_TRUE(has(f->what, "the GPU was busy 35% of the time (NVML)")) << f->what;
  EXPECT_TRUE(has(f->fix, "set train.cuda_graph=auto (now off)")) << f->fix;
  // Several ranks stepping eagerly: graphs need NCCL gradients there too; a micro-batch smaller
  // than the rank's batch can grow.
  in.world = 2, in.rank_phases.assign(2, in.phases), in.cuda_graph = "auto", in.micro_batch = 16;
  in.step_mode = "eager";
  f = find(diagnose(in), "launch-bound");
  ASSERT_TRUE(f);
  EXPECT_TRUE(has(f->what, "steps ran eager")) << f->what;
  EXPECT_TRUE(has(f->fix, "it needs gradients over NCCL (dist.backend), a fused optimizer"))
      << f->fix;
  EXPECT_TRUE(has(f->fix, "train.micro_batch=0 runs the per-rank batch of 64 at once (now 16)"))
      << f->fix;
  // A busy GPU is not launch-bound; a CPU run never is.
  in.gpu_busy_percent = 90;
  EXPECT_FALSE(find(diagnose(in), "launch-bound"));
  in.on_cuda = false, in.gpu_busy_percent.reset();
  EXPECT_FALSE(find(diagnose(in), "launch-bound"));
}

TEST(Diagnosis, LaunchBoundInferredWithoutNvml) {
  // 100 steps, 0.2 s of compute: 2 ms per forward/backward of a 1M-parameter model.
  DiagnosisInput in = run(phases(0.002, 0.2, 0.0, 0.03));
  in.on_cuda = true, in.step_mode = "eager";
  std::optional<Finding> f = find(diagnose(in), "launch-bound");
  ASSERT_TRUE(f);
  EXPECT_TRUE(has(f->what, "likely")) << f->what;
  EXPECT_TRUE(has(f->what, format("%.1f ms per micro-batch", 1e3 * 0.2 / 100))) << f->what;
  // 50 ms per step is not launch cost; nor is a large model; nor a step that replays a graph.
  DiagnosisInput slow_steps = run(phases(0.05, 5.0, 0, 0.3));
  slow_steps.on_cuda = true, slow_steps.step_mode = "eager";
  EXPECT_FALSE(find(diagnose(slow_steps), "launch-bound"));
  in.parameters = 100000000;
  EXPECT_FALSE(find(diagnose(in), "launch-bound"));
  in.parameters = 1000000, in.step_mode = "CUDA graph: captured at step 3, replayed 96 times";
  EXPECT_FALSE(find(diagnose(in), "launch-bound"));
}

TEST(Diagnosis, RecoveriesAndSkippedSteps) {
  DiagnosisInput in = run(phases(0.1, 9, 0, 0.9));
  in.oom_retries = 2, in.first_micro_batch = 64, in.micro_batch = 16;
  in.skipped_steps = 3;
  auto fs = diagnose(in);
  std::optional<Finding> f = find(fs, "out of memory");
  ASSERT_TRUE(f);
  EXPECT_TRUE(has(
      f->what, "2 step(s) redone after running out of memory: the micro-batch went from 64 to 16"));
  EXPECT_TRUE(has(f->fix, "train.micro_batch=16"));
  f = find(fs, "skipped steps");
  ASSERT_TRUE(f);
  EXPECT_TRUE(has(f->what, "3 of 100 steps skipped")) << f->what;
  EXPECT_TRUE(f->fix.empty()) << "a few skips while the scale settles need no fix";
  in.skipped_steps = 40, in.steps = 1000;
  f = find(diagnose(in), "skipped steps");
  EXPECT_TRUE(has(f->fix, "train.precision=bf16")) << f->fix;
}

TEST(Diagnosis, MemoryByKindSplitsTheMeasuredPeak) {
  DiagnosisInput in = run(phases(0.1, 5.0, 0.1, 0.4));
  const int64_t gib = int64_t{1} << 30;
  in.weight_bytes = gib, in.gradient_bytes = gib, in.optimizer_state_bytes = 2 * gib;
  in.optimizer_shards = 2;
  EXPECT_FALSE(find(diagnose(in), "memory by kind")) << "no peak measured (CPU): no split";
  in.on_cuda = true, in.memory_peak = 10 * gib, in.memory_total = 140 * gib;
  const auto f = find(diagnose(in), "memory by kind");
  ASSERT_TRUE(f);
  EXPECT_TRUE(has(f->what,
                  "rank 0's peak of 10.00 GiB: weights 1.00 GiB, gradients 1.00 GiB, "
                  "optimizer state 2.00 GiB (its shard of 2), activations and workspace "
                  "6.00 GiB"))
      << f->what;
}

TEST(Diagnosis, NoSteps) {
  DiagnosisInput in = run(phases(0, 0, 0, 0));
  in.steps = 0;
  const auto fs = diagnose(in);
  ASSERT_EQ(fs.size(), 1u);
  EXPECT_EQ(fs[0].kind, "no steps");
}

TEST(Diagnosis, TextHasOneLinePerFindingAndItsFix) {
  const auto fs = diagnose(run(phases(4.1, 5.0, 0.5, 0.4)));
  const std::string text = dtrain::detail::diagnosis_text(fs);
  EXPECT_EQ(text.rfind("diagnosis:\n  data-bound: 41% of step time waiting for data", 0), 0u)
      << text;
  EXPECT_TRUE(has(text, "\n    fix: raise data.workers from 2")) << text;
  EXPECT_EQ(text.back(), '\n');
}

}  // namespace
