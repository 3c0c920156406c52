// Which of cuDNN's fused convolution graphs run on this GPU, and what they cost: the measurement
// before dtrain fuses BatchNorm into ResNet's convolutions (issue 53). For ResNet-50 convolutions
// at batch 128 (NHWC, bf16 and fp16) it builds each graph below with cuDNN's backend API
// (backend.h), asks the heuristics (mode A, then the fallback list) for engine configurations,
// finalizes up to MAXPLANS (default 2) that cuDNN accepts, and times each (median of 20 runs after
// 3, CUDA events). It checks the fused results against the plain convolution's: statistics summed
// on the host in double, the prologue applied on the host and its result convolved by the plain
// plan.
//
//   conv        y = conv(x, w)                                       (the baseline)
//   stats       conv, its output's per-channel sum and sum of squares (GenStats epilogue)
//   sum         conv, its output's per-channel sum (one reduction epilogue)
//   pro         y = conv(relu(x * s + b), w)                         (BatchNorm apply as prologue)
//   pro_stats   pro with the GenStats epilogue                       (NVIDIA's ConvBNfprop)
//   dgrad       dx = conv_bwd_data(dy, w)
//   dgrad_pro   dx = conv_bwd_data(dy * s + t * u, w), t of dy's shape (BatchNorm's dx as prologue)
//   dgrad_relu  g = relu_bwd(conv_bwd_data(dy, w), a), and g's per-channel sum (epilogue)
//   wgrad       dw = conv_bwd_filter(x, dy)
//   wgrad_pro   dw = conv_bwd_filter(relu(x * s + b), dy)            (NVIDIA's ConvBNwgrad)
//
// One line per (shape, dtype, graph): cuDNN's answer (the status where it refused), the engine's
// global index and notes, the plan's build time, the run time and its ratio to the plain
// operation's, and the check's largest error relative to the reference's largest magnitude.
// Environment: DEADLINE (seconds; no new graph after it, default 240), MAXPLANS, HEUR (all: the
// plans of heuristics modes A and B and the fallback list, not mode A's alone), SHAPES (names),
// DTYPES (default "bf16,fp16"). On an H100 with cuDNN 9.19 the bf16 half took about 100 s (the
// runtime-compiled engines' builds); docs/PERFORMANCE.md has its table.
#include "backend.h"

using namespace probe;

namespace {

struct Shape {
  const char* name;
  int64_t n, c, h, w, k, r, stride;
  int64_t p() const { return (h + 2 * (r / 2) - r) / stride + 1; }
  int64_t q() const { return (w + 2 * (r / 2) - r) / stride + 1; }
};

std::vector<float> random(int64_t n, float lo, float hi, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(gen);
  return v;
}

// Largest |a - b| over the largest |b|.
double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  double e = 0, m = 1e-30;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    e = std::max(e, (double)std::fabs(a[i] - b[i]));
    m = std::max(m, (double)std::fabs(b[i]));
  }
  return e / m;
}
// Per-channel sums (and sums of squares) of an NHWC buffer with c channels, in double.
std::vector<float> channel_sums(const std::vector<float>& v, int64_t c, bool squares) {
  std::vector<double> s(c, 0);
  for (size_t i = 0; i < v.size(); ++i) s[i % c] += squares ? (double)v[i] * v[i] : v[i];
  return std::vector<float>(s.begin(), s.end());
}

// The host inputs of one shape (values in the io type once rounded).
struct Inputs {
  std::vector<float> x, w, dy, a, sc, bc, sk, t, uk;
};

// relu(x * s + b) per channel c, rounded to the io type as the prologue's consumer reads it.
std::vector<float> bn_apply(cudnnDataType_t type, const Inputs& in, int64_t c) {
  std::vector<float> a(in.x.size());
  for (size_t i = 0; i < a.size(); ++i) a[i] = std::max(0.f, in.x[i] * in.sc[i % c] + in.bc[i % c]);
  return rounded(type, a);
}

struct Result {
  std::string status;  // "ok" or cuDNN's refusal
  Plan best;
  double ms = -1, err = -1, err2 = -1;
  int candidates = 0;
};

class Probe {
 public:
  Probe(cudnnHandle_t h, const Shape& s, cudnnDataType_t type, int max_plans, bool every_mode)
      : h_(h), s_(s), type_(type), max_(max_plans), every_mode_(every_mode) {
    const int64_t nx = s.n * s.c * s.h * s.w, nw = s.k * s.c * s.r * s.r,
                  ny = s.n * s.k * s.p() * s.q();
    in_.x = rounded(type, random(nx, -1, 1, 1));
    in_.w = rounded(type, random(nw, -0.1f, 0.1f, 2));
    in_.dy = rounded(type, random(ny, -1, 1, 3));
    in_.a = rounded(type, random(nx, -1, 1, 4));
    in_.sc = rounded(type, random(s.c, 0.5f, 1.5f, 5));
    in_.bc = rounded(type, random(s.c, -0.5f, 0.5f, 6));
    in_.sk = rounded(type, random(s.k, 0.5f, 1.5f, 7));
    in_.t = rounded(type, random(ny, -1, 1, 8));
    in_.uk = rounded(type, random(s.k, -0.5f, 0.5f, 9));
  }

  std::vector<int64_t> xd() const { return {s_.n, s_.c, s_.h, s_.w}; }
  std::vector<int64_t> wd() const { return {s_.k, s_.c, s_.r, s_.r}; }
  std::vector<int64_t> yd() const { return {s_.n, s_.k, s_.p(), s_.q()}; }
  std::vector<int64_t> cd() const { return {1, s_.c, 1, 1}; }
  std::vector<int64_t> kd() const { return {1, s_.k, 1, 1}; }

  // Builds, plans, fills and times one graph; `check` compares its outputs.
  Result run(Graph& g, const std::function<void(Result&)>& check) {
    Result r;
    const std::vector<Plan> ps = plans(h_, g, max_, every_mode_);
    r.candidates = (int)ps.size();
    if (ps.empty()) {
      r.status = last().ok() ? "no engine"
                             : std::string(cudnnGetErrorString(last().s)) + " at " + last().where;
      last() = {};
      return r;
    }
    for (const Plan& p : ps) {
      const Desc vp = variant_pack(g, workspace(p.workspace));
      const double ms = time_plan(h_, p, vp);
      if (ms >= 0 && (r.ms < 0 || ms < r.ms)) r.ms = ms, r.best = p;
    }
    if (r.ms < 0) {
      r.status = "execute failed";
      last() = {};
      return r;
    }
    // The outputs of the fastest plan, for the check.
    const Desc vp = variant_pack(g, workspace(r.best.workspace));
    ok(cudnnBackendExecute(h_, r.best.plan.get(), vp.get()), "execute");
    CU(cudaDeviceSynchronize());
    r.status = last().ok() ? "ok" : "execute failed";
    last() = {};
    if (r.status == "ok") check(r);
    return r;
  }

  // Runs a kept plain plan with some tensors' buffers replaced.
  void rerun(const Graph& g, const Plan& p, const std::map<int64_t, void*>& swap) {
    const Desc vp = variant_pack(g, workspace(p.workspace), swap);
    ok(cudnnBackendExecute(h_, p.plan.get(), vp.get()), "execute");
    CU(cudaDeviceSynchronize());
  }

  void print(const char* name, const Result& r, double base_ms) {
    if (r.status != "ok") {
      std::printf("%-8s %-5s %-11s NOT SUPPORTED (%s)\n", s_.name, dtype(), name, r.status.c_str());
    } else {
      std::printf(
          "%-8s %-5s %-11s engine %3lld  %7.3f ms (x%.2f of plain)  build %7.0f ms  "
          "err %.1e%s  [%s%d plans]\n",
          s_.name, dtype(), name, (long long)r.best.engine, r.ms,
          base_ms > 0 ? r.ms / base_ms : 1.0, r.best.build_ms, r.err,
          r.err2 >= 0 ? (" / stats " + fmt(r.err2)).c_str() : "", r.best.notes.c_str(),
          r.candidates);
    }
    std::fflush(stdout);
  }

  void all(double deadline_s, std::chrono::steady_clock::time_point t0);

 private:
  // A plain convolution of kind `kind` (as Graph::conv) of host inputs `a` and `b`, printed, and
  // kept as a reference: its graph's tensors, fastest plan and output.
  struct Plain {
    Result r;
    TensorP a, b, c;
    std::vector<float> out;
  };
  Plain plain(Graph& g, int kind, const std::vector<float>& a, const std::vector<float>& b,
              const char* name) {
    const std::vector<int64_t> dims[3][3] = {
        {xd(), wd(), yd()}, {yd(), wd(), xd()}, {xd(), yd(), wd()}};
    Plain p;
    p.a = g.tensor(dims[kind][0], type_), p.b = g.tensor(dims[kind][1], type_);
    p.c = g.tensor(dims[kind][2], type_);
    g.conv(kind, p.a, p.b, p.c, g.conv_desc(s_.stride, s_.r / 2));
    upload(p.a, a), upload(p.b, b);
    p.r = run(g, [&](Result& r) { p.out = download(p.c), r.err = 0; });
    print(name, p.r, 0);
    return p;
  }

  // BatchNorm's apply on x as a convolution's prologue: a = relu(x * sc + bc), its intermediates
  // virtual in `mid`.
  struct Prologue {
    TensorP x, sc, bc, a;
  };
  Prologue prologue(Graph& g, cudnnDataType_t mid) {
    Prologue p;
    p.x = g.tensor(xd(), type_), p.sc = g.tensor(cd(), type_), p.bc = g.tensor(cd(), type_);
    TensorP t1 = g.tensor(xd(), mid, true), t2 = g.tensor(xd(), mid, true);
    p.a = g.tensor(xd(), type_, true);
    g.pointwise(CUDNN_POINTWISE_MUL, p.x, p.sc, t1);
    g.pointwise(CUDNN_POINTWISE_ADD, t1, p.bc, t2);
    g.pointwise(CUDNN_POINTWISE_RELU_FWD, t2, nullptr, p.a);
    return p;
  }

  const char* dtype() const { return type_ == CUDNN_DATA_HALF ? "fp16" : "bf16"; }
  static std::string fmt(double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%.1e", v);
    return b;
  }

  cudnnHandle_t h_;
  Shape s_;
  cudnnDataType_t type_;
  int max_;
  bool every_mode_;
  Inputs in_;
};

void Probe::all(double deadline_s, std::chrono::steady_clock::time_point t0) {
  const auto late = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() >
           deadline_s;
  };
  const cudnnDataType_t F = CUDNN_DATA_FLOAT;
  // The BatchNorm prologue's intermediates: fp32, except in fp16, where cuDNN's older fusion
  // engines (its "support surface 70", the one with GenStats) take only fp16 tensors there.
  const cudnnDataType_t mid = type_ == CUDNN_DATA_HALF ? CUDNN_DATA_HALF : F;
  const int64_t pad = s_.r / 2;

  // The plain operations, kept as the references' plans.
  Graph fwd, bwd_data, bwd_filter;
  const Plain conv = plain(fwd, 0, in_.x, in_.w, "conv");
  if (conv.r.status != "ok") return;
  const Plain dgrad = plain(bwd_data, 1, in_.dy, in_.w, "dgrad");
  const Plain wgrad = plain(bwd_filter, 2, in_.x, in_.dy, "wgrad");
  const TensorP &fx = conv.a, &fy = conv.c, &ddy = dgrad.a, &ddx = dgrad.c, &wx = wgrad.a,
                &wdw = wgrad.c;
  const std::vector<float>&y_ref = conv.out, &dx_ref = dgrad.out;

  // A device copy of host values in the io type (for the references' reruns).
  std::vector<void*> scratch;
  const auto device = [&](const TensorP& like, const std::vector<float>& v) {
    void* p = nullptr;
    CU(cudaMalloc(&p, like->bytes()));
    upload(like, v, p);
    scratch.push_back(p);
    return p;
  };

  // Forward with an epilogue: GenStats, or one sum reduction.
  for (int kind = 0; kind < 2 && !late(); ++kind) {
    Graph g;
    TensorP x = g.tensor(xd(), type_), w = g.tensor(wd(), type_), y = g.tensor(yd(), type_);
    TensorP sum = g.tensor(kd(), F), sq = kind == 0 ? g.tensor(kd(), F) : nullptr;
    g.conv(0, x, w, y, g.conv_desc(s_.stride, pad));
    if (kind == 0)
      g.genstats(y, sum, sq);
    else
      g.reduce_sum(y, sum);
    upload(x, in_.x), upload(w, in_.w);
    const Result r = run(g, [&](Result& r) {
      const std::vector<float> yv = download(y);
      r.err = rel_err(yv, y_ref);
      r.err2 = rel_err(download(sum), channel_sums(yv, s_.k, false));
      if (sq) r.err2 = std::max(r.err2, rel_err(download(sq), channel_sums(yv, s_.k, true)));
    });
    print(kind == 0 ? "stats" : "sum", r, conv.r.ms);
  }

  // Forward with BatchNorm's apply as the prologue, with and without GenStats.
  const std::vector<float> a_in = bn_apply(type_, in_, s_.c);
  void* a_dev = device(fx, a_in);
  std::vector<float> ya_ref;
  {
    void* out = device(fy, std::vector<float>(fy->count(), 0));
    rerun(fwd, conv.r.best, {{fx->uid, a_dev}, {fy->uid, out}});
    ya_ref = download(fy, out);
  }
  for (int kind = 0; kind < 2 && !late(); ++kind) {
    Graph g;
    const Prologue pro = prologue(g, mid);
    TensorP w = g.tensor(wd(), type_), y = g.tensor(yd(), type_);
    g.conv(0, pro.a, w, y, g.conv_desc(s_.stride, pad));
    TensorP sum = kind == 1 ? g.tensor(kd(), F) : nullptr,
            sq = kind == 1 ? g.tensor(kd(), F) : nullptr;
    if (kind == 1) g.genstats(y, sum, sq);
    upload(pro.x, in_.x), upload(w, in_.w), upload(pro.sc, in_.sc), upload(pro.bc, in_.bc);
    const Result r = run(g, [&](Result& r) {
      const std::vector<float> yv = download(y);
      r.err = rel_err(yv, ya_ref);
      if (sum)
        r.err2 = std::max(rel_err(download(sum), channel_sums(yv, s_.k, false)),
                          rel_err(download(sq), channel_sums(yv, s_.k, true)));
    });
    print(kind == 0 ? "pro" : "pro_stats", r, conv.r.ms);
  }

  // Data gradient with BatchNorm backward's dx as the prologue: dy * s + t * u.
  if (dgrad.r.status == "ok" && !late()) {
    std::vector<float> dyp(in_.dy.size());
    for (size_t i = 0; i < dyp.size(); ++i)
      dyp[i] = in_.dy[i] * in_.sk[i % s_.k] + in_.t[i] * in_.uk[i % s_.k];
    void* dyp_dev = device(ddy, rounded(type_, dyp));
    void* out = device(ddx, std::vector<float>(ddx->count(), 0));
    rerun(bwd_data, dgrad.r.best, {{ddy->uid, dyp_dev}, {ddx->uid, out}});
    const std::vector<float> ref = download(ddx, out);
    Graph g;
    TensorP dy = g.tensor(yd(), type_), sk = g.tensor(kd(), type_), t = g.tensor(yd(), type_),
            uk = g.tensor(kd(), type_);
    TensorP v1 = g.tensor(yd(), F, true), v2 = g.tensor(yd(), F, true),
            v3 = g.tensor(yd(), type_, true);
    TensorP w = g.tensor(wd(), type_), dx = g.tensor(xd(), type_);
    g.pointwise(CUDNN_POINTWISE_MUL, dy, sk, v1);
    g.pointwise(CUDNN_POINTWISE_MUL, t, uk, v2);
    g.pointwise(CUDNN_POINTWISE_ADD, v1, v2, v3);
    g.conv(1, v3, w, dx, g.conv_desc(s_.stride, pad));
    upload(dy, in_.dy), upload(sk, in_.sk), upload(t, in_.t), upload(uk, in_.uk), upload(w, in_.w);
    print("dgrad_pro", run(g, [&](Result& r) { r.err = rel_err(download(dx), ref); }), dgrad.r.ms);
  }

  // Data gradient with ReLU's backward and a per-channel sum in the epilogue.
  if (dgrad.r.status == "ok" && !late()) {
    std::vector<float> ref(dx_ref.size());
    for (size_t i = 0; i < ref.size(); ++i) ref[i] = in_.a[i] > 0 ? dx_ref[i] : 0.f;
    Graph g;
    TensorP dy = g.tensor(yd(), type_), w = g.tensor(wd(), type_), dxv = g.tensor(xd(), F, true);
    TensorP a = g.tensor(xd(), type_), gout = g.tensor(xd(), type_), sum = g.tensor(cd(), F);
    g.conv(1, dy, w, dxv, g.conv_desc(s_.stride, pad));
    g.pointwise(CUDNN_POINTWISE_RELU_BWD, dxv, a, gout);
    g.reduce_sum(gout, sum);
    upload(dy, in_.dy), upload(w, in_.w), upload(a, in_.a);
    print("dgrad_relu",
          run(g,
              [&](Result& r) {
                const std::vector<float> gv = download(gout);
                r.err = rel_err(gv, rounded(type_, ref));
                r.err2 = rel_err(download(sum), channel_sums(gv, s_.c, false));
              }),
          dgrad.r.ms);
  }

  // Filter gradient with BatchNorm's apply as the prologue on x.
  if (wgrad.r.status == "ok" && !late()) {
    void* out = device(wdw, std::vector<float>(wdw->count(), 0));
    rerun(bwd_filter, wgrad.r.best, {{wx->uid, a_dev}, {wdw->uid, out}});
    const std::vector<float> ref = download(wdw, out);
    Graph g;
    const Prologue pro = prologue(g, mid);
    TensorP dy = g.tensor(yd(), type_), dw = g.tensor(wd(), type_);
    g.conv(2, pro.a, dy, dw, g.conv_desc(s_.stride, pad));
    upload(pro.x, in_.x), upload(pro.sc, in_.sc), upload(pro.bc, in_.bc), upload(dy, in_.dy);
    print("wgrad_pro", run(g, [&](Result& r) { r.err = rel_err(download(dw), ref); }), wgrad.r.ms);
  }
  for (void* p : scratch) CU(cudaFree(p));
}

}  // namespace

int main() {
  const auto t0 = std::chrono::steady_clock::now();
  const double deadline = std::getenv("DEADLINE") ? std::atof(std::getenv("DEADLINE")) : 240;
  const int max_plans = std::getenv("MAXPLANS") ? std::atoi(std::getenv("MAXPLANS")) : 2;
  const bool every_mode = std::getenv("HEUR") && std::string(std::getenv("HEUR")) == "all";
  const std::string only = std::getenv("SHAPES") ? std::getenv("SHAPES") : "";
  cudaDeviceProp prop{};
  CU(cudaGetDeviceProperties(&prop, 0));
  cudnnHandle_t h = nullptr;
  if (cudnnCreate(&h) != CUDNN_STATUS_SUCCESS) {
    std::fprintf(stderr, "cudnnCreate failed\n");
    return 1;
  }
  std::printf("%s (sm_%d%d), cuDNN %zu (headers %d.%d.%d)\n", prop.name, prop.major, prop.minor,
              cudnnGetVersion(), CUDNN_MAJOR, CUDNN_MINOR, CUDNN_PATCHLEVEL);
  // ResNet-50 at batch 128: layer1's 3x3 and its first 1x1, layer3's 3x3 and 1x1 reduction.
  const Shape shapes[] = {{"l1.3x3", 128, 64, 56, 56, 64, 3, 1},
                          {"l1.1x1", 128, 256, 56, 56, 64, 1, 1},
                          {"l3.3x3", 128, 256, 14, 14, 256, 3, 1},
                          {"l3.1x1", 128, 1024, 14, 14, 256, 1, 1}};
  const std::string dtypes = std::getenv("DTYPES") ? std::getenv("DTYPES") : "bf16,fp16";
  for (cudnnDataType_t type : {CUDNN_DATA_BFLOAT16, CUDNN_DATA_HALF})
    for (const Shape& s : shapes) {
      if (dtypes.find(type == CUDNN_DATA_HALF ? "fp16" : "bf16") == std::string::npos) continue;
      if (!only.empty() && only.find(s.name) == std::string::npos) continue;
      Probe(h, s, type, max_plans, every_mode).all(deadline, t0);
    }
  cudnnDestroy(h);
  return 0;
}
