// data.format tokens and text: language-model windows from token files or text bytes.
//
// Note [token windows]: a sample is a window of seq_len + 1 consecutive tokens of one file; the
// inputs are its first seq_len tokens, the targets the same window shifted by one (as synthetic
// tokens). Training windows start at positions drawn once from run.seed (every rank draws the same
// ones), a file chosen in proportion to the windows it can hold; data.windows sets how many (0:
// the training tokens / (seq_len + 1), one pass's worth). The distributed sampler then shards and
// reshuffles them every epoch like any dataset, so a resumed run sees the same windows in the
// same order. Evaluation windows are read in order, seq_len apart, so that every token of the
// test files but the first of each is a target once. Token files are memory-mapped:
//   - nanoGPT's train.bin / val.bin: flat uint16 (data.token_dtype uint32 for wider ones);
//   - llm.c's shards: a 256 x int32 header (magic 20240520, version 1: uint16 tokens; magic
//     20240801, version 7: uint32), the token count at header[2], then the tokens.
// Text files are read whole, their bytes the tokens (vocabulary 256); the last
// data.test_fraction of each file is the test split. Every token is checked against the
// vocabulary (data.num_classes, model.vocab_size by default) when its window is read: one out
// of range is an error naming the file and the token's index, never a wrong batch.
// Registered as data.format tokens and text (Note [data formats]), with `dtrain predict`'s
// prompts: text's bytes, or token ids written in decimal.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "data/files.h"
#include "data/formats/registry.h"
#include "data/splits.h"
#include "dtrain/config.h"
#include "dtrain/error.h"
#include "util/format.h"

namespace dtrain::detail {
namespace {

constexpr int32_t kLlmcMagic16 = 20240520, kLlmcMagic32 = 20240801;
constexpr int64_t kLlmcHeaderBytes = 256 * 4;

// One file's tokens: `count` tokens of `width` bytes from `data`, kept alive by `owner` (a mapping
// or a buffer).
struct Shard {
  std::string path;
  std::shared_ptr<const void> owner;
  const uint8_t* data = nullptr;
  int64_t count = 0;
  int width = 2;
  int64_t header = 0;  // bytes before the first token (the token index -> file offset map)

  int64_t token(int64_t i) const {
    const uint8_t* p = data + i * width;
    if (width == 1) return p[0];
    if (width == 2) {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return v;
    }
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
  }
};

std::string errno_text() { return std::strerror(errno); }

// The file's bytes, memory-mapped read-only (an empty or unreadable file is an error).
std::pair<std::shared_ptr<const void>, int64_t> map_file(const std::string& path,
                                                         const std::string& key) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw Error("cannot open " + path + ": " + errno_text(), key);
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error("not a regular file: " + path, key);
  }
  const auto size = static_cast<int64_t>(st.st_size);
  if (size == 0) {
    ::close(fd);
    throw Error("empty file: " + path, key);
  }
  void* p = ::mmap(nullptr, static_cast<size_t>(size), PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) throw Error("cannot map " + path + ": " + errno_text(), key);
  std::shared_ptr<const void> owner(
      p, [size](const void* q) { ::munmap(const_cast<void*>(q), static_cast<size_t>(size)); });
  return {owner, size};
}

Shard token_shard(const DataConfig& cfg, const std::string& path, const std::string& key) {
  auto [owner, size] = map_file(path, key);
  Shard s;
  s.path = path;
  s.owner = owner;
  const auto* bytes = static_cast<const uint8_t*>(owner.get());
  int32_t head[3] = {0, 0, 0};
  if (size >= 12) std::memcpy(head, bytes, sizeof(head));
  const bool llmc = head[0] == kLlmcMagic16 || head[0] == kLlmcMagic32;
  if (llmc) {
    const bool wide = head[0] == kLlmcMagic32;
    if ((!wide && head[1] != 1) || (wide && head[1] != 7))
      throw Error(path + ": llm.c header (magic " + std::to_string(head[0]) + ") with version " +
                      std::to_string(head[1]) + ", expected " + (wide ? "7" : "1"),
                  key);
    if (size < kLlmcHeaderBytes)
      throw Error(path + ": truncated llm.c header: " + std::to_string(size) + " bytes, expected " +
                      std::to_string(kLlmcHeaderBytes),
                  key);
    s.width = wide ? 4 : 2;
    s.header = kLlmcHeaderBytes;
    if (cfg.token_dtype != TokenDtype::kAuto && (cfg.token_dtype == TokenDtype::kUint32) != wide)
      throw Error(path + "'s llm.c header says " + (wide ? "uint32" : "uint16") +
                      " tokens, the config says " + to_string(cfg.token_dtype),
                  "data.token_dtype");
  } else {
    s.width = cfg.token_dtype == TokenDtype::kUint32 ? 4 : 2;
  }
  const int64_t payload = size - s.header;
  if (payload % s.width != 0)
    throw Error(path + ": " + std::to_string(payload) +
                    " bytes of tokens is not a whole number of " + std::to_string(s.width) +
                    "-byte tokens: truncated at byte offset " +
                    std::to_string(s.header + payload / s.width * s.width),
                key);
  s.count = payload / s.width;
  if (llmc && head[2] != s.count)
    throw Error(path + ": the llm.c header says " + std::to_string(head[2]) +
                    " tokens, the file holds " + std::to_string(s.count) +
                    (head[2] > s.count ? " (truncated)" : ""),
                key);
  if (s.count == 0) throw Error(path + ": no tokens after the llm.c header", key);
  s.data = bytes + s.header;
  return s;
}

// "no file holds a window": the files and their token counts, for the Error.
std::string too_short(const std::vector<Shard>& shards, int64_t t) {
  std::string files;
  for (size_t i = 0; i < shards.size() && i < 4; ++i)
    files += (i ? ", " : "") + shards[i].path + " (" + std::to_string(shards[i].count) + " tokens)";
  if (shards.size() > 4) files += ", and " + std::to_string(shards.size() - 4) + " more";
  return "no file holds a window of seq_len + 1 = " + std::to_string(t + 1) + " tokens: " + files;
}

// Windows of T + 1 tokens from shards: (shard, first token) pairs.
class TokenWindows : public Dataset {
 public:
  TokenWindows(std::vector<Shard> shards, std::vector<std::pair<int, int64_t>> windows, int64_t t,
               int64_t vocab, std::string rule, std::string description)
      : shards_(std::move(shards)),
        windows_(std::move(windows)),
        t_(t),
        vocab_(vocab),
        rule_(std::move(rule)),
        description_(std::move(description)) {}

  int64_t size() const override { return static_cast<int64_t>(windows_.size()); }

  Batch get(const std::vector<int64_t>& indices) const override {
    const auto n = static_cast<int64_t>(indices.size());
    at::Tensor inputs = at::empty({n, t_}, at::kLong), targets = at::empty({n, t_}, at::kLong);
    int64_t* in = inputs.data_ptr<int64_t>();
    int64_t* out = targets.data_ptr<int64_t>();
    for (int64_t k = 0; k < n; ++k) {
      const int64_t i = indices[static_cast<size_t>(k)];
      if (i < 0 || i >= size())
        throw Error("window index " + std::to_string(i) + " is out of range [0, " +
                        std::to_string(size()) + ")",
                    description_);
      const auto& [which, first] = windows_[static_cast<size_t>(i)];
      const Shard& s = shards_[static_cast<size_t>(which)];
      for (int64_t j = 0; j <= t_; ++j) {
        const int64_t v = s.token(first + j);
        if (v >= vocab_)
          throw Error(s.path + ": token " + std::to_string(v) + " at token index " +
                          std::to_string(first + j) + " (byte offset " +
                          std::to_string(s.header + (first + j) * s.width) +
                          ") is outside the vocabulary [0, " + std::to_string(vocab_) + "), " +
                          rule_,
                      "data.num_classes");
        if (j < t_) in[k * t_ + j] = v;
        if (j > 0) out[k * t_ + j - 1] = v;
      }
    }
    return Batch{inputs, targets};
  }

  DataSpec spec() const override {
    DataSpec d;
    d.input_shape = {t_};
    d.num_classes = vocab_;
    d.input_dtype = at::kLong;
    return d;
  }
  std::string describe() const override { return description_; }

 private:
  std::vector<Shard> shards_;
  std::vector<std::pair<int, int64_t>> windows_;
  int64_t t_, vocab_;
  std::string rule_, description_;
};

int64_t total_tokens(const std::vector<Shard>& shards) {
  int64_t n = 0;
  for (const auto& s : shards) n += s.count;
  return n;
}

// data.windows windows (0: tokens / (T + 1)) at positions drawn from `seed`, each file chosen in
// proportion to its number of possible starts.
std::vector<std::pair<int, int64_t>> random_windows(const std::vector<Shard>& shards, int64_t t,
                                                    int64_t wanted, int64_t seed,
                                                    const std::string& key) {
  std::vector<int64_t> starts;  // cumulative possible starts
  int64_t total = 0;
  for (const auto& s : shards) {
    total += s.count > t ? s.count - t : 0;
    starts.push_back(total);
  }
  if (total == 0) throw Error(too_short(shards, t), key);
  const int64_t n = wanted > 0 ? wanted : std::max<int64_t>(1, total_tokens(shards) / (t + 1));
  std::mt19937_64 rng(static_cast<uint64_t>(seed) * 0x9E3779B97F4A7C15ull + 17);
  std::vector<std::pair<int, int64_t>> w;
  w.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const auto r = static_cast<int64_t>(rng() % static_cast<uint64_t>(total));
    const auto it = std::upper_bound(starts.begin(), starts.end(), r);
    const int which = static_cast<int>(it - starts.begin());
    const int64_t before = which == 0 ? 0 : starts[static_cast<size_t>(which - 1)];
    w.emplace_back(which, r - before);
  }
  return w;
}

// Windows seq_len apart from the start of each file, in order.
std::vector<std::pair<int, int64_t>> sequential_windows(const std::vector<Shard>& shards, int64_t t,
                                                        const std::string& key) {
  std::vector<std::pair<int, int64_t>> w;
  for (size_t i = 0; i < shards.size(); ++i)
    for (int64_t first = 0; first + t < shards[i].count; first += t)
      w.emplace_back(static_cast<int>(i), first);
  if (w.empty()) throw Error(too_short(shards, t), key);
  return w;
}

int64_t window_length(const DataConfig& cfg) {
  if (cfg.seq_len < 1)
    throw Error("is 0: set it, or resolve the config so that it comes from model.seq_len",
                "data.seq_len");
  return cfg.seq_len;
}

std::string vocab_rule(const DataConfig& cfg) {
  return "data.num_classes (model.vocab_size unless set) is " + std::to_string(cfg.num_classes);
}

std::string files_text(const std::vector<Shard>& shards) {
  return shards.size() == 1 ? shards[0].path : std::to_string(shards.size()) + " files";
}

}  // namespace

Splits make_token_splits(const DataConfig& cfg, int64_t seed) {
  const int64_t t = window_length(cfg);
  if (cfg.num_classes < 1)
    throw Error("is 0: set it or resolve the config (model.vocab_size)", "data.num_classes");
  if (cfg.train_files.empty()) throw Error("is empty: name the token files", "data.train_files");
  auto load = [&](const std::string& patterns, const std::string& key) {
    std::vector<Shard> shards;
    for (const auto& f : expand_files(cfg, patterns, key))
      shards.push_back(token_shard(cfg, f, key));
    return shards;
  };
  Splits out;
  std::vector<Shard> train = load(cfg.train_files, "data.train_files");
  // data.val_fraction: the last fraction of each file, read in order, is the validation split.
  std::vector<Shard> val;
  for (Shard& s : train) {
    if (cfg.val_fraction <= 0) break;
    const auto keep = static_cast<int64_t>(static_cast<double>(s.count) * (1.0 - cfg.val_fraction));
    Shard v = s;
    v.data = s.data + keep * s.width, v.count = s.count - keep,
    v.header = s.header + keep * s.width;
    s.count = keep;
    if (v.count > t) val.push_back(v);
  }
  if (cfg.val_fraction > 0) {
    if (val.empty())
      throw Error(
          format("holds out the last %g of each training file, fewer tokens than a window of %lld",
                 cfg.val_fraction, static_cast<long long>(t + 1)),
          "data.val_fraction");
    auto w = sequential_windows(val, t, "data.val_fraction");
    out.val = std::make_shared<TokenWindows>(
        std::move(val), std::move(w), t, cfg.num_classes, vocab_rule(cfg),
        "tokens: the last " + format("%g", 100 * cfg.val_fraction) +
            "% of each training file (validation, data.val_fraction)");
  }
  const int64_t train_tokens = total_tokens(train);
  auto windows = random_windows(train, t, cfg.windows, seed, "data.train_files");
  const std::string what = files_text(train);
  out.train = std::make_shared<TokenWindows>(
      std::move(train), std::move(windows), t, cfg.num_classes, vocab_rule(cfg),
      format("tokens: %s, %lld tokens, windows of %lld", what.c_str(),
             static_cast<long long>(train_tokens), static_cast<long long>(t + 1)));
  if (!cfg.test_files.empty()) {
    std::vector<Shard> test = load(cfg.test_files, "data.test_files");
    auto w = sequential_windows(test, t, "data.test_files");
    const std::string tw = files_text(test);
    out.test = std::make_shared<TokenWindows>(std::move(test), std::move(w), t, cfg.num_classes,
                                              vocab_rule(cfg), "tokens: " + tw + " (evaluation)");
  }
  return out;
}

Splits make_text_splits(const DataConfig& cfg, int64_t seed) {
  const int64_t t = window_length(cfg);
  if (cfg.train_files.empty()) throw Error("is empty: name the text files", "data.train_files");
  if (cfg.num_classes != 0 && cfg.num_classes != 256)
    throw Error("text is bytes: 256 tokens; leave data.num_classes at 0 or 256, got " +
                    std::to_string(cfg.num_classes),
                "data.num_classes");
  std::vector<Shard> train, test;
  int64_t bytes = 0;
  for (const auto& f : expand_files(cfg, cfg.train_files, "data.train_files")) {
    auto [owner, size] = map_file(f, "data.train_files");
    const auto* p = static_cast<const uint8_t*>(owner.get());
    const auto keep = static_cast<int64_t>(static_cast<double>(size) * (1.0 - cfg.test_fraction));
    Shard s;
    s.path = f, s.owner = owner, s.data = p, s.count = keep, s.width = 1;
    train.push_back(s);
    if (size - keep > 0) {
      Shard e = s;
      e.data = p + keep, e.count = size - keep, e.header = keep;  // header: the test part's offset
      test.push_back(e);
    }
    bytes += size;
  }
  Splits out;
  auto windows = random_windows(train, t, cfg.windows, seed, "data.train_files");
  const std::string what = files_text(train);
  const std::string rule = "text is bytes (vocabulary 256)";
  out.train = std::make_shared<TokenWindows>(
      std::move(train), std::move(windows), t, 256, rule,
      format("text: %s, %lld bytes, windows of %lld", what.c_str(), static_cast<long long>(bytes),
             static_cast<long long>(t + 1)));
  if (cfg.test_fraction > 0 && !test.empty()) {
    bool any = false;
    for (const auto& s : test) any = any || s.count > t;
    if (any) {
      auto w = sequential_windows(test, t, "data.test_fraction");
      out.test = std::make_shared<TokenWindows>(std::move(test), std::move(w), t, 256, rule,
                                                "text: the last " +
                                                    format("%.0f%%", 100 * cfg.test_fraction) +
                                                    " of " + what + " (evaluation)");
    }
  }
  return out;
}

namespace {

// dtrain predict's prompt as token ids: decimal ids separated by white space.
std::vector<int64_t> decimal_tokens(const std::string& text, int64_t vocab,
                                    const std::string& where) {
  std::vector<int64_t> ids;
  size_t i = 0;
  while (i < text.size()) {
    if (std::isspace(static_cast<unsigned char>(text[i]))) {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]))) ++end;
    if (end == i || (end < text.size() && !std::isspace(static_cast<unsigned char>(text[end]))))
      throw Error("byte " + std::to_string(i) +
                      ": a token id is a decimal number (data.format tokens: "
                      "the prompt is token ids separated by white space)",
                  where);
    ids.push_back(std::stoll(text.substr(i, std::min<size_t>(end - i, 18))));
    if (end - i > 18 || ids.back() >= vocab)
      throw Error("token " + text.substr(i, end - i) + " is not below the vocabulary size " +
                      std::to_string(vocab),
                  where);
    i = end;
  }
  return ids;
}

std::string decimal_text(const std::vector<int64_t>& ids) {
  std::string out;
  for (int64_t t : ids) out += (out.empty() ? "" : " ") + std::to_string(t);
  return out + "\n";
}

}  // namespace

std::vector<FormatRegistration> token_formats() {
  FormatRegistration tokens;
  tokens.name = DataFormat::kTokens.name();
  tokens.make_splits = [](const DataConfig& cfg, int64_t seed, const at::Device&) {
    return make_token_splits(cfg, seed);
  };
  tokens.preprocess_keys = {{"/input_shape", "data.seq_len"}};
  tokens.prompt_tokens = decimal_tokens;
  tokens.token_text = decimal_text;
  FormatRegistration text = tokens;
  text.name = DataFormat::kText.name();
  text.make_splits = [](const DataConfig& cfg, int64_t seed, const at::Device&) {
    return make_text_splits(cfg, seed);
  };
  text.prompt_tokens = [](const std::string& bytes, int64_t, const std::string&) {
    return std::vector<int64_t>(
        reinterpret_cast<const unsigned char*>(bytes.data()),
        reinterpret_cast<const unsigned char*>(bytes.data()) + bytes.size());
  };
  text.token_text = [](const std::vector<int64_t>& ids) {
    std::string out;
    for (int64_t t : ids) out += static_cast<char>(t);
    return out;
  };
  return {std::move(tokens), std::move(text)};
}

}  // namespace dtrain::detail
