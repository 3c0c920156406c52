#include "cli/bench.h"
#include "cli/cli.h"

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench/report.h"
#include "bench/scaling.h"
#include "bench/sweep.h"
#include "dtrain/comm.h"
#include "dtrain/config.h"
#include "dtrain/error.h"
#include "dtrain/log.h"
#include "dtrain/session.h"
#include "runtime/launch_check.h"
#include "telemetry/forecast.h"
#include "util/dir.h"
#include "util/log_errors.h"

namespace dtrain::cli {
namespace {

const char* kBenchFooter = R"(
Each setting is a short run of the real training loop (a fresh model from run.seed, nothing
written, no checkpoint resumed, no evaluation): --warmup-steps steps, then --steps timed ones.
--sweep section.key=v1,v2 times each value of a config key (repeatable: every list is crossed
with the others, the first outermost), each value read as section.key=value on the command line
would be; a key the run does not read, or one the bench sets (run.dir, train.max_steps, ...), is
refused. --micro-batches, --workers, --activation-checkpointing, --shard-optimizer and --decode
are its aliases for train.micro_batch, data.workers, train.activation_checkpointing,
dist.shard_optimizer and data.decode (crossed first, in this order).
With both lists, every micro-batch runs with every worker count. Without train.global_batch on
the command line, a micro-batch sweep sets the global batch to micro-batch x ranks (no
accumulation); with it, the global batch stays and the accumulation varies. A size that runs out
of memory is reported as "does not fit" and the sweep goes on. Rank 0 prints the table and writes
PREFIX.csv and PREFIX.json; the recommendation is the fastest setting that leaves 10% of the
GPU's memory free, or a smaller one within 3% of it. --activation-checkpointing off,blocks and
--shard-optimizer false,true time the rungs of the memory ladder the same way (every list is
crossed with the others), so that the table shows what each rung costs and what it frees;
--decode cpu,gpu times an image folder's two decoders (data.decode) beside each other.
--forecast adds the scaling forecast of the recommended setting: its step time and efficiency on
more GPUs (2, 4, 8 over NVLink; 16 to 64 over InfiniBand; on several ranks also over this job's
own collective, timed at the bucket sizes), from its timed steps' phases and bucket timeline (on
one rank the gradient engine runs for it: dist.reduce_single_rank=true), with its assumptions.
--link sets the links instead (repeatable): nvlink, infiniband, measured, or key=value pairs,
e.g. --link name=mine,bus=100,step_us=5,ranks=2/4 (bus in GB/s, nccl-tests' bus bandwidth;
latency per ring step in us); a preset's numbers change the same way: --link
infiniband,net_bus=300. --forecast-from PREFIX.json forecasts again from the measurements a
--forecast run saved, over other links, running nothing (no config then).
  mpirun -np 8 dtrain bench configs/x.yaml --micro-batches 32,64,128,256
  dtrain bench configs/fashion_mnist.yaml --workers 0,1,2,4 --out runs/workers
  mpirun -np 4 dtrain bench configs/x.yaml --micro-batches 8,16 --activation-checkpointing off,blocks --shard-optimizer false,true
  dtrain bench configs/imagefolder_resnet.yaml --decode cpu,gpu --workers 2,4,8
  mpirun -np 2 dtrain bench configs/x.yaml --sweep dist.bucket_cap_mb=1,25,100 --sweep data.workers=0,2
  dtrain bench configs/x.yaml --forecast
  mpirun -np 8 dtrain bench configs/x.yaml --forecast --link measured --link infiniband
  dtrain bench --forecast-from bench-x.json --link infiniband,net_bus=360)";

// "configs/fashion_mnist.yaml" -> "fashion_mnist".
std::string stem(const std::string& path) {
  const size_t slash = path.rfind('/');
  std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  const size_t dot = name.rfind('.');
  if (dot != std::string::npos && dot > 0) name = name.substr(0, dot);
  return name;
}

// --forecast-from FILE: no MPI, nothing run; the forecast on standard output, an error as one
// line (exit 1).
int forecast_from_main(const std::string& path, const std::vector<std::string>& link_texts) {
  try {
    const std::string text = detail::read_file(path);
    const auto [in, source] = bench::scaling_input_from_json(text, path);
    for (const std::string& t : link_texts)
      if (t == "measured")
        throw Error(
            "--link measured: --forecast-from runs no job to time (give its numbers: "
            "--link bus=GBPS,step_us=US)");
    const std::vector<detail::Link> links = bench::forecast_links(link_texts, 1);
    const detail::Forecast f = detail::forecast(in, links);
    for (const std::string& line : detail::forecast_text(in, f, links, source))
      std::printf("%s\n", line.c_str());
    check_stdout();
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}

}  // namespace

int bench_main(int argc, char** argv, const std::map<std::string, std::string>& launcher_env) {
  CLI::App app{
      "dtrain bench: time short runs of a config at several micro-batch sizes and "
      "loader worker counts, and recommend one",
      "dtrain bench"};
  std::string config_path, out;
  std::vector<std::string> overrides, sweep_texts;
  std::vector<std::string> alias_texts(bench::sweep_aliases().size());
  int64_t warmup = 5, steps = 20;
  bool force = false, forecast = false;
  std::vector<std::string> link_texts;
  std::string forecast_from;
  app.add_option("config", config_path, "YAML config file (not with --forecast-from)");
  app.add_option("overrides", overrides, "section.key=value settings that replace the file's");
  app.add_option("--sweep", sweep_texts,
                 "section.key=v1,v2,...: the values of a config key to time (repeatable)")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  for (size_t i = 0; i < alias_texts.size(); ++i) {
    const bench::SweepAlias& a = bench::sweep_aliases()[i];
    app.add_option(a.option, alias_texts[i], std::string(a.help) + " (--sweep " + a.key + "=...)");
  }
  app.add_option("--warmup-steps", warmup, "steps run before the clock starts")
      ->capture_default_str();
  app.add_option("--steps", steps, "steps timed per setting")->capture_default_str();
  app.add_option("--out", out,
                 "write PREFIX.csv and PREFIX.json (default: bench-<config file name>)");
  app.add_flag("--force", force, "write over existing output files");
  CLI::Option* forecast_flag = app.add_flag(
      "--forecast", forecast,
      "forecast the recommended setting's step time and scaling efficiency on more GPUs");
  app.add_option("--link", link_texts,
                 "with --forecast, a link to forecast over (repeatable): nvlink, infiniband, "
                 "measured, or bus=GBPS,step_us=US[,base_us=US,ranks=N/N,name=NAME]")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--forecast-from", forecast_from,
                 "FILE: the forecast again from the measurements a --forecast PREFIX.json holds "
                 "(nothing is run), over --link's links or the presets")
      ->excludes(forecast_flag);
  app.footer(kBenchFooter);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return usage_exit(app.exit(e));
  }
  if (!link_texts.empty() && !forecast && forecast_from.empty()) {
    std::fprintf(stderr, "error: --link needs --forecast or --forecast-from\n");
    return kExitUsage;
  }
  if (!forecast_from.empty()) {
    if (!config_path.empty() || !overrides.empty()) {
      std::fprintf(stderr, "error: --forecast-from takes no config: it runs nothing\n");
      return kExitUsage;
    }
    return forecast_from_main(forecast_from, link_texts);
  }
  if (config_path.empty()) {
    std::fprintf(stderr, "error: dtrain bench needs a config file (or --forecast-from FILE)\n");
    return kExitUsage;
  }
  if (forecast) {
    // --link's mistakes before MPI starts: one line, from the launcher's rank 0 (the world the
    // launcher gives decides whether "measured" has ranks to time).
    const auto [rank, world] = detail::launcher_place(launcher_env);
    try {
      bench::forecast_links(link_texts, world);
    } catch (const Error& e) {
      if (rank == 0) std::fprintf(stderr, "[rank 0] error: %s\n", e.what());
      return 1;
    }
  }
  if (out.empty()) out = "bench-" + stem(config_path);
  EarlyConfig config(launcher_env, [&] { return Config::from_file(config_path, overrides); });
  if (config.failed()) return 1;
  return run_guarded(&argc, &argv, [&](Runtime& rt) {
    bench::SweepOptions opt;
    for (size_t i = 0; i < alias_texts.size(); ++i) {
      const char* option = bench::sweep_aliases()[i].option;
      if (app.count(option) > 0) opt.sweeps.push_back(bench::parse_alias(option, alias_texts[i]));
    }
    for (const std::string& text : sweep_texts) opt.sweeps.push_back(bench::parse_sweep(text));
    opt.warmup_steps = warmup;
    opt.steps = steps;
    const Config base = config.get();
    bench::SweepPlan plan = bench::plan_sweep(base, overrides, opt, rt.world());
    std::vector<detail::Link> links;
    if (forecast) {
      links = bench::forecast_links(link_texts, rt.world());
      // One rank has no gradient engine unless asked: its buckets are what the forecast times.
      if (rt.world() == 1) {
        for (bench::Setting& st : plan.settings) st.config.dist.reduce_single_rank = true;
        log::info(
            "--forecast on one rank: dist.reduce_single_rank=true, so that the gradient "
            "engine's buckets are timed");
      }
    }
    rt.check_launcher(launcher_env);
    std::string failure;
    if (rt.rank() == 0) {
      try {
        bench::check_outputs(out, force);
      } catch (const Error& e) {
        failure = e.what();
      }
    }
    agree_no_failure(rt.cpu_comm(), failure, "checking the output files");
    const bench::SweepResult result = bench::run_sweep(rt, plan, config_path, opt);
    const bench::Recommendation rec = bench::recommend(result.rows);
    std::string forecast_text, forecast_json;
    if (forecast && rec.row >= 0) {
      const bench::Row& row = result.rows[static_cast<size_t>(rec.row)];
      const std::string source =
          "the " + std::to_string(row.timed_steps) + " timed steps of the recommended setting" +
          (row.timeline_steps > 0
               ? " (bucket timeline: the mean of " + std::to_string(row.timeline_steps) + ")"
               : "");
      const bench::ScalingForecast f = bench::forecast_setting(
          rt, row, plan.settings[static_cast<size_t>(rec.row)].config, links, source);
      for (const std::string& line : detail::forecast_text(f.input, f.forecast, f.links, source))
        forecast_text += line + "\n";
      forecast_json = bench::forecast_json(f);
    } else if (forecast) {
      forecast_text = "no scaling forecast: no setting fits\n";
    }
    failure.clear();
    if (rt.rank() == 0) {
      std::fputs(("\n" + bench::table_text(result, rec)).c_str(), stdout);
      if (!forecast_text.empty()) std::fputs(("\n" + forecast_text).c_str(), stdout);
      try {
        bench::write_outputs(out, force, result, rec, forecast_json);
        std::printf("wrote %s.csv and %s.json\n", out.c_str(), out.c_str());
        check_stdout();
      } catch (const Error& e) {
        failure = e.what();
      }
    }
    agree_no_failure(rt.cpu_comm(), failure, "writing the results");
    return 0;
  });
}

}  // namespace dtrain::cli
