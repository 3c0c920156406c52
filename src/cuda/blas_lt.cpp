// CUDA build: the GEMM with a GELU epilogue through cuBLASLt (blas_lt.h). cuBLASLt is
// column-major: a row-major (R, C) tensor is the column-major (C, R) matrix, so h (N, M)
// row-major is D = Aᵀ · B with D column-major (M, N), B = x as (K, N), and A = w (M, K) row-major
// as the column-major (K, M) matrix.
#include "cuda/blas_lt.h"

#include <c10/cuda/CUDAStream.h>
#include <cublasLt.h>

#include <mutex>
#include <string>

#include "dtrain/error.h"

namespace dtrain::detail {
namespace {

constexpr size_t kWorkspaceBytes =
    32u << 20;  // the most a kernel may ask for (cuBLAS's advice for Hopper)

void check(cublasStatus_t rc, const char* what) {
  if (rc != CUBLAS_STATUS_SUCCESS)
    throw Error(std::string("cuBLASLt ") + what + " failed: " + cublasLtGetStatusName(rc) + " (" +
                    cublasLtGetStatusString(rc) + "); model.fused_mlp=false avoids it",
                "model.fused_mlp");
}

cublasLtHandle_t handle() {
  static cublasLtHandle_t h = nullptr;
  static std::once_flag once;
  std::call_once(once, [] { check(cublasLtCreate(&h), "handle creation"); });
  return h;
}

cudaDataType_t data_type(at::ScalarType t) { return t == at::kHalf ? CUDA_R_16F : CUDA_R_16BF; }

// Destroys cuBLASLt descriptors when the call returns or throws.
template <typename T, cublasStatus_t (*Destroy)(T)>
struct Owned {
  T value = nullptr;
  ~Owned() {
    if (value) Destroy(value);
  }
};

template <typename T>
void set(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const T& v) {
  check(cublasLtMatmulDescSetAttribute(desc, attr, &v, sizeof(v)), "descriptor attribute");
}

}  // namespace

bool gemm_gelu_fits(at::ScalarType dtype, int64_t k, int64_t m) {
  // 16-byte aligned rows for every operand and the epilogue's leading dimension a multiple of 8.
  return (dtype == at::kHalf || dtype == at::kBFloat16) && k % 8 == 0 && m % 8 == 0;
}

void gemm_gelu_aux_bias(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias,
                        const at::Tensor& h, const at::Tensor& pre) {
  const int64_t n = x.size(0), k = x.size(1), m = h.size(1);
  const cudaDataType_t type = data_type(x.scalar_type());

  Owned<cublasLtMatmulDesc_t, cublasLtMatmulDescDestroy> op;
  check(cublasLtMatmulDescCreate(&op.value, CUBLAS_COMPUTE_32F, CUDA_R_32F), "descriptor");
  set(op.value, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
  set(op.value, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
  set(op.value, CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_GELU_AUX_BIAS);
  set(op.value, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias.data_ptr());
  set(op.value, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, pre.data_ptr());
  set(op.value, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, static_cast<int64_t>(m));

  Owned<cublasLtMatrixLayout_t, cublasLtMatrixLayoutDestroy> a, b, d;
  check(cublasLtMatrixLayoutCreate(&a.value, type, k, m, k), "layout");
  check(cublasLtMatrixLayoutCreate(&b.value, type, k, n, k), "layout");
  check(cublasLtMatrixLayoutCreate(&d.value, type, m, n, m), "layout");

  Owned<cublasLtMatmulPreference_t, cublasLtMatmulPreferenceDestroy> pref;
  check(cublasLtMatmulPreferenceCreate(&pref.value), "preference");
  const uint64_t workspace_bytes = kWorkspaceBytes;
  check(cublasLtMatmulPreferenceSetAttribute(pref.value, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                             &workspace_bytes, sizeof(workspace_bytes)),
        "preference attribute");
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  check(cublasLtMatmulAlgoGetHeuristic(handle(), op.value, a.value, b.value, d.value, d.value,
                                       pref.value, 1, &result, &found),
        "heuristic");
  if (found == 0) check(CUBLAS_STATUS_NOT_SUPPORTED, "heuristic (no kernel for this GEMM)");

  // Only the workspace the chosen kernel asks for (often none): it would count in the step's peak.
  const at::Tensor workspace =
      at::empty({static_cast<int64_t>(result.workspaceSize)}, x.options().dtype(at::kByte));
  const float alpha = 1.f, beta = 0.f;
  check(cublasLtMatmul(handle(), op.value, &alpha, w.data_ptr(), a.value, x.data_ptr(), b.value,
                       &beta, h.data_ptr(), d.value, h.data_ptr(), d.value, &result.algo,
                       result.workspaceSize > 0 ? workspace.data_ptr() : nullptr,
                       result.workspaceSize, c10::cuda::getCurrentCUDAStream(x.device().index())),
        "matmul");
}

}  // namespace dtrain::detail
