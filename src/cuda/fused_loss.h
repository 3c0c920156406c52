// Cross-entropy for large vocabularies on CUDA without materializing fp32 logits: the forward
// reads (N, V) logits in their own precision and keeps one log-sum-exp per row; the backward
// writes the gradient once, in the logits' precision. Same values as casting the logits to fp32
// and calling cross_entropy (log-softmax in fp32), with far less memory traffic: for GPT-2
// (16k x 50k logits) it replaces two full-size casts, a fp32 log-softmax and its backward.
#pragma once

#include <ATen/ATen.h>

namespace dtrain::detail {

// Whether fused_cross_entropy handles these logits: a CUDA build, (N, V) CUDA logits in fp32,
// fp16 or bf16 with V >= 1024, int64 targets.
bool fused_cross_entropy_applies(const at::Tensor& logits, const at::Tensor& targets);
// Mean (or sum) over rows of -log softmax(logits)[target], or with `label_smoothing` e > 0
// PyTorch's cross_entropy(label_smoothing=e): -(1 - e) log p[target] - e mean_i log p[i];
// differentiable in `logits`. With
// `grad_in_logits` the backward writes the gradient over the logits' own memory instead of a new
// buffer (llm.c does the same): one (N, V) tensor less at the step's peak, 1.5 GiB for GPT-2 at
// B=16. Only for logits that nothing else reads after the forward (Model::loss_can_reuse_outputs).
at::Tensor fused_cross_entropy(const at::Tensor& logits, const at::Tensor& targets, bool mean,
                               bool grad_in_logits = false, double label_smoothing = 0.0);

}  // namespace dtrain::detail
