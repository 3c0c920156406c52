#include "checkpoint/state.h"

#include <ATen/core/Dict.h>
#include <ATen/core/ivalue.h>
#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/pickler.h>

#include "checkpoint/pickle_reader.h"
#include "checkpoint/torch_file.h"
#include "config/schema.h"
#include "dtrain/config.h"
#include "dtrain/error.h"
#include "util/format.h"

namespace dtrain::detail {
namespace {

constexpr const char* kSharedFormat = "dtrain checkpoint state 1";
constexpr const char* kRankFormat = "dtrain checkpoint rank 1";

using Dict = c10::impl::GenericDict;

Dict new_dict() { return Dict(c10::StringType::get(), c10::AnyType::get()); }

c10::Dict<std::string, at::Tensor> tensor_dict(const NamedTensors& ts) {
  c10::Dict<std::string, at::Tensor> d;
  for (const auto& [name, t] : ts) d.insert(name, t.detach().to(at::kCPU).contiguous());
  return d;
}

// torch::pickle_save's archive, streamed: the pickle, then each tensor's storage as a record
// "data/<i>" in the pickle's order, then "data.pkl".
void write_pickled(const Dict& d, const ByteSink& out) {
  std::vector<char> pickle;
  torch::jit::Pickler pickler(
      [&pickle](const char* p, size_t n) { pickle.insert(pickle.end(), p, p + n); });
  pickler.protocol();
  pickler.pushIValue(c10::IValue(d));
  pickler.stop();
  write_archive(out, [&](caffe2::serialize::PyTorchStreamWriter& writer) {
    size_t i = 0;
    for (const at::Tensor& t : pickler.tensorData()) {
      const torch::jit::WriteableTensorData data = torch::jit::getWriteableTensorData(t);
      writer.writeRecord("data/" + std::to_string(i++), data.data(), data.sizeInBytes());
    }
    writer.writeRecord("data.pkl", pickle.data(), pickle.size());
  });
}

template <class State>
std::string to_string_of(const State& s) {
  std::string out;
  encode_to(s, [&out](const char* data, size_t n) { out.append(data, n); });
  return out;
}

using Kind = PickleValue::Kind;

// Reads a pickled dict with dtrain's bounded reader (checkpoint/pickle_reader.h; not LibTorch's
// unpickler, which a corrupt file can send into allocating without end), naming `file` when the
// bytes are not one.
PickleRef from_bytes(const std::string& bytes, const std::string& file, const char* format) {
  PickleRef v;
  try {
    v = torch_load_bytes(bytes, file);
  } catch (const Error& e) {
    throw Error("not a readable checkpoint file (truncated or corrupt?): " + e.cause(), file);
  }
  if (v->kind != Kind::kDict) throw Error("not a dtrain checkpoint file (no dict inside)", file);
  const PickleValue* f = v->find("format");
  if (!f || f->kind != Kind::kString || f->s != format)
    throw Error(
        std::string("not a dtrain checkpoint file of this kind (expected format '") + format + "')",
        file);
  return v;
}

// Typed reads that name the entry and the file.
class Reader {
 public:
  Reader(PickleRef d, std::string file) : d_(std::move(d)), file_(std::move(file)) {}
  const PickleValue& at(const std::string& key) const {
    const PickleValue* v = d_->find(key);
    if (!v) throw Error("checkpoint entry '" + key + "' is missing", file_);
    return *v;
  }
  bool has(const std::string& key) const { return d_->find(key) != nullptr; }
  int64_t integer(const std::string& key) const {
    const PickleValue& v = at(key);
    if (v.kind != Kind::kInt && v.kind != Kind::kBool)
      throw Error("checkpoint entry '" + key + "' is not an integer", file_);
    return v.i;
  }
  double number(const std::string& key) const {
    const PickleValue& v = at(key);
    if (v.kind != Kind::kFloat)
      throw Error("checkpoint entry '" + key + "' is not a number", file_);
    return v.f;
  }
  std::string text(const std::string& key) const {
    const PickleValue& v = at(key);
    if (v.kind != Kind::kString) throw Error("checkpoint entry '" + key + "' is not text", file_);
    return v.s;
  }
  at::Tensor tensor(const std::string& key, bool optional = false) const {
    const PickleValue* v = d_->find(key);
    if (optional && (!v || v->kind == Kind::kNone)) return {};
    if (at(key).kind != Kind::kTensor)
      throw Error("checkpoint entry '" + key + "' is not a tensor", file_);
    return v->tensor;
  }
  NamedTensors tensors(const std::string& key) const {
    const PickleValue& v = dict(key);
    NamedTensors out;
    for (size_t k = 0; k + 1 < v.items.size(); k += 2) {
      if (v.items[k]->kind != Kind::kString || v.items[k + 1]->kind != Kind::kTensor)
        throw Error("checkpoint entry '" + key + "' holds something other than named tensors",
                    file_);
      out.emplace_back(v.items[k]->s, v.items[k + 1]->tensor);
    }
    return out;
  }
  std::map<std::string, std::string> texts(const std::string& key) const {
    const PickleValue& v = dict(key);
    std::map<std::string, std::string> out;
    for (size_t k = 0; k + 1 < v.items.size(); k += 2) {
      if (v.items[k]->kind != Kind::kString || v.items[k + 1]->kind != Kind::kString)
        throw Error("checkpoint entry '" + key + "' holds something other than text", file_);
      out[v.items[k]->s] = v.items[k + 1]->s;
    }
    return out;
  }

 private:
  const PickleValue& dict(const std::string& key) const {
    const PickleValue& v = at(key);
    if (v.kind != Kind::kDict) throw Error("checkpoint entry '" + key + "' is not a dict", file_);
    return v;
  }

  PickleRef d_;
  std::string file_;
};

}  // namespace

std::string rank_file_name(int rank) { return format("rank-%05d.pt", rank); }

std::map<std::string, std::string> config_values(const Config& cfg) {
  std::map<std::string, std::string> out;
  for (const auto& f : config::schema()) out[f.key] = f.get(cfg);
  return out;
}

void encode_to(const SharedState& s, const ByteSink& out) {
  Dict d = new_dict();
  d.insert("format", kSharedFormat);
  const LoopPosition& p = s.position;
  d.insert("step", p.step);
  d.insert("steps_per_epoch", p.steps_per_epoch);
  d.insert("epoch_end_done", static_cast<int64_t>(p.epoch_end_done));
  d.insert("samples", p.samples);
  d.insert("micro_batch", p.micro_batch);
  d.insert("window_loss", p.window_loss);
  d.insert("window_steps", p.window_steps);
  d.insert("last_loss", p.last_loss);
  d.insert("schedule_start", p.schedule_start);
  d.insert("stopped_early", static_cast<int64_t>(p.stopped_early));
  d.insert("stop_reason", p.stop_reason);
  d.insert("world", static_cast<int64_t>(s.world));
  d.insert("global_batch", s.global_batch);
  c10::Dict<std::string, std::string> cfg;
  for (const auto& [k, v] : s.config) cfg.insert(k, v);
  d.insert("config", cfg);
  d.insert("config_hash", s.config_hash);
  d.insert("dtrain_version", s.dtrain_version);
  d.insert("libtorch_version", s.libtorch_version);
  d.insert("model", tensor_dict(s.model));
  d.insert("optimizer", tensor_dict(s.optimizer));
  if (s.optimizer_shards > 0)
    d.insert("optimizer_shards", static_cast<int64_t>(s.optimizer_shards));
  d.insert("scaler", tensor_dict(s.scaler));
  if (!s.ema.empty()) {
    d.insert("ema", tensor_dict(s.ema));
    d.insert("ema_updates", s.ema_updates);
  }
  c10::Dict<std::string, std::string> hooks;
  for (const auto& [k, v] : s.hooks) hooks.insert(k, v);
  d.insert("hooks", hooks);
  write_pickled(d, out);
}

void encode_to(const RankState& s, const ByteSink& out) {
  Dict d = new_dict();
  d.insert("format", kRankFormat);
  d.insert("rank", static_cast<int64_t>(s.rank));
  d.insert("world", static_cast<int64_t>(s.world));
  d.insert("step", s.step);
  d.insert("cpu_rng", s.cpu_rng);
  if (s.cuda_rng.defined()) d.insert("cuda_rng", s.cuda_rng);
  if (!s.optimizer_shard.empty()) d.insert("optimizer_shard", tensor_dict(s.optimizer_shard));
  write_pickled(d, out);
}

std::string encode(const SharedState& s) { return to_string_of(s); }
std::string encode(const RankState& s) { return to_string_of(s); }

SharedState decode_shared(const std::string& bytes, const std::string& file) {
  const Reader r(from_bytes(bytes, file, kSharedFormat), file);
  SharedState s;
  LoopPosition& p = s.position;
  p.step = r.integer("step");
  p.steps_per_epoch = r.integer("steps_per_epoch");
  p.epoch_end_done = r.integer("epoch_end_done") != 0;
  p.samples = r.integer("samples");
  p.micro_batch = r.integer("micro_batch");
  p.window_loss = r.number("window_loss");
  p.window_steps = r.integer("window_steps");
  p.last_loss = r.number("last_loss");
  p.schedule_start =
      r.has("schedule_start") ? r.integer("schedule_start") : 0;  // 0: before the key
  // Before the keys no checkpoint recorded an early stop (that run resumes as a stopped one did).
  p.stopped_early = r.has("stopped_early") && r.integer("stopped_early") != 0;
  if (r.has("stop_reason")) p.stop_reason = r.text("stop_reason");
  s.world = static_cast<int>(r.integer("world"));
  s.global_batch = r.integer("global_batch");
  s.config = r.texts("config");
  s.config_hash = r.text("config_hash");
  s.dtrain_version = r.text("dtrain_version");
  s.libtorch_version = r.text("libtorch_version");
  s.model = r.tensors("model");
  s.optimizer = r.tensors("optimizer");
  if (r.has("optimizer_shards"))
    s.optimizer_shards = static_cast<int>(r.integer("optimizer_shards"));
  s.scaler = r.tensors("scaler");
  if (r.has("ema")) {
    s.ema = r.tensors("ema");
    s.ema_updates = r.integer("ema_updates");
  }
  if (r.has("hooks")) s.hooks = r.texts("hooks");  // none before the key
  if (p.step < 0 || s.world < 1 || s.global_batch < 1 || p.micro_batch < 1)
    throw Error("checkpoint position is not valid (step " + std::to_string(p.step) + ", world " +
                    std::to_string(s.world) + ")",
                file);
  return s;
}

RankState decode_rank(const std::string& bytes, const std::string& file) {
  const Reader r(from_bytes(bytes, file, kRankFormat), file);
  RankState s;
  s.rank = static_cast<int>(r.integer("rank"));
  s.world = static_cast<int>(r.integer("world"));
  s.step = r.integer("step");
  s.cpu_rng = r.tensor("cpu_rng");
  s.cuda_rng = r.tensor("cuda_rng", /*optional=*/true);
  if (r.has("optimizer_shard")) s.optimizer_shard = r.tensors("optimizer_shard");
  return s;
}

}  // namespace dtrain::detail
