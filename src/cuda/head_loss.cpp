// CUDA build: the head and the cross-entropy in chunks of rows, their gradients computed in the
// forward (Note [fused head and loss] in fused_head.h).
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <string>

#include "cuda/check.h"
#include "cuda/dtype_code.h"
#include "cuda/fused_head.h"
#include "util/torch_compat.h"

namespace dtrain::cuda {
cudaError_t cross_entropy_loss_and_grad(int dtype, void* x, const int64_t* targets, int64_t rows,
                                        int64_t vocab, float scale, float smoothing, float* loss,
                                        int threads, cudaStream_t stream);
}  // namespace dtrain::cuda

namespace dtrain::detail {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The logits of one chunk, at most (about), and the threads a row of the loss kernel: the fastest
// of 256/512/1024 threads and 512 MB/1 GB chunks on GPT-2 (docs/PERFORMANCE.md, 2026-12-04).
constexpr int64_t kChunkBytes = int64_t{1} << 30;
constexpr int kLossThreads = 512;

// Rows per chunk: as many as fit kChunkBytes, spread evenly over the chunks, a multiple of 8.
int64_t chunk_rows(int64_t rows, int64_t row_bytes) {
  const int64_t fit = std::max<int64_t>(1, kChunkBytes / row_bytes);
  const int64_t chunks = (rows + fit - 1) / fit;
  const int64_t even = (rows + chunks - 1) / chunks;
  return std::min(rows, (even + 7) / 8 * 8);
}

cudaDataType_t cuda_type(at::ScalarType t) {
  return t == at::kHalf ? CUDA_R_16F : t == at::kBFloat16 ? CUDA_R_16BF : CUDA_R_32F;
}

// dw (V, C) fp32 += gᵀ · y for g (R, V) and y (R, C) row-major of one dtype: one cuBLAS GEMM with
// beta = 1 on the current stream. Column-major, dwᵀ (C, V) = yᵀ (C, R) · g (R, V), and a row-major
// (R, V) matrix is the column-major (V, R) one, so g enters transposed.
void add_weight_gradient(const at::Tensor& dw, const at::Tensor& g, const at::Tensor& y) {
  const int64_t r = g.size(0), v = g.size(1), c = y.size(1);
  const float one = 1.f;
  const cublasStatus_t rc = cublasGemmEx(
      at::cuda::getCurrentCUDABlasHandle(), CUBLAS_OP_N, CUBLAS_OP_T, static_cast<int>(c),
      static_cast<int>(v), static_cast<int>(r), &one, y.data_ptr(), cuda_type(y.scalar_type()),
      static_cast<int>(c), g.data_ptr(), cuda_type(g.scalar_type()), static_cast<int>(v), &one,
      dw.data_ptr(), CUDA_R_32F, static_cast<int>(c), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  if (rc != CUBLAS_STATUS_SUCCESS)
    throw Error(std::string("cuBLAS GEMM of the head's weight gradient failed: ") +
                    cublasGetStatusString(rc) + "; model.fused_head=false avoids it",
                "model.fused_head");
}

struct HeadLoss : public torch::autograd::Function<HeadLoss> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& y, const at::Tensor& w,
                            const at::Tensor& targets, int64_t rows_per_chunk, double smoothing) {
    const at::ScalarType dt = compat::autocast_enabled(c10::DeviceType::CUDA)
                                  ? compat::autocast_dtype(c10::DeviceType::CUDA)
                                  : w.scalar_type();
    const int64_t v = w.size(0), c = w.size(1);
    if (y.size(-1) != c || y.numel() / c != targets.numel() || y.device() != w.device())
      throw Error("the fused head needs y (..., " + std::to_string(c) +
                      ") on the weight's device "
                      "with one target per row",
                  "model.fused_head");
    const at::Tensor x = y.reshape({-1, c}).to(dt).contiguous();  // (rows, C)
    const at::Tensor wc = w.to(dt).contiguous();                  // (V, C)
    const at::Tensor t = targets.reshape({-1}).contiguous();
    const int64_t rows = x.size(0);
    const bool grad_y = y.requires_grad(), grad_w = w.requires_grad();
    at::Tensor loss = at::empty({rows}, x.options().dtype(at::kFloat));
    at::Tensor dy = grad_y ? at::empty_like(x) : at::Tensor();
    at::Tensor dw = grad_w ? at::zeros({v, c}, x.options().dtype(at::kFloat)) : at::Tensor();
    const int64_t chunk =
        rows_per_chunk > 0 ? rows_per_chunk : chunk_rows(rows, v * x.element_size());
    at::Tensor buffer = at::empty({std::max<int64_t>(chunk, 1), v}, x.options());
    const float scale = rows > 0 ? 1.f / static_cast<float>(rows) : 1.f;
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(x.device().index());
    for (int64_t begin = 0; begin < rows; begin += chunk) {
      const int64_t len = std::min(chunk, rows - begin);
      const at::Tensor xc = x.narrow(0, begin, len);
      at::Tensor logits = buffer.narrow(0, 0, len);
      at::mm_out(logits, xc, wc.t());
      // The logits become their own gradient: (softmax - the smoothed one-hot) / rows.
      DTRAIN_CUDA_CHECK(cuda::cross_entropy_loss_and_grad(
          dtype_code(dt), logits.data_ptr(), t.data_ptr<int64_t>() + begin, len, v, scale,
          static_cast<float>(smoothing), loss.data_ptr<float>() + begin, kLossThreads, stream));
      if (grad_y) {
        at::Tensor d = dy.narrow(0, begin, len);
        at::mm_out(d, logits, wc);
      }
      if (grad_w) add_weight_gradient(dw, logits, xc);
    }
    ctx->saved_data["dy"] = dy;
    ctx->saved_data["dw"] = dw;
    ctx->saved_data["y_shape"] = y.sizes().vec();
    ctx->saved_data["y_type"] = static_cast<int64_t>(y.scalar_type());
    ctx->saved_data["w_type"] = static_cast<int64_t>(w.scalar_type());
    return loss.mean();
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto& saved = ctx->saved_data;
    if (!saved.count("dy"))
      throw Error(
          "the fused head's backward ran twice; its gradients were computed once, in the "
          "forward (model.fused_head=false allows retain_graph)",
          "model.fused_head");
    // Moved out of the context, so the gradients handed to autograd are the only references.
    at::Tensor dy = saved["dy"].toTensor(), dw = saved["dw"].toTensor();
    const auto y_shape = saved["y_shape"].toIntVector();
    const auto y_type = static_cast<at::ScalarType>(saved["y_type"].toInt());
    const auto w_type = static_cast<at::ScalarType>(saved["w_type"].toInt());
    saved.clear();
    const at::Tensor g = grads[0].to(at::kFloat);  // 0-d, on the device
    if (dy.defined()) dy = dy.mul_(g).view(y_shape).to(y_type);
    if (dw.defined()) dw = dw.mul_(g).to(w_type);
    return {dy, dw, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

bool fused_head_loss_applies(const at::Tensor& w, const at::Tensor& targets) {
  const auto st = w.scalar_type();
  return w.is_cuda() && w.dim() == 2 && w.size(0) >= 1024 && w.size(1) % 8 == 0 &&
         (st == at::kFloat || st == at::kHalf || st == at::kBFloat16) &&
         targets.scalar_type() == at::kLong && targets.device() == w.device();
}

at::Tensor fused_head_loss(const at::Tensor& y, const at::Tensor& w, const at::Tensor& targets,
                           int64_t chunk_rows, double label_smoothing) {
  return HeadLoss::apply(y, w, targets, chunk_rows, label_smoothing);
}

}  // namespace dtrain::detail
