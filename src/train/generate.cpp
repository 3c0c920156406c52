#include "train/generate.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <limits>

namespace dtrain::detail {

std::vector<int64_t> generate(Model& model, const at::Device& device,
                              const std::vector<int64_t>& prompt, int64_t max_new, int64_t context,
                              const SamplingOptions& options) {
  model.eval();
  at::NoGradGuard no_grad;
  at::Generator gen = at::detail::createCPUGenerator(options.seed);
  std::vector<int64_t> tokens = prompt, out;
  for (int64_t i = 0; i < max_new; ++i) {
    const auto t = std::min<int64_t>(context, static_cast<int64_t>(tokens.size()));
    const std::vector<int64_t> window(tokens.end() - t, tokens.end());
    const at::Tensor idx = at::tensor(window, at::kLong).view({1, t}).to(device);
    at::Tensor logits = model.forward(idx).select(1, t - 1)[0].to(at::kCPU, at::kFloat);  // (V,)
    int64_t next = 0;
    if (options.temperature <= 0) {
      next = logits.argmax().item<int64_t>();
    } else {
      logits = logits / options.temperature;
      if (options.top_k > 0 && options.top_k < logits.size(0)) {
        const at::Tensor kth = std::get<0>(logits.topk(options.top_k)).min();
        logits.masked_fill_(logits < kth, -std::numeric_limits<float>::infinity());
      }
      next = at::multinomial(logits.softmax(0), 1, false, gen).item<int64_t>();
    }
    tokens.push_back(next);
    out.push_back(next);
  }
  return out;
}

}  // namespace dtrain::detail
