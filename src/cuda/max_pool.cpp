// CUDA build: the autograd wrapper of the max-pool kernels (max_pool.cu, Note [max-pool kernels]
// in max_pool.h).
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/autograd/custom_function.h>

#include "cuda/check.h"
#include "cuda/dtype_code.h"
#include "cuda/max_pool.h"
#include "cuda/max_pool_args.h"
#include "dtrain/error.h"

namespace dtrain::detail {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

cudaStream_t stream_of(const at::Tensor& t) {
  return c10::cuda::getCurrentCUDAStream(t.device().index());
}

int out_size(int64_t in, int kernel, int stride, int padding) {
  return static_cast<int>((in + 2 * padding - kernel) / stride + 1);
}

cuda::MaxPoolArgs args(const at::Tensor& x, int kernel, int stride, int padding) {
  cuda::MaxPoolArgs a;
  a.dtype = dtype_code(x.scalar_type());
  a.n = x.size(0);
  a.c = static_cast<int>(x.size(1));
  a.h = static_cast<int>(x.size(2));
  a.w = static_cast<int>(x.size(3));
  a.out_h = out_size(a.h, kernel, stride, padding);
  a.out_w = out_size(a.w, kernel, stride, padding);
  a.kernel = kernel;
  a.stride = stride;
  a.padding = padding;
  return a;
}

struct MaxPool : public torch::autograd::Function<MaxPool> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t kernel,
                            int64_t stride, int64_t padding) {
    const cuda::MaxPoolArgs a =
        args(x, static_cast<int>(kernel), static_cast<int>(stride), static_cast<int>(padding));
    const auto cl = at::MemoryFormat::ChannelsLast;
    at::Tensor out = at::empty({a.n, a.c, a.out_h, a.out_w}, x.options().memory_format(cl));
    at::Tensor where =
        at::empty({a.n, a.c, a.out_h, a.out_w}, x.options().dtype(at::kByte).memory_format(cl));
    DTRAIN_CUDA_CHECK(cuda::max_pool_forward(a, x.data_ptr(), out.data_ptr(),
                                             where.data_ptr<uint8_t>(), stream_of(x)));
    ctx->save_for_backward({where});
    ctx->saved_data["x_sizes"] = x.sizes();
    ctx->saved_data["kernel"] = kernel;
    ctx->saved_data["stride"] = stride;
    ctx->saved_data["padding"] = padding;
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor where = ctx->get_saved_variables()[0];
    const auto cl = at::MemoryFormat::ChannelsLast;
    const std::vector<int64_t> sizes = ctx->saved_data["x_sizes"].toIntVector();
    const at::Tensor dout = grads[0].contiguous(cl);
    at::Tensor dx = at::empty(sizes, dout.options().memory_format(cl));
    const cuda::MaxPoolArgs a = args(dx, static_cast<int>(ctx->saved_data["kernel"].toInt()),
                                     static_cast<int>(ctx->saved_data["stride"].toInt()),
                                     static_cast<int>(ctx->saved_data["padding"].toInt()));
    DTRAIN_CUDA_CHECK(cuda::max_pool_backward(a, dout.data_ptr(), where.data_ptr<uint8_t>(),
                                              dx.data_ptr(), stream_of(dx)));
    return {dx, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

bool max_pool_applies(const at::Tensor& x, int kernel, int stride, int padding) {
  if (!x.defined() || !x.is_cuda() || x.dim() != 4 ||
      !x.is_contiguous(at::MemoryFormat::ChannelsLast))
    return false;
  const auto t = x.scalar_type();
  if (t != at::kFloat && t != at::kHalf && t != at::kBFloat16) return false;
  if (kernel < 1 || kernel > 15 || stride < 1 || padding < 0 || padding > kernel / 2) return false;
  if (x.size(1) < 1 || x.size(1) > (1 << 20)) return false;
  return x.size(0) > 0 && out_size(x.size(2), kernel, stride, padding) >= 1 &&
         out_size(x.size(3), kernel, stride, padding) >= 1;
}

at::Tensor max_pool(const at::Tensor& x, int kernel, int stride, int padding) {
  if (!max_pool_applies(x, kernel, stride, padding))
    throw Error("the max-pool kernels do not take these tensors (max_pool_applies)");
  return MaxPool::apply(x, kernel, stride, padding);
}

}  // namespace dtrain::detail
