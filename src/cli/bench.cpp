#include "cli/bench.h"
#include "cli/cli.h"

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench/report.h"
#include "bench/sweep.h"
#include "dtrain/comm.h"
#include "dtrain/config.h"
#include "dtrain/error.h"
#include "dtrain/log.h"
#include "dtrain/session.h"
#include "util/log_errors.h"

namespace dtrain::cli {
namespace {

const char* kFooter = R"(
Each setting is a short run of the real training loop (a fresh model from run.seed, nothing
written, no checkpoint resumed, no evaluation): --warmup-steps steps, then --steps timed ones.
With both lists, every micro-batch runs with every worker count. Without train.global_batch on
the command line, a micro-batch sweep sets the global batch to micro-batch x ranks (no
accumulation); with it, the global batch stays and the accumulation varies. A size that runs out
of memory is reported as "does not fit" and the sweep goes on. Rank 0 prints the table and writes
PREFIX.csv and PREFIX.json; the recommendation is the fastest setting that leaves 10% of the
GPU's memory free, or a smaller one within 3% of it. --activation-checkpointing off,blocks and
--shard-optimizer false,true time the rungs of the memory ladder the same way (every list is
crossed with the others), so that the table shows what each rung costs and what it frees;
--decode cpu,gpu times an image folder's two decoders (data.decode) beside each other.
  mpirun -np 8 dtrain bench configs/x.yaml --micro-batches 32,64,128,256
  dtrain bench configs/fashion_mnist.yaml --workers 0,1,2,4 --out runs/workers
  mpirun -np 4 dtrain bench configs/x.yaml --micro-batches 8,16 --activation-checkpointing off,blocks --shard-optimizer false,true
  dtrain bench configs/imagefolder_resnet.yaml --decode cpu,gpu --workers 2,4,8)";

// "configs/fashion_mnist.yaml" -> "fashion_mnist".
std::string stem(const std::string& path) {
  const size_t slash = path.rfind('/');
  std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  const size_t dot = name.rfind('.');
  if (dot != std::string::npos && dot > 0) name = name.substr(0, dot);
  return name;
}

}  // namespace

int bench_main(int argc, char** argv, const std::map<std::string, std::string>& launcher_env) {
  CLI::App app{"dtrain bench: time short runs of a config at several micro-batch sizes and "
               "loader worker counts, and recommend one",
               "dtrain bench"};
  std::string config_path, micro_text, workers_text, ckpt_text, shard_text, decode_text, out;
  std::vector<std::string> overrides;
  int64_t warmup = 5, steps = 20;
  bool force = false;
  app.add_option("config", config_path, "YAML config file")->required();
  app.add_option("overrides", overrides, "section.key=value settings that replace the file's");
  app.add_option("--micro-batches", micro_text, "micro-batch sizes per rank to time, e.g. 32,64,128");
  app.add_option("--workers", workers_text, "data.workers values to time, e.g. 0,2,4");
  app.add_option("--activation-checkpointing", ckpt_text,
                 "train.activation_checkpointing values to time: off,blocks (the memory ladder)");
  app.add_option("--shard-optimizer", shard_text,
                 "dist.shard_optimizer values to time: false,true (the memory ladder)");
  app.add_option("--decode", decode_text, "data.decode values to time: cpu,gpu (an image folder's decoders)");
  app.add_option("--warmup-steps", warmup, "steps run before the clock starts")->capture_default_str();
  app.add_option("--steps", steps, "steps timed per setting")->capture_default_str();
  app.add_option("--out", out, "write PREFIX.csv and PREFIX.json (default: bench-<config file name>)");
  app.add_flag("--force", force, "write over existing output files");
  app.footer(kFooter);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return usage_exit(app.exit(e));
  }
  const bool sweep_micro = app.count("--micro-batches") > 0;
  const bool sweep_workers = app.count("--workers") > 0;
  if (out.empty()) out = "bench-" + stem(config_path);
  return run_guarded(&argc, &argv, [&](Runtime& rt) {
    bench::SweepOptions opt;
    if (sweep_micro) opt.micro_batches = bench::parse_sizes(micro_text, "--micro-batches", 1);
    if (sweep_workers) opt.workers = bench::parse_sizes(workers_text, "--workers", 0);
    if (app.count("--activation-checkpointing") > 0) opt.checkpointing = bench::parse_checkpointing(ckpt_text);
    if (app.count("--shard-optimizer") > 0) opt.shard_optimizer = bench::parse_sharding(shard_text);
    if (app.count("--decode") > 0) opt.decode = bench::parse_decode(decode_text);
    opt.warmup_steps = warmup;
    opt.steps = steps;
    const Config base = Config::from_file(config_path, overrides);
    const bench::SweepPlan plan = bench::plan_sweep(base, overrides, opt, rt.world());
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
    failure.clear();
    if (rt.rank() == 0) {
      std::fputs(("\n" + bench::table_text(result, rec)).c_str(), stdout);
      try {
        bench::write_outputs(out, force, result, rec);
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
