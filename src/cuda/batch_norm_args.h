// What the fused BatchNorm kernels (cuda/batch_norm.cu) take: plain pointers and sizes, shared by
// the kernels and their autograd wrapper (cuda/batch_norm.cpp). Activations are rows of c
// channels in x's dtype (0 fp32, 1 fp16, 2 bf16: cuda/dtype_code.h); per-channel vectors fp32.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace dtrain::cuda {

// Where the backward finds the ReLU's zeros: nowhere (no ReLU), in y, in the forward's bits, or
// recomputed from x, scale and shift (only without a shortcut).
enum BnMask { kMaskNone = 0, kMaskFromY = 1, kMaskFromBits = 2, kMaskFromX = 3 };

struct BnForwardArgs {
  int dtype = 0;
  const void* x = nullptr;
  const void* residual = nullptr;  // optional
  void* y = nullptr;
  int64_t rows = 0;
  int c = 0;
  const float* weight = nullptr;
  const float* bias = nullptr;
  float* running_mean = nullptr;  // updated in training; read in eval
  float* running_var = nullptr;
  int64_t* batches = nullptr;  // num_batches_tracked, + 1 in training
  float momentum = 0.1f;
  float eps = 1e-5f;
  bool training = true;
  bool relu = false;
  float* mean = nullptr;         // out (c): the mean used
  float* invstd = nullptr;       // out (c): 1 / sqrt(var + eps)
  float* scale = nullptr;        // out (c): weight * invstd
  float* shift = nullptr;        // out (c): bias - mean * scale
  float* part = nullptr;         // training: batch_norm_partial_rows(sms) * 2 * c floats
  unsigned* counters = nullptr;  // kBatchNormCounters zeros, left zero
  int sms = 1;                   // the device's multiprocessors
  // Optional out (needs batch_norm_mask_channels(args) = k > 0): rows * c / k bytes, bit i of
  // byte (row, j) set where y's channel j * k + i is above 0.
  uint8_t* bits = nullptr;
  // SyncBatchNorm (training): the statistics' pass writes this rank's [mean (c), sum of squared
  // deviations (c), rows] here and stops (batch_norm_forward); batch_norm_forward_finish merges
  // `gathered` (world rows of 2c + 1 such values, in rank order), writes the rows over every rank
  // to `count`, and applies.
  double* local = nullptr;
  const double* gathered = nullptr;
  int world = 0;
  double* count = nullptr;
};

struct BnBackwardArgs {
  int dtype = 0;
  const void* dy = nullptr;
  const void* dy2 = nullptr;  // optional: a second use's gradient, added to dy
  const void* y = nullptr;    // the forward's output: its zeros mask dy under ReLU
  const void* x = nullptr;
  void* g = nullptr;  // optional out: dy [+ dy2] after the ReLU mask (the shortcut's gradient)
  void* dx = nullptr;
  int64_t rows = 0;
  int c = 0;
  const float* weight = nullptr;
  const float* mean = nullptr;  // the forward's mean and invstd
  const float* invstd = nullptr;
  const float* scale = nullptr;  // the forward's scale and shift (kMaskFromX)
  const float* shift = nullptr;
  const uint8_t* bits = nullptr;  // the forward's bits (kMaskFromBits)
  bool training = true;           // false: the statistics were constants (eval)
  bool relu = false;
  int mask = kMaskFromY;     // BnMask, under ReLU
  float* dweight = nullptr;  // out (c)
  float* dbias = nullptr;    // out (c)
  float* k1 = nullptr;       // scratch (c) each
  float* kx = nullptr;
  float* kb = nullptr;
  float* part = nullptr;  // batch_norm_partial_rows(sms) * 2 * c floats
  unsigned* counters = nullptr;
  int sms = 1;
  // SyncBatchNorm: the reduction writes dweight, dbias (this rank's) and this rank's [sum g (c),
  // sum g (x - mean) (c)] here and stops (batch_norm_backward); once they are summed over the
  // ranks, batch_norm_backward_finish takes the coefficients of dx from them and `count` (the
  // forward's rows over every rank) and writes dx.
  double* local = nullptr;
  const double* count = nullptr;
};

// Ticket counters the kernels need (one per column tile: enough for C <= 16384).
constexpr int kBatchNormCounters = 4096;

// The most blocks a reduction splits the rows into (its partials' rows).
int batch_norm_partial_rows(int sms);
// The channels one byte of BnForwardArgs::bits covers for these tensors (4 fp32, 8 fp16/bf16), or
// 0 where the forward cannot write bits (C not a multiple, or pointers not 16-byte aligned).
int batch_norm_mask_channels(const BnForwardArgs& a);
// With `local` set (SyncBatchNorm, training) each runs its reduction alone; the _finish call
// after the exchange runs the rest.
cudaError_t batch_norm_forward(const BnForwardArgs& a, cudaStream_t stream);
cudaError_t batch_norm_forward_finish(const BnForwardArgs& a, cudaStream_t stream);
cudaError_t batch_norm_backward(const BnBackwardArgs& a, cudaStream_t stream);
cudaError_t batch_norm_backward_finish(const BnBackwardArgs& a, cudaStream_t stream);

}  // namespace dtrain::cuda
