// `dtrain env`: every rank collects its facts and hints (cli/env_facts.h, cli/env_hints.h) and
// sends them as JSON to every rank; rank 0 prints one document, as JSON (--json) or as text.
#include "cli/env.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <set>

#include "cli/cli.h"
#include "cli/env_facts.h"
#include "cli/env_hints.h"
#include "dtrain/comm.h"
#include "dtrain/config.h"
#include "dtrain/log.h"
#include "dtrain/session.h"
#include "util/format.h"

namespace dtrain::cli {
namespace {

using nlohmann::json;

// One document from every rank's {"rank", "machine", "hints"}: rank 0's machine, every rank's
// facts, each distinct hint once with the ranks that have it, and the exit code.
json merge(const std::vector<std::string>& per_rank) {
  json doc;
  json ranks = json::array(), hints = json::array();
  std::set<std::string> hosts;
  for (const std::string& s : per_rank) {
    const json one = json::parse(s);
    if (doc.is_null()) doc = one["machine"];
    ranks.push_back(one["rank"]);
    const int rank = one["rank"]["rank"].get<int>();
    hosts.insert(one["rank"]["host"].get<std::string>());
    for (const json& h : one["hints"]) {
      auto it = std::find_if(hints.begin(), hints.end(),
                             [&](const json& x) { return x["text"] == h["text"]; });
      if (it == hints.end()) {
        hints.push_back({{"stops", h["stops"]}, {"text", h["text"]}, {"ranks", json::array()}});
        it = hints.end() - 1;
      }
      (*it)["ranks"].push_back(rank);
    }
  }
  bool stops = false;
  for (const json& h : hints) stops = stops || h["stops"].get<bool>();
  doc["launcher"] = ranks[0]["launcher"];
  doc["world"] = ranks.size();
  doc["hosts"] = hosts.size();
  doc["ranks"] = ranks;
  doc["hints"] = hints;
  doc["exit_code"] = stops ? 1 : 0;
  return doc;
}

std::string str(const json& j, const std::string& none = "none") {
  return j.is_string() ? j.get<std::string>() : none;
}

// Rows padded to columns, two spaces apart, each line indented.
std::string table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& row : rows)
    for (size_t i = 0; i < row.size(); ++i) {
      if (width.size() <= i) width.push_back(0);
      width[i] = std::max(width[i], row[i].size());
    }
  std::string out;
  for (const auto& row : rows) {
    std::string line = " ";
    for (size_t i = 0; i < row.size(); ++i)
      line +=
          " " + row[i] + (i + 1 < row.size() ? std::string(width[i] - row[i].size() + 1, ' ') : "");
    out += line + "\n";
  }
  return out;
}

std::string versions_text(const json& d) {
  const bool cuda = d["build"] == "cuda";
  const json& c = d["cuda"];
  const json& dr = d["driver"];
  std::vector<std::vector<std::string>> rows;
  rows.push_back(
      {"LibTorch", str(d["libtorch"]) + (cuda ? " (CUDA build)" : " (CPU build: no CUDA)")});
  rows.push_back({"CUDA runtime", cuda ? str(c["runtime"], "unknown") + " (compiled with " +
                                             str(c["compiled"], "?") + ")"
                                       : "none (CPU build)"});
  std::string driver = "unknown (NVML is not loaded: see GPUs)";
  const std::string supports = str(c["driver"], str(dr["cuda"], ""));
  if (dr["version"].is_string())
    driver = str(dr["version"]) + (supports.empty() ? "" : ", supports CUDA " + supports);
  else if (!supports.empty())
    driver = "supports CUDA " + supports + " (cudaDriverGetVersion; NVML is not loaded)";
  rows.push_back({"NVIDIA driver", driver});
  rows.push_back({"cuDNN", cuda ? str(d["cudnn"]["runtime"], "not loaded") + " (compiled with " +
                                      str(d["cudnn"]["compiled"], "none") + ")"
                                : "none (CPU build)"});
  rows.push_back({"NCCL", cuda ? str(d["nccl"], "unknown") : "none (CPU build)"});
  const json& nj = d["nvjpeg"];
  std::string nvjpeg = "none (CPU build)";
  if (cuda)
    nvjpeg = str(nj["text"], "unknown") +
             (nj["decoder"] == "hardware" ? ", hardware decoder (the GPU's JPEG engines)"
              : nj["decoder"].is_string()
                  ? ", " + str(nj["decoder"]) + " decoder (no JPEG engines on this GPU)"
                  : "");
  rows.push_back({"nvJPEG", nvjpeg});
  rows.push_back({"MPI", str(d["mpi"]["library"], "unknown") + " (MPI " +
                             str(d["mpi"]["standard"], "?") + ")"});
  return table(rows);
}

std::string gpus_text(const json& d) {
  std::string out;
  const json& gpus = d["gpus"];
  if (gpus.empty()) {
    out = "  no GPU: " +
          std::string(d["build"] == "cuda" ? "CUDA sees none" : "CUDA: none (CPU build)") +
          "; NVML: " + str(d["nvml"]["reason"], "sees none") + "\n";
  } else {
    std::vector<std::vector<std::string>> rows = {
        {"nvml", "cuda", "name", "cc", "memory used / total", "util", "PCI bus id"}};
    for (const json& g : gpus) {
      const bool figures = g.contains("memory_total");
      rows.push_back(
          {g["nvml_index"].is_null() ? "-" : std::to_string(g["nvml_index"].get<int>()),
           g["cuda_index"].is_null() ? "-" : std::to_string(g["cuda_index"].get<int>()),
           str(g["name"], "?"), figures ? str(g["compute_capability"]) : "?",
           figures ? detail::gib(static_cast<int64_t>(g["memory_used"].get<double>())) + " / " +
                         detail::gib(static_cast<int64_t>(g["memory_total"].get<double>()))
                   : "?",
           figures ? detail::format("%.0f%%", g["utilization"].get<double>()) : "?",
           str(g["pci_bus_id"], "?")});
    }
    out = table(rows);
    if (!d["nvml"]["ok"].get<bool>())
      out += "  (no figures: " + str(d["nvml"]["reason"], "?") + ")\n";
  }
  out += "  CUDA_VISIBLE_DEVICES: " +
         (d["cuda_visible_devices"].is_string() ? "'" + str(d["cuda_visible_devices"]) + "'"
                                                : std::string("not set")) +
         "\n";
  return out;
}

std::string ranks_text(const json& d) {
  std::vector<std::vector<std::string>> rows = {
      {"rank", "local", "host", "device", "GPU PCI bus id", "CPUs", "threads"}};
  std::set<std::string> reasons;
  for (const json& r : d["ranks"]) {
    rows.push_back({std::to_string(r["rank"].get<int>()),
                    std::to_string(r["local_rank"].get<int>()) + "/" +
                        std::to_string(r["local_world"].get<int>()),
                    str(r["host"]), str(r["device"]), str(r["gpu_pci_bus_id"], "-"),
                    str(r["cpus"]) + " (" + std::to_string(r["cpu_count"].get<int>()) + ")",
                    std::to_string(r["threads"].get<int>())});
    reasons.insert(str(r["threads_reason"]));
  }
  std::string out = table(rows);
  for (const std::string& why : reasons) out += "  threads: " + why + "\n";
  return out;
}

std::string hints_text(const json& d) {
  std::string out;
  const size_t world = d["ranks"].size();
  for (const json& h : d["hints"]) {
    std::string who;
    if (world > 1 && h["ranks"].size() < world) {
      for (const json& r : h["ranks"])
        who += (who.empty() ? " [rank " : ", ") + std::to_string(r.get<int>());
      who += "]";
    }
    out += std::string("  ") + (h["stops"].get<bool>() ? "error: " : "advice: ") + str(h["text"]) +
           who + "\n";
  }
  if (out.empty()) out = "  none\n";
  return out;
}

std::string render_text(const json& d) {
  const size_t world = d["ranks"].size();
  std::string out = str(d["version_text"]) + "\n\nVersions\n" + versions_text(d) +
                    "\nGPUs (rank 0's host)\n" + gpus_text(d) +
                    "\nLauncher: " + str(d["launcher"]) + ", " + std::to_string(world) +
                    " rank(s) on " + std::to_string(d["hosts"].get<size_t>()) + " host(s)\n" +
                    ranks_text(d) + "\nHints\n" + hints_text(d) + "\n";
  int stops = 0;
  for (const json& h : d["hints"]) stops += h["stops"].get<bool>() ? 1 : 0;
  out += stops == 0 ? "Result: nothing found that would stop training (exit 0)\n"
                    : "Result: " + std::to_string(stops) +
                          " problem(s) above would stop training (exit 1)\n";
  return out;
}

}  // namespace

std::vector<std::string> env_variables() {
  return {"CUDA_VISIBLE_DEVICES", "SLURM_JOB_ID", "SLURM_CPUS_PER_TASK"};
}

int env_main(int argc, char** argv, const std::map<std::string, std::string>& env) {
  CLI::App app{
      "dtrain env: the versions, GPUs, launcher and each rank's binding (device, CPUs, "
      "threads) this machine gives dtrain, with hints for what is wrong. Exit 1 when "
      "something would stop training. Under mpirun/srun every rank reports to rank 0.",
      "dtrain env"};
  std::string config_path;
  std::vector<std::string> overrides;
  bool as_json = false;
  app.add_option("config", config_path,
                 "a config whose run.device, run.threads and data.path to check");
  app.add_option("overrides", overrides, "section.key=value settings that replace the file's");
  app.add_flag("--json", as_json, "print the facts as one JSON object");
  try {
    app.parse(argc - 1, argv + 1);
  } catch (const CLI::ParseError& e) {
    return usage_exit(app.exit(e));
  }
  return run_guarded(&argc, &argv, [&](Runtime& rt) {
    log::configure(rt.rank(), true);
    Config cfg;
    if (!config_path.empty()) cfg = Config::from_file(config_path, overrides);
    const RunConfig& run = cfg.run;
    const MachineFacts m = machine_facts(env);
    RankFacts r = rank_facts(rt, env, run, m.cuda_devices);
    if (!config_path.empty()) r.data_problem = data_problem(cfg.data);
    json hints = json::array();
    for (const Hint& h : env_hints(m, r, run.device))
      hints.push_back({{"stops", h.stops}, {"text", h.text}});
    const json mine = {{"rank", to_json(r)}, {"machine", to_json(m)}, {"hints", hints}};
    const json doc = merge(gather_strings(rt.cpu_comm(), mine.dump()));
    if (rt.rank() == 0) {
      const std::string text = as_json ? doc.dump(2) + "\n" : render_text(doc);
      std::fputs(text.c_str(), stdout);
      check_stdout();
    }
    return doc["exit_code"].get<int>();
  });
}

}  // namespace dtrain::cli
