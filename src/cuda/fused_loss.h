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
// Mean (or sum) over rows of -log softmax(logits)[target]; differentiable in `logits`.
at::Tensor fused_cross_entropy(const at::Tensor& logits, const at::Tensor& targets, bool mean);

}  // namespace dtrain::detail
