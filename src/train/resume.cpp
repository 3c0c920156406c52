#include "train/resume.h"

#include <ATen/Context.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <map>
#include <mutex>

#include "checkpoint/folder.h"
#include "config/schema.h"
#include "dtrain/error.h"
#include "dtrain/log.h"
#include "train/cursor.h"
#include "train/run_directory.h"
#include "util/dir.h"
#include "util/format.h"
#include "util/fs.h"

namespace dtrain::detail {
namespace {

// Keys that decide the model, the data and the order of samples: a checkpoint written under
// other values cannot be continued (the schema's OnResume::kMustMatch). Every other key may
// change on resume (and is logged).
bool must_match(const std::string& key) {
  const config::Field* f = config::find_field(key);
  return f && f->on_resume == config::OnResume::kMustMatch;
}

// The checkpoint checkpoint.resume names ("" for a fresh start), logged when `say`; an Error
// when it names none that exists.
std::string pick(const Config& cfg, bool say) {
  const std::string& mode = cfg.checkpoint.resume;
  std::string path;
  if (mode == "auto") {
    const std::string folder = cfg.checkpoint.folder(cfg.run);
    if (!folder.empty()) path = CheckpointFolder(folder).newest_complete();
    if (say)
      log::info(path.empty()
                    ? "checkpoint.resume auto: no complete checkpoint in " +
                          (folder.empty() ? std::string("(no folder: the run writes no files)")
                                          : folder) +
                          ", starting fresh"
                    : "checkpoint.resume auto: resuming from " + path);
  } else if (mode != "none") {
    path = mode;
    if (!is_dir(path)) throw Error("no such checkpoint", "checkpoint.resume=" + mode);
    if (!has_marker(path)) {  // a folder of checkpoints?
      const std::string newest = CheckpointFolder(path).newest_complete();
      if (!newest.empty()) path = newest;
    }
    if (say) log::info("resuming from " + path);
  }
  return path;
}

// Rank 0 picks the checkpoint; every rank gets its path ("" for a fresh start) or its error.
std::string choose(const Config& cfg, Communicator& control) {
  std::string path, failure;
  if (control.rank() == 0) {
    try {
      path = pick(cfg, /*say=*/true);
      if (!path.empty()) checked(path);  // every file against the marker
    } catch (const std::exception& e) {
      failure = first_line(e.what());
    }
  }
  const auto all = gather_strings(control, failure.empty() ? path : "\x01" + failure);
  if (!all[0].empty() && all[0][0] == '\x01')
    throw Error("cannot resume: " + all[0].substr(1), "checkpoint.resume");
  return all[0];
}

void compare_config(const SharedState& saved, const Config& cfg, const std::string& file) {
  const auto now = config_values(cfg);
  std::string fatal, changed;
  for (const auto& [key, value] : now) {
    const auto it = saved.config.find(key);
    const std::string before = it == saved.config.end() ? "(not a key then)" : it->second;
    if (before == value) continue;
    std::string line = key + ": " + before + " in the checkpoint, " + value + " now";
    if (must_match(key) && it != saved.config.end())
      fatal += (fatal.empty() ? "" : "; ") + line;
    else
      changed += "\n  " + line;
  }
  if (!fatal.empty())
    throw Error("the checkpoint was written with another config (" + fatal +
                    "); these keys must stay the same to resume: start another run.name, or set "
                    "checkpoint.resume=none",
                file);
  if (!changed.empty()) log::info("resuming with changed settings:" + changed);
}

// `saved`'s values copied into `targets`, name by name: every target needs a value of its shape,
// and every value a target (`what`: whose names they are), or an Error names `file`.
void load_named(const NamedTensors& targets, const NamedTensors& saved, const std::string& what,
                const std::string& file) {
  std::map<std::string, at::Tensor> by_name(saved.begin(), saved.end());
  std::vector<std::pair<at::Tensor, at::Tensor>> copies;
  auto take = [&](const std::string& name, const at::Tensor& into) {
    const auto it = by_name.find(name);
    if (it == by_name.end())
      throw Error("the checkpoint has no value for the " + what + "'s '" + name + "'", file);
    if (it->second.sizes() != into.sizes())
      throw Error("'" + name + "' has shape " + shape_str(it->second.sizes().vec()) +
                      " in the checkpoint but " + shape_str(into.sizes().vec()) + " in the " + what,
                  file);
    copies.emplace_back(into, it->second);
    by_name.erase(it);
  };
  for (const auto& [name, t] : targets) take(name, t);
  if (!by_name.empty())
    throw Error("the checkpoint holds '" + by_name.begin()->first + "', which the " + what +
                    " does not have (another model?)",
                file);
  at::NoGradGuard no_grad;
  for (auto& [into, from] : copies) into.copy_(from);
}

// The keys of an early stop's rule whose values differ from the checkpoint's ("train.monitor
// test_loss -> test_accuracy, ..."; "" when none does).
std::string stop_rule_changes(const std::map<std::string, std::string>& saved, const Config& cfg) {
  const std::map<std::string, std::string> now = config_values(cfg);
  std::string out;
  for (const char* key : {"train.early_stop_patience", "train.monitor"}) {
    const auto it = saved.find(key);
    if (it == saved.end() || it->second == now.at(key)) continue;
    out += (out.empty() ? "" : ", ") + std::string(key) + " " + it->second + " -> " + now.at(key);
  }
  return out;
}

void set_generator_state(at::Generator gen, const at::Tensor& state) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

// The whole optimizer state of a checkpoint whose ranks wrote their shards into their own files.
OptimizerState shards_put_together(const std::string& path, const SharedState& saved,
                                   const std::vector<at::Tensor>& params) {
  if (saved.optimizer_shards != saved.world)
    throw Error("state.pt names " + std::to_string(saved.optimizer_shards) +
                    " optimizer shards for a checkpoint of " + std::to_string(saved.world) +
                    " ranks",
                join_path(path, "state.pt"));
  std::map<std::string, at::Tensor> pieces;
  for (int r = 0; r < saved.optimizer_shards; ++r) {
    const std::string file = join_path(path, rank_file_name(r));
    for (auto& [name, t] : decode_rank(read_file(file), file).optimizer_shard)
      pieces[name] = std::move(t);
  }
  return whole_optimizer_state(pieces, params, saved.optimizer_shards, path);
}

}  // namespace

LoopPosition resume_position(const SharedState& saved, const Config& cfg, std::string* said) {
  LoopPosition p = saved.position;
  if (!p.stopped_early) return p;
  const std::string changes = stop_rule_changes(saved.config, cfg);
  if (changes.empty()) return p;
  p.stopped_early = false;
  if (said)
    *said = "the run stopped early at step " + std::to_string(p.step) +
            (p.stop_reason.empty() ? std::string() : " (" + p.stop_reason + ")") + "; " + changes +
            " now: it trains on from there (the evaluations since its best value counted from the "
            "checkpoint)";
  return p;
}

std::string finished_run_error(const LoopPosition& p, const TrainConfig& t) {
  const std::string again = "; to train again from the start, give the new run another run.name";
  if (p.stopped_early)
    return "this run has finished: its checkpoint is at step " + std::to_string(p.step) +
           ", where it stopped early (" +
           (p.stop_reason.empty() ? std::string("a hook asked to stop") : p.stop_reason) +
           "), so there is nothing to train and nothing was written. More train.epochs or "
           "train.max_steps do not "
           "train on (a run planned longer stops at the same step); to train on past the early "
           "stop, change its "
           "rule: train.early_stop_patience (" +
           std::to_string(t.early_stop_patience) +
           " now; raise it, or 0 for no early stopping) or train.monitor" + again;
  return "this run has finished: its checkpoint is at step " + std::to_string(p.step) +
         ", the end of training (train.epochs " + std::to_string(t.epochs) +
         (t.max_steps > 0 ? ", train.max_steps " + std::to_string(t.max_steps) : "") +
         "), so there is nothing to train and nothing was written. To train on, raise train.epochs "
         "or "
         "train.max_steps" +
         again;
}

void refuse_finished_run(const Config& cfg, Communicator& control) {
  std::string failure;
  if (control.rank() == 0) {
    try {
      // A run that holds the directory now is still writing its checkpoints: claiming the
      // directory reports it (naming the holder), not this.
      const std::string path =
          run_directory_holder(cfg).empty() ? pick(cfg, /*say=*/false) : std::string();
      if (!path.empty()) {
        const std::string file = join_path(path, "state.pt");
        const LoopPosition p = resume_position(decode_shared(read_file(file), file), cfg, nullptr);
        const TrainConfig& t = cfg.train;
        // The loop's rule (LoopCursor::finished) on the steps planned from the checkpoint's epochs.
        int64_t total = p.steps_per_epoch * t.epochs;
        if (t.max_steps > 0) total = std::min(total, t.max_steps);
        if (p.steps_per_epoch > 0 &&
            LoopCursor(cfg, &p, p.steps_per_epoch, total, false).finished())
          failure = path + "\n" + finished_run_error(p, t);
      }
    } catch (const std::exception&) {
      // A checkpoint that cannot be read here is the resume's to report, after start-up.
    }
  }
  const std::string said = gather_strings(control, failure)[0];
  if (said.empty()) return;
  const size_t cut = said.find('\n');
  throw AgreedError(said.substr(cut + 1), said.substr(0, cut), /*first_rank=*/0);
}

std::optional<ResumePoint> resume(StepContext& ctx, const Config& cfg, Communicator& control) {
  const std::string path = choose(cfg, control);
  if (path.empty()) return std::nullopt;
  const std::string state_file = join_path(path, "state.pt");
  const SharedState saved = decode_shared(read_file(state_file), state_file);
  compare_config(saved, cfg, state_file);
  NamedTensors model;
  for (const auto& p : ctx.model->named_parameters()) model.emplace_back(p.key(), p.value());
  for (const auto& b : ctx.model->named_buffers()) model.emplace_back(b.key(), b.value());
  load_named(model, saved.model, "model", state_file);
  // train.ema_decay: the average goes on where the checkpoint has one, else starts from the model.
  if (ctx.ema && !saved.ema.empty()) {
    load_named(ctx.ema->named(), saved.ema, "weight average (train.ema_decay)", state_file);
    ctx.ema->set_updates(saved.ema_updates);
  } else if (ctx.ema) {
    ctx.ema->restart();
    log::info("the checkpoint holds no weight average: train.ema_decay's starts from the model");
  } else if (!saved.ema.empty()) {
    log::info("the checkpoint's weight average is not used (train.ema_decay is 0)");
  }
  // A sharded run's checkpoint holds its shards' entries, one rank file each: put together
  // (Note [sharded optimizer]).
  const OptimizerState whole =
      saved.optimizer_shards > 0 ? shards_put_together(path, saved, ctx.params) : saved.optimizer;
  try {
    // A shard loads its own entries of the whole state.
    ctx.optimizer->load_state(ctx.data_parallel->own_state(whole));
    if (ctx.scaler && !saved.scaler.empty()) ctx.scaler->load_state(saved.scaler);
  } catch (const Error& e) {
    throw Error(e.cause(), state_file);
  }
  if (ctx.scaler && saved.scaler.empty())
    log::info("the checkpoint has no loss-scaler state: the scaler starts afresh");

  const int rank = control.rank(), world = control.world();
  if (rank < saved.world) {
    const std::string rf = join_path(path, rank_file_name(rank));
    const RankState mine = decode_rank(read_file(rf), rf);
    set_generator_state(at::detail::getDefaultCPUGenerator(), mine.cpu_rng);
    if (ctx.device.is_cuda() && mine.cuda_rng.defined())
      set_generator_state(at::globalContext().defaultGenerator(ctx.device), mine.cuda_rng);
  }
  std::string trains_on;  // an early-stopped run under another rule
  ResumePoint rp{path, resume_position(saved, cfg, &trains_on), saved.world, saved.config,
                 saved.hooks};
  if (!trains_on.empty()) log::info(trains_on);
  std::string how = "resumed from " + path + " at step " + std::to_string(rp.position.step);
  if (saved.world != world)
    how += "; it was written by " + std::to_string(saved.world) + " rank(s), this run has " +
           std::to_string(world) + ": the global batch stays " +
           std::to_string(cfg.train.global_batch) + " (" + std::to_string(world) + " x " +
           std::to_string(cfg.resolved.rank_batch) + " per step) and the sample order continues" +
           (world > saved.world ? "; the random generators of ranks " +
                                      std::to_string(saved.world) + "+ start afresh"
                                : "");
  log::info(how);
  return rp;
}

}  // namespace dtrain::detail
