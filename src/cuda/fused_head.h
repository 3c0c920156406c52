// Note [fused head and loss]: a language model's head and its cross-entropy over (B*T, V) logits
// (GPT-2: 16k rows of 50k, 1.65 GB in bf16 at B=16) held the largest tensor of the training step,
// and the loss passed over it three times (the forward's log-sum-exp, the backward's read and
// write). dtrain's GPT computes them per chunk of rows instead, with the gradients on the way, as
// llm.c and Liger-Kernel do; for each chunk, in the forward:
//   logits = y_c · wᵀ                                    (one GEMM into a reused chunk buffer)
//   loss_r, logits <- (softmax(logits) - onehot) / rows  (one kernel: cross_entropy.cu)
//   dy_c = logits · w;  dw += logitsᵀ · y_c              (two GEMMs; dw accumulated in fp32)
// The backward only scales dy and dw by the incoming gradient of the loss, read on the device (a
// CUDA graph captures it). The chunk buffer (about 1 GB) replaces the whole logits at the step's
// peak. Used for training steps only (Model::forward_cross_entropy); evaluation and anything that
// needs the logits calls forward. model.fused_head=false computes the whole logits and then the
// loss (cuda/fused_loss.h). On GPT-2 at B=16 both run at the same rate and the chunks save 0.7
// GiB of peak memory (7.8 against 8.5 GiB; docs/PERFORMANCE.md, 2026-12-05).
// tests/gpu/test_head_loss.cpp checks the loss and both gradients against at::linear and
// cross_entropy, for each dtype.
#pragma once

#include <ATen/ATen.h>

namespace dtrain::detail {

// Whether fused_head_loss handles this head weight and these targets: a CUDA build; w (V, C) on
// CUDA in fp32, fp16 or bf16 with V >= 1024 and C a multiple of 8; int64 targets on w's device.
bool fused_head_loss_applies(const at::Tensor& w, const at::Tensor& targets);
// The mean over rows of cross_entropy(y · wᵀ, targets), y (..., C) and targets (...) of the same
// leading shape; the logits in CUDA autocast's dtype while it is on (else w's), the loss in fp32.
// Differentiable in y and w. `chunk_rows`: rows per chunk, 0 = as many as fit about 1 GB of
// logits (tests ask for small chunks). `label_smoothing`: as cuda/fused_loss.h's.
at::Tensor fused_head_loss(const at::Tensor& y, const at::Tensor& w, const at::Tensor& targets,
                           int64_t chunk_rows = 0, double label_smoothing = 0.0);

}  // namespace dtrain::detail
