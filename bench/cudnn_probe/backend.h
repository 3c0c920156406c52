// cuDNN's backend (graph) API as bench/cudnn_probe/probe.cpp uses it: tensors, convolution,
// pointwise, GenStats and reduction operations, the heuristics' plans, variant packs, timing, and
// host copies in fp32, fp16 and bf16. Header-only for the probe's one translation unit.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace probe {

void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}
#define CU(x) cuda_check((x), #x)

// A backend call's status, kept: an unsupported graph is an answer, not an error.
struct Status {
  cudnnStatus_t s = CUDNN_STATUS_SUCCESS;
  std::string where;
  bool ok() const { return s == CUDNN_STATUS_SUCCESS; }
};
Status& last() {
  static Status st;
  return st;
}
bool ok(cudnnStatus_t s, const char* where) {
  if (s != CUDNN_STATUS_SUCCESS && last().ok()) last() = {s, where};
  return s == CUDNN_STATUS_SUCCESS;
}

using Desc = std::shared_ptr<void>;
Desc make(cudnnBackendDescriptorType_t t) {
  cudnnBackendDescriptor_t d = nullptr;
  ok(cudnnBackendCreateDescriptor(t, &d), "create");
  return Desc(d, [](void* p) {
    if (p != nullptr) cudnnBackendDestroyDescriptor(p);
  });
}
template <class T>
void set(const Desc& d, cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t, int64_t n,
         const T* v) {
  ok(cudnnBackendSetAttribute(d.get(), a, t, n, v), "set attribute");
}
void set_desc(const Desc& d, cudnnBackendAttributeName_t a, const Desc& v) {
  void* p = v.get();
  set(d, a, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &p);
}
struct Tensor;
void set_desc(const Desc& d, cudnnBackendAttributeName_t a, const std::shared_ptr<Tensor>& t);
bool finalize(const Desc& d, const char* where) { return ok(cudnnBackendFinalize(d.get()), where); }

// A tensor of the graph: its cuDNN descriptor, and (when not virtual) its device buffer.
struct Tensor {
  int64_t uid = 0;
  std::vector<int64_t> dims;  // N, C, H, W
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  bool is_virtual = false;
  Desc desc;
  void* data = nullptr;
  int64_t count() const {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    return n;
  }
  size_t bytes() const { return count() * (type == CUDNN_DATA_FLOAT ? 4 : 2); }
};
using TensorP = std::shared_ptr<Tensor>;
void set_desc(const Desc& d, cudnnBackendAttributeName_t a, const TensorP& t) {
  set_desc(d, a, t->desc);
}

// NHWC strides of an N, C, H, W tensor.
std::vector<int64_t> nhwc(const std::vector<int64_t>& d) {
  return {d[1] * d[2] * d[3], 1, d[3] * d[1], d[1]};
}

struct Graph {
  std::vector<Desc> ops;
  std::vector<TensorP> tensors;
  int64_t next_uid = 1;

  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  ~Graph() {
    for (const TensorP& t : tensors)
      if (t->data != nullptr) cudaFree(t->data);
  }

  TensorP tensor(std::vector<int64_t> dims, cudnnDataType_t type, bool is_virtual = false) {
    auto t = std::make_shared<Tensor>();
    t->uid = next_uid++;
    t->dims = dims;
    t->type = type;
    t->is_virtual = is_virtual;
    t->desc = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    const std::vector<int64_t> strides = nhwc(dims);
    const int64_t align = 16;
    set(t->desc, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
    set(t->desc, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data());
    set(t->desc, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data());
    set(t->desc, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &t->uid);
    set(t->desc, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
    set(t->desc, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual);
    finalize(t->desc, "tensor");
    if (!is_virtual) CU(cudaMalloc(&t->data, t->bytes()));
    tensors.push_back(t);
    return t;
  }

  Desc conv_desc(int64_t stride, int64_t pad) {
    Desc c = make(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
    const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    const int64_t dims = 2, one[2] = {1, 1}, s[2] = {stride, stride}, p[2] = {pad, pad};
    set(c, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
    set(c, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
    set(c, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &dims);
    set(c, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, one);
    set(c, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, s);
    set(c, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, p);
    set(c, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, p);
    finalize(c, "convolution");
    return c;
  }

  // kind: 0 forward (a = x, b = w, c = y), 1 data gradient (a = dy, b = w, c = dx),
  // 2 filter gradient (a = x, b = dy, c = dw).
  void conv(int kind, const TensorP& a, const TensorP& b, const TensorP& c, const Desc& cd) {
    static const cudnnBackendDescriptorType_t types[3] = {
        CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
        CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
        CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR};
    static const cudnnBackendAttributeName_t attrs[3][5] = {
        {CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA},
        {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA},
        {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA}};
    static const cudnnBackendAttributeName_t betas[3] = {
        CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA,
        CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA,
        CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA};
    Desc op = make(types[kind]);
    set_desc(op, attrs[kind][0], a);
    set_desc(op, attrs[kind][1], b);
    set_desc(op, attrs[kind][2], c);
    set_desc(op, attrs[kind][3], cd);
    const float alpha = 1, beta = 0;
    set(op, attrs[kind][4], CUDNN_TYPE_FLOAT, 1, &alpha);
    set(op, betas[kind], CUDNN_TYPE_FLOAT, 1, &beta);
    if (finalize(op, "convolution op")) ops.push_back(op);
  }

  // y = mode(x[, b]); for RELU_BWD: dx = relu_bwd(dy = x, x = b) (y is dx).
  void pointwise(cudnnPointwiseMode_t mode, const TensorP& x, const TensorP& b, const TensorP& y) {
    Desc pw = make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    const cudnnDataType_t prec = CUDNN_DATA_FLOAT;
    set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
    finalize(pw, "pointwise");
    Desc op = make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw);
    if (mode == CUDNN_POINTWISE_RELU_BWD) {
      set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_DYDESC, x);
      set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, b);
      set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_DXDESC, y);
    } else {
      set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x);
      if (b) set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b);
      set_desc(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y);
    }
    if (finalize(op, "pointwise op")) ops.push_back(op);
  }

  void genstats(const TensorP& x, const TensorP& sum, const TensorP& sq) {
    Desc op = make(CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR);
    const cudnnGenStatsMode_t mode = CUDNN_GENSTATS_SUM_SQSUM;
    const cudnnDataType_t prec = CUDNN_DATA_FLOAT;
    set(op, CUDNN_ATTR_OPERATION_GENSTATS_MODE, CUDNN_TYPE_GENSTATS_MODE, 1, &mode);
    set(op, CUDNN_ATTR_OPERATION_GENSTATS_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
    set_desc(op, CUDNN_ATTR_OPERATION_GENSTATS_XDESC, x->desc);
    set_desc(op, CUDNN_ATTR_OPERATION_GENSTATS_SUMDESC, sum);
    set_desc(op, CUDNN_ATTR_OPERATION_GENSTATS_SQSUMDESC, sq->desc);
    if (finalize(op, "genstats op")) ops.push_back(op);
  }

  void reduce_sum(const TensorP& x, const TensorP& y) {
    Desc r = make(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    const cudnnReduceTensorOp_t op_type = CUDNN_REDUCE_TENSOR_ADD;
    const cudnnDataType_t prec = CUDNN_DATA_FLOAT;
    set(r, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &op_type);
    set(r, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &prec);
    finalize(r, "reduction");
    Desc op = make(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    set_desc(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x->desc);
    set_desc(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y->desc);
    set_desc(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, r);
    if (finalize(op, "reduction op")) ops.push_back(op);
  }
};

// An execution plan cuDNN accepted for a graph, and what it is.
struct Plan {
  Desc plan;
  int64_t engine = -1, workspace = 0;
  std::string notes;
  double build_ms = 0;
};

std::string engine_notes(const Desc& cfg, int64_t& index) {
  Desc engine = make(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  void* e = engine.get();
  int64_t n = 0;
  std::string out;
  if (cudnnBackendGetAttribute(cfg.get(), CUDNN_ATTR_ENGINECFG_ENGINE,
                               CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &e) != CUDNN_STATUS_SUCCESS)
    return "?";
  cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &index);
  cudnnBackendBehaviorNote_t behavior[16];
  if (cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE, 16, &n,
                               behavior) == CUDNN_STATUS_SUCCESS)
    for (int64_t i = 0; i < n; ++i)
      if (behavior[i] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION) out += "runtime-compiled ";
  cudnnBackendNumericalNote_t numeric[16];
  if (cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE, 16,
                               &n, numeric) == CUDNN_STATUS_SUCCESS)
    for (int64_t i = 0; i < n; ++i) {
      if (numeric[i] == CUDNN_NUMERICAL_NOTE_TENSOR_CORE) out += "tensor-core ";
      if (numeric[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) out += "nondeterministic ";
      if (numeric[i] == CUDNN_NUMERICAL_NOTE_WINOGRAD) out += "winograd ";
      if (numeric[i] == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS) out += "down-convert ";
    }
  return out;
}

// Up to `max` plans for the graph, those cuDNN finalizes: heuristics mode A's configurations in
// its order, the fallback list's where mode A gave none; with `every_mode`, mode A's, mode B's and
// the fallback list's one after the other (a configuration two lists share is timed twice).
std::vector<Plan> plans(cudnnHandle_t handle, const Graph& g, int max, bool every_mode = false) {
  std::vector<Plan> out;
  if (!last().ok()) return out;
  Desc og = make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  std::vector<void*> ops;
  for (const Desc& op : g.ops) ops.push_back(op.get());
  set(og, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, (int64_t)ops.size(),
      ops.data());
  set(og, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
  if (!finalize(og, "operation graph")) return out;
  std::vector<cudnnBackendHeurMode_t> modes = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
  if (every_mode) modes = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_B, CUDNN_HEUR_MODE_FALLBACK};
  for (cudnnBackendHeurMode_t mode : modes) {
    Desc heur = make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    set_desc(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, og);
    set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    if (cudnnBackendFinalize(heur.get()) != CUDNN_STATUS_SUCCESS) continue;
    int64_t n = 0;
    cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                             CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &n, nullptr);
    std::vector<Desc> cfgs;
    std::vector<void*> raw;
    for (int64_t i = 0; i < n; ++i) {
      cfgs.push_back(make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
      raw.push_back(cfgs.back().get());
    }
    int64_t got = 0;
    if (n > 0 && cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                          CUDNN_TYPE_BACKEND_DESCRIPTOR, n, &got,
                                          raw.data()) != CUDNN_STATUS_SUCCESS)
      got = 0;
    for (int64_t i = 0; i < got && (int)out.size() < max; ++i) {
      Plan p;
      p.plan = make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      set(p.plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
      set_desc(p.plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfgs[i]);
      const auto t0 = std::chrono::steady_clock::now();
      if (cudnnBackendFinalize(p.plan.get()) != CUDNN_STATUS_SUCCESS) continue;
      p.build_ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      int64_t k = 0;
      cudnnBackendGetAttribute(p.plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                               CUDNN_TYPE_INT64, 1, &k, &p.workspace);
      p.notes = engine_notes(cfgs[i], p.engine);
      out.push_back(p);
    }
    if (!out.empty() && !every_mode) break;
  }
  return out;
}

// The graph's non-virtual tensors' buffers (with `swap` replacing some uids' pointers).
Desc variant_pack(const Graph& g, void* workspace, const std::map<int64_t, void*>& swap = {}) {
  std::vector<int64_t> uids;
  std::vector<void*> ptrs;
  for (const TensorP& t : g.tensors)
    if (!t->is_virtual) {
      uids.push_back(t->uid);
      ptrs.push_back(swap.count(t->uid) ? swap.at(t->uid) : t->data);
    }
  Desc vp = make(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  set(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, (int64_t)uids.size(), uids.data());
  set(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, (int64_t)ptrs.size(),
      ptrs.data());
  set(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
  finalize(vp, "variant pack");
  return vp;
}

void* workspace(int64_t bytes) {
  static void* p = nullptr;
  static int64_t have = 0;
  if (bytes > have) {
    if (p != nullptr) CU(cudaFree(p));
    CU(cudaMalloc(&p, bytes));
    have = bytes;
  }
  return p;
}

// Median milliseconds of one execution (20 runs after 3); negative when execution fails.
double time_plan(cudnnHandle_t handle, const Plan& p, const Desc& vp) {
  for (int i = 0; i < 3; ++i)
    if (cudnnBackendExecute(handle, p.plan.get(), vp.get()) != CUDNN_STATUS_SUCCESS) return -1;
  CU(cudaDeviceSynchronize());
  std::vector<float> ms;
  cudaEvent_t a, b;
  CU(cudaEventCreate(&a));
  CU(cudaEventCreate(&b));
  for (int i = 0; i < 20; ++i) {
    CU(cudaEventRecord(a, 0));
    cudnnBackendExecute(handle, p.plan.get(), vp.get());
    CU(cudaEventRecord(b, 0));
    CU(cudaEventSynchronize(b));
    float t = 0;
    CU(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  CU(cudaEventDestroy(a));
  CU(cudaEventDestroy(b));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// Host values <-> device buffers in the tensor's type.
float to_float(cudnnDataType_t t, const void* p, int64_t i) {
  if (t == CUDNN_DATA_FLOAT) return static_cast<const float*>(p)[i];
  if (t == CUDNN_DATA_HALF) return __half2float(static_cast<const __half*>(p)[i]);
  return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
}
void upload(const TensorP& t, const std::vector<float>& v, void* dst = nullptr) {
  std::vector<char> raw(t->bytes());
  for (int64_t i = 0; i < t->count(); ++i) {
    if (t->type == CUDNN_DATA_FLOAT) reinterpret_cast<float*>(raw.data())[i] = v[i];
    if (t->type == CUDNN_DATA_HALF) reinterpret_cast<__half*>(raw.data())[i] = __float2half(v[i]);
    if (t->type == CUDNN_DATA_BFLOAT16)
      reinterpret_cast<__nv_bfloat16*>(raw.data())[i] = __float2bfloat16(v[i]);
  }
  CU(cudaMemcpy(dst != nullptr ? dst : t->data, raw.data(), raw.size(), cudaMemcpyHostToDevice));
}
std::vector<float> download(const TensorP& t, const void* src = nullptr) {
  std::vector<char> raw(t->bytes());
  CU(cudaMemcpy(raw.data(), src != nullptr ? src : t->data, raw.size(), cudaMemcpyDeviceToHost));
  std::vector<float> v(t->count());
  for (int64_t i = 0; i < t->count(); ++i) v[i] = to_float(t->type, raw.data(), i);
  return v;
}
// v rounded to type t (as an upload and download would).
std::vector<float> rounded(cudnnDataType_t t, std::vector<float> v) {
  for (float& x : v) {
    if (t == CUDNN_DATA_HALF) x = __half2float(__float2half(x));
    if (t == CUDNN_DATA_BFLOAT16) x = __bfloat162float(__float2bfloat16(x));
  }
  return v;
}

}  // namespace probe
