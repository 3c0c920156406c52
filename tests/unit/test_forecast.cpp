// src/telemetry/forecast.h on hand-made timelines: NCCL's ring cost (bus bandwidth factors,
// latency per ring step, the network's steps), the presets against the published all_reduce_perf
// points they claim to reproduce, the collectives one at a time after their launches, what is
// exposed after backward, the range on CUDA, no overlap without a timeline, a sharded
// optimizer's reduce-scatters and broadcasts, the fitted link, --link's text, the mean timeline
// and the text. Expected times are worked out here from the definitions (Note [scaling
// forecast]), not taken from the code.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "dtrain/error.h"
#include "telemetry/forecast.h"

namespace {

using dtrain::BucketTiming;
using dtrain::detail::Collective;
using dtrain::detail::Forecast;
using dtrain::detail::Link;
using dtrain::detail::Overlap;
using dtrain::detail::ScalingInput;

const Link& preset(const std::string& name) {
  for (const Link& l : dtrain::detail::link_presets())
    if (l.name == name) return l;
  throw std::runtime_error("no preset " + name);
}

BucketTiming fc_bucket(int64_t bytes, double launched) {
  BucketTiming b;
  b.bytes = bytes, b.ready = launched, b.launched = launched;
  return b;
}

// A step of 100 ms, 1 ms of it communication; buckets of 10, 20 and 5 MB launched at 30, 35 and
// 80 ms; backward ends at 90 ms.
ScalingInput fc_input() {
  ScalingInput in;
  in.step = 0.100, in.comm = 0.001;
  in.buckets = {fc_bucket(10000000, 0.030), fc_bucket(20000000, 0.035), fc_bucket(5000000, 0.080)};
  in.backward_end = 0.090;
  return in;
}

// 1 GB/s, no latency unless asked: a bucket of s bytes takes f(N) s / 1e9 seconds.
Link fc_link(int n, double step_us = 0) {
  Link l = dtrain::detail::parse_link("name=test,bus=1,step_us=" + std::to_string(step_us) +
                                      ",ranks=" + std::to_string(n));
  return l;
}

TEST(Forecast, RingStepsAndBusFactorsAreNcclsRing) {
  using dtrain::detail::bus_factor;
  using dtrain::detail::ring_steps;
  EXPECT_EQ(ring_steps(Collective::kAllReduce, 8), 14);
  EXPECT_EQ(ring_steps(Collective::kReduceScatter, 8), 7);
  EXPECT_EQ(ring_steps(Collective::kBroadcast, 8), 1);
  EXPECT_EQ(ring_steps(Collective::kAllReduce, 1), 0);
  EXPECT_DOUBLE_EQ(bus_factor(Collective::kAllReduce, 8), 14.0 / 8);
  EXPECT_DOUBLE_EQ(bus_factor(Collective::kReduceScatter, 4), 3.0 / 4);
  EXPECT_DOUBLE_EQ(bus_factor(Collective::kBroadcast, 4), 1.0);
  EXPECT_DOUBLE_EQ(bus_factor(Collective::kAllReduce, 1), 0.0);
  EXPECT_DOUBLE_EQ(
      dtrain::detail::collective_seconds(Collective::kAllReduce, 1e9, 1, preset("nvlink")), 0.0);
}

TEST(Forecast, NvlinkPresetIsNcclsLatencyAndReproducesThePublishedPoints) {
  const Link& nv = preset("nvlink");
  ASSERT_EQ(nv.ranks, (std::vector<int>{2, 4, 8}));
  // 8.4 us + 2(N-1) x 3.4 us, and 2(N-1)/N of the bytes at 360 GB/s.
  const double mib16 = 16.0 * 1024 * 1024;
  const double expected = 8.4e-6 + 14 * 3.4e-6 + 1.75 * mib16 / 360e9;
  EXPECT_NEAR(dtrain::detail::collective_seconds(Collective::kAllReduce, mib16, 8, nv), expected,
              1e-12);
  EXPECT_NEAR(dtrain::detail::latency_seconds(Collective::kAllReduce, 2, nv), 8.4e-6 + 2 * 3.4e-6,
              1e-15);
  // all_reduce_perf on 8 H200 (docs/PERFORMANCE.md): bus bandwidth 220 GB/s at 16 MiB and 276 at
  // 32 MiB, the time nccl-tests reports being f(N) bytes / busbw: within 4% there; at 1 MiB (40)
  // and 256 MiB (436) the preset is slower than measured, by at most a third.
  auto measured = [](double bytes, double busbw) { return 1.75 * bytes / busbw; };
  auto model = [&](double bytes) {
    return dtrain::detail::collective_seconds(Collective::kAllReduce, bytes, 8, nv);
  };
  EXPECT_NEAR(model(mib16) / measured(mib16, 220e9), 1.0, 0.04);
  EXPECT_NEAR(model(2 * mib16) / measured(2 * mib16, 276e9), 1.0, 0.04);
  for (auto [bytes, busbw] : {std::pair<double, double>{mib16 / 16, 40e9}, {mib16 * 16, 436e9}}) {
    EXPECT_GT(model(bytes), measured(bytes, busbw)) << bytes;
    EXPECT_LT(model(bytes), 1.34 * measured(bytes, busbw)) << bytes;
  }
}

TEST(Forecast, InfinibandCrossesNodesAtTheNetworksLatencyAndBandwidth) {
  const Link& ib = preset("infiniband");
  ASSERT_EQ(ib.ranks, (std::vector<int>{16, 32, 64}));
  EXPECT_EQ(dtrain::detail::nodes_for(ib, 16), 2);
  EXPECT_EQ(dtrain::detail::nodes_for(ib, 64), 8);
  EXPECT_EQ(dtrain::detail::nodes_for(ib, 12), 2);
  // 16 ranks on 2 nodes: 30 steps, 2 x 2 of them between nodes (14 us), the rest over NVLink
  // (3.4 us), x1.4 for a multi-node all-reduce; 30/16 of the bytes at 45 GB/s.
  EXPECT_NEAR(dtrain::detail::latency_seconds(Collective::kAllReduce, 16, ib),
              1.4 * (8.4 + 26 * 3.4 + 4 * 14) * 1e-6, 1e-12);
  EXPECT_NEAR(dtrain::detail::collective_seconds(Collective::kAllReduce, 1e8, 16, ib),
              1.4 * (8.4 + 26 * 3.4 + 4 * 14) * 1e-6 + 1.875 * 1e8 / 45e9, 1e-12);
  // 64 ranks on 8 nodes: 126 steps, 16 between nodes.
  EXPECT_NEAR(dtrain::detail::latency_seconds(Collective::kAllReduce, 64, ib),
              1.4 * (8.4 + 110 * 3.4 + 16 * 14) * 1e-6, 1e-12);
  // A reduce-scatter over 2 nodes: 15 steps, one between nodes, no plateau factor.
  EXPECT_NEAR(dtrain::detail::latency_seconds(Collective::kReduceScatter, 16, ib),
              (8.4 + 14 * 3.4 + 14) * 1e-6, 1e-12);
}

TEST(Forecast, CollectivesRunOneAtATimeFromTheirLaunch) {
  using dtrain::detail::exposed_after;
  // 10, 20, 5 ms launched at 30, 35, 80 ms: 30-40, 40-60, 80-85; backward ends at 90.
  EXPECT_DOUBLE_EQ(exposed_after({0.030, 0.035, 0.080}, {0.010, 0.020, 0.005}, 0.090), 0.0);
  // The last launched at 88 ms: it ends at 93, 3 ms after backward.
  EXPECT_NEAR(exposed_after({0.030, 0.035, 0.088}, {0.010, 0.020, 0.005}, 0.090), 0.003, 1e-12);
  // The second takes 60 ms: it ends at 100, and the third waits for it: 100-105.
  EXPECT_NEAR(exposed_after({0.030, 0.035, 0.080}, {0.010, 0.060, 0.005}, 0.090), 0.015, 1e-12);
}

TEST(Forecast, StepIsTheStepWithoutCommunicationPlusWhatIsExposed) {
  ScalingInput in = fc_input();
  Forecast f = dtrain::detail::forecast(in, {fc_link(2)});
  EXPECT_EQ(f.overlap, Overlap::kMeasured);
  ASSERT_EQ(f.rows.size(), 1u);
  const double agreement = 8 / 1e9;  // an 8-byte all-reduce on 2 ranks, f = 1
  EXPECT_NEAR(f.one_rank_step, 0.099, 1e-12);
  EXPECT_NEAR(f.rows[0].collectives, 0.035 + agreement, 1e-12);
  EXPECT_NEAR(f.rows[0].exposed, agreement, 1e-12);  // every bucket done by 85 ms
  EXPECT_NEAR(f.rows[0].step, 0.099 + agreement, 1e-12);
  EXPECT_NEAR(f.rows[0].efficiency, 0.099 / (0.099 + agreement), 1e-12);
  EXPECT_DOUBLE_EQ(f.rows[0].step_low, f.rows[0].step);

  in.buckets[2].launched = 0.088;
  f = dtrain::detail::forecast(in, {fc_link(2)});
  EXPECT_NEAR(f.rows[0].exposed, 0.003 + agreement, 1e-12);

  // 4 ranks, 100 us a ring step: each collective 6 x 100 us + 1.5 s_b / 1e9: 30-45.6,
  // 45.6-76.2, 80-88.1; the agreement 0.6 ms + 1.5 x 8 / 1e9.
  in = fc_input();
  f = dtrain::detail::forecast(in, {fc_link(4, 100)});
  const double agreement4 = 600e-6 + 1.5 * 8 / 1e9;
  EXPECT_NEAR(f.rows[0].collectives, 3 * 600e-6 + 1.5 * 0.035 + agreement4, 1e-12);
  EXPECT_NEAR(f.rows[0].exposed, agreement4, 1e-12);
  // Backward ending at 80 ms instead: 8.1 ms exposed.
  in.backward_end = 0.080;
  f = dtrain::detail::forecast(in, {fc_link(4, 100)});
  EXPECT_NEAR(f.rows[0].exposed, 0.0081 + agreement4, 1e-12);
  EXPECT_NEAR(f.rows[0].step, 0.099 + 0.0081 + agreement4, 1e-12);
}

TEST(Forecast, OnCudaTheOverlapIsARangeAndWithoutATimelineThereIsNone) {
  ScalingInput in = fc_input();
  in.on_cuda = true;
  Forecast f = dtrain::detail::forecast(in, {fc_link(2)});
  const double agreement = 8 / 1e9;
  EXPECT_EQ(f.overlap, Overlap::kRange);
  // No overlap: all 35 ms after backward; ideal: only the last bucket's 5 ms.
  EXPECT_NEAR(f.rows[0].exposed, 0.035 + agreement, 1e-12);
  EXPECT_NEAR(f.rows[0].exposed_low, 0.005 + agreement, 1e-12);
  EXPECT_NEAR(f.rows[0].efficiency, 0.099 / (0.099 + 0.035 + agreement), 1e-12);
  EXPECT_NEAR(f.rows[0].efficiency_high, 0.099 / (0.099 + 0.005 + agreement), 1e-12);

  in = fc_input();
  in.buckets.clear();
  in.gradient_bytes = 35000000;
  f = dtrain::detail::forecast(in, {fc_link(2, 10)});
  EXPECT_EQ(f.overlap, Overlap::kNone);
  // One all-reduce of 35 MB on 2 ranks: 2 steps of 10 us + 35 ms, after backward.
  EXPECT_NEAR(f.rows[0].exposed, 20e-6 + 0.035 + 20e-6 + agreement, 1e-12);
}

TEST(Forecast, ShardedOptimizerReduceScattersAndBroadcastsTheParameters) {
  ScalingInput in = fc_input();
  in.gradients = Collective::kReduceScatter;
  in.broadcast_bytes = 8000000;
  in.backward_end = 0.080;
  const Forecast f = dtrain::detail::forecast(in, {fc_link(2, 10)});
  // Reduce-scatters: 1 step of 10 us + half the bytes: 30-35.01, 35.01-45.02, 80-82.51.
  // Then 2 broadcasts of 4 MB (one step each: 10 us + 4 ms) and the agreement (2 steps).
  const double broadcasts = 2 * (10e-6 + 0.004), agreement = 20e-6 + 8 / 1e9;
  EXPECT_NEAR(f.rows[0].exposed, 0.00251 + broadcasts + agreement, 1e-12);
  EXPECT_NEAR(f.rows[0].collectives, 3 * 10e-6 + 0.0175 + broadcasts + agreement, 1e-12);
}

TEST(Forecast, FittedLinkReproducesTheTimedCollectives) {
  // On 4 ranks: t = 50 us + 1.5 bytes / 2 GB/s.
  std::vector<std::pair<double, double>> samples;
  for (double bytes : {4096.0, 1048576.0, 16777216.0})
    samples.emplace_back(bytes, 50e-6 + 1.5 * bytes / 2e9);
  const Link l = dtrain::detail::fit_link(Collective::kAllReduce, 4, samples, "timed");
  EXPECT_EQ(l.name, "measured");
  EXPECT_EQ(l.ranks, std::vector<int>{4});
  EXPECT_NEAR(l.bus_bandwidth / 2e9, 1.0, 1e-9);
  EXPECT_NEAR(l.step_latency, 50e-6 / 6, 1e-15);
  for (const auto& [bytes, t] : samples)
    EXPECT_NEAR(dtrain::detail::collective_seconds(Collective::kAllReduce, bytes, 4, l), t, 1e-12);
  // No latency to fit: 0, not below.
  samples = {{4096, 1.5 * 4096 / 2e9 * 0.5}, {1048576, 1.5 * 1048576 / 2e9}};
  EXPECT_GE(dtrain::detail::fit_link(Collective::kAllReduce, 4, samples, "").step_latency, 0.0);
  EXPECT_THROW(dtrain::detail::fit_link(Collective::kAllReduce, 4, {{4096, 1e-5}}, ""),
               dtrain::Error);
  // Slower with fewer bytes: no bandwidth to fit.
  EXPECT_THROW(dtrain::detail::fit_link(Collective::kAllReduce, 4, {{4096, 1e-3}, {1e6, 1e-5}}, ""),
               dtrain::Error);
}

TEST(Forecast, LinkTextIsAPresetOrKeyValuePairs) {
  using dtrain::detail::parse_link;
  EXPECT_EQ(parse_link("nvlink").bus_bandwidth, 360e9);
  EXPECT_EQ(parse_link("measured").name, "measured");
  const Link ib = parse_link("infiniband,net_bus=360,ranks=16/128");
  EXPECT_EQ(ib.net_bus_bandwidth, 360e9);
  EXPECT_EQ(ib.bus_bandwidth, 360e9);
  EXPECT_EQ(ib.ranks, (std::vector<int>{16, 128}));
  EXPECT_NE(ib.what.find("changed by --link"), std::string::npos);
  const Link c = parse_link("name=lab,bus=12.5,step_us=4,base_us=2");
  EXPECT_EQ(c.name, "lab");
  EXPECT_EQ(c.bus_bandwidth, 12.5e9);
  EXPECT_EQ(c.net_bus_bandwidth, 12.5e9);
  EXPECT_NEAR(c.step_latency, 4e-6, 1e-18);
  EXPECT_NEAR(c.base_latency, 2e-6, 1e-18);
  EXPECT_EQ(c.ranks, (std::vector<int>{2, 4, 8}));
  EXPECT_EQ(c.ranks_per_node, 0);
  for (const char* bad :
       {"warp", "bus=1", "step_us=3", "bus=x,step_us=1", "bus=0,step_us=1",
        "bus=1,step_us=1,ranks=0", "bus=1,step_us=1,ranks=2.5", "bus=1,step_us=1,x=2",
        "measured,bus=1", "nvlink,step_us", "bus=1,step_us=-1", "name=,bus=1,step_us=1"}) {
    try {
      parse_link(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const dtrain::Error& e) {
      EXPECT_NE(std::string(e.what()).find("--link '" + std::string(bad) + "'"), std::string::npos)
          << e.what();
    }
  }
}

TEST(Forecast, TimelineMeanAveragesStepsAndStartsAgainOnANewPlan) {
  dtrain::detail::TimelineMean m;
  EXPECT_TRUE(m.buckets().empty());
  m.add({fc_bucket(100, 0.010), fc_bucket(200, 0.020)}, 0.030);
  m.add({fc_bucket(100, 0.020), fc_bucket(200, 0.040)}, 0.050);
  ASSERT_EQ(m.steps(), 2);
  EXPECT_NEAR(m.buckets()[0].launched, 0.015, 1e-15);
  EXPECT_NEAR(m.buckets()[1].launched, 0.030, 1e-15);
  EXPECT_NEAR(m.backward_end(), 0.040, 1e-15);
  m.add({fc_bucket(300, 0.001)}, 0.002);  // rebuilt: one bucket now
  ASSERT_EQ(m.steps(), 1);
  ASSERT_EQ(m.buckets().size(), 1u);
  EXPECT_EQ(m.buckets()[0].bytes, 300);
  EXPECT_NEAR(m.backward_end(), 0.002, 1e-15);
}

TEST(Forecast, TextIsMarkedAsAForecastWithItsRowsLinksAndAssumptions) {
  ScalingInput in = fc_input();
  in.batch = 64;
  std::vector<Link> links = dtrain::detail::link_presets();
  Forecast f = dtrain::detail::forecast(in, links);
  std::string text;
  for (const std::string& line : dtrain::detail::forecast_text(in, f, links, "a test"))
    text += line + "\n";
  for (const char* s : {"not a measurement", "every rank keeps its batch of 64", "from a test",
                        "3 gradient bucket(s), 33.4 MiB, all-reduced", "as in the bucket timeline",
                        "\n  nvlink          8      1 ", "\n  infiniband     64      8 ",
                        "nvlink: NVLink 4", "infiniband: nodes of 8", "  assumes: every rank"})
    EXPECT_NE(text.find(s), std::string::npos) << s << "\n" << text;
  in.on_cuda = true;
  f = dtrain::detail::forecast(in, links);
  const std::string line = dtrain::detail::forecast_line(f);
  // A range, and one entry per link: its largest world.
  EXPECT_NE(line.find("8 GPUs over nvlink "), std::string::npos) << line;
  EXPECT_NE(line.find("64 GPUs over infiniband "), std::string::npos) << line;
  EXPECT_EQ(line.find(" 4 GPUs over"), std::string::npos) << line;
  EXPECT_EQ(line.find(" 16 GPUs over"), std::string::npos) << line;
  EXPECT_NE(line.find("-"), std::string::npos) << line;
}

}  // namespace
