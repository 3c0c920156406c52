#!/usr/bin/env python3
"""Where the GPU time of a training step goes, from Chrome traces: dtrain's and PyTorch's.

Reads one or two Chrome-trace JSON files (plain or .gz) as torch.profiler's export_chrome_trace
and LibTorch's C++ profiler write them (Kineto; the legacy profiler's plain list of events too):
dtrain's traces and those of bench/torch_*.py --profile. Prints a Markdown report.

Steps are the CPU ranges named "dtrain_step" (both sides mark their steps so); without any, the
whole trace counts as --steps steps (default 1). The window runs from the first step's start to
the end of the last step, or of the last GPU work launched in a step if that ends later. Per step:

  wall        window / steps
  CPU step    mean length of the step ranges on the host
  GPU busy    the union of kernel, memcpy and memset intervals over all streams, in the window
  kernels     summed kernel time and kernel count of the work launched inside the steps (by
              launch correlation; GPU work with none counts if it starts inside a step range);
              memcpy and memset apart
  idle gaps   the largest holes in that union, with the work around them
  runtime     cudaLaunchKernel, cudaMemcpyAsync and the synchronizations (cudaStreamSynchronize,
              cudaDeviceSynchronize, cudaEventSynchronize, ...) called inside the steps, and the
              operators that made the synchronizing calls: a host sync inside a step stalls the
              queue
  top kernels by time, grouped by a normalized name (no namespaces, argument lists or template
              arguments, except the functor of ATen's generic kernels: "vectorized_elementwise_
              kernel[MulFunctor]"), so that the same kernel matches in dtrain's trace and
              PyTorch's; --raw-names groups by the full name

With two traces: both side by side (per-step numbers, kernels by normalized name sorted by the
difference, kernels of one side only, kernel classes, runtime calls), then each trace's report.

  python3 bench/trace_summary.py gpt2_torch.json
  python3 bench/trace_summary.py dtrain_gpt2.json gpt2_torch.json --labels dtrain,torch
  python3 bench/trace_summary.py --self-test     # the arithmetic on a hand-made trace

Standard library only.
"""
import argparse
import bisect
import collections
import gzip
import json
import re
import sys

STEP_RANGE = "dtrain_step"
GPU_CATS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "memcpy": "memcpy",
            "gpu_memset": "memset", "memset": "memset"}
RUNTIME_CATS = {"cuda_runtime", "cuda_driver", "runtime", "driver"}
SYNC_CALLS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize",
              "cuStreamSynchronize", "cuCtxSynchronize", "cuEventSynchronize", "cudaMemcpy",
              "cuMemcpyDtoH_v2", "cuMemcpyHtoD_v2")
WATCHED = ("cudaLaunchKernel", "cudaMemcpyAsync", "cudaStreamSynchronize",
           "cudaDeviceSynchronize", "cudaEventSynchronize")
NAME_WIDTH = 80


# ---------------------------------------------------------------------------------------------
# Reading

def load_events(path):
    """The trace's events: a {"traceEvents": [...]} object or a bare list, plain or gzipped."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as f:
        text = f.read()
    try:
        data = json.loads(text)
    except ValueError:
        # Some exporters leave a comma before the closing bracket.
        data = json.loads(re.sub(r",\s*([\]}])", r"\1", text))
    events = data.get("traceEvents", []) if isinstance(data, dict) else data
    return [e for e in events if isinstance(e, dict)]


def gpu_kind(e):
    return GPU_CATS.get(str(e.get("cat", "")).lower())


def is_runtime(e):
    return str(e.get("cat", "")).lower() in RUNTIME_CATS


def is_cpu_range(e):
    """A host-side range (operator, annotation, Python function); a trace without categories
    (the legacy profiler's) has only those."""
    cat = str(e.get("cat", "")).lower()
    return not cat.startswith("gpu") and not gpu_kind(e) and not is_runtime(e) \
        and cat not in ("ac2g", "flow")


def corr_id(e):
    a = e.get("args") or {}
    c = a.get("correlation")
    return c if c is not None else a.get("correlation id")


def span(e):
    ts = float(e["ts"])
    return ts, ts + float(e.get("dur", 0) or 0)


# ---------------------------------------------------------------------------------------------
# Interval arithmetic

def union(intervals):
    """Sorted, merged (start, end) intervals: overlaps across streams count once."""
    merged = []
    for s, t in sorted(intervals):
        if merged and s <= merged[-1][1]:
            if t > merged[-1][1]:
                merged[-1][1] = t
        else:
            merged.append([s, t])
    return [tuple(m) for m in merged]


def clip(intervals, lo, hi):
    return [(max(s, lo), min(t, hi)) for s, t in intervals if t > lo and s < hi]


def gaps_of(merged, lo, hi):
    """The holes of `merged` (sorted, disjoint, inside [lo, hi]) in [lo, hi], as (start, end)."""
    out, cur = [], lo
    for s, t in merged:
        if s > cur:
            out.append((cur, s))
        cur = max(cur, t)
    if hi > cur:
        out.append((cur, hi))
    return out


# ---------------------------------------------------------------------------------------------
# Kernel names

GENERIC = {"BinaryFunctor", "AUnaryFunctor", "BUnaryFunctor", "UnaryFunctor", "ReduceOp",
           "func_wrapper_t", "Array", "TensorListMetadata", "OffsetCalculator", "LoadWithCast",
           "StoreWithCast", "TrivialOffsetCalculator", "IntDivider", "TensorInfo", "lambda",
           "operator_call", "anon", "TensorIteratorBase", "TensorIterator", "FlattenedOffset",
           "CUDAFunctor", "WelfordOps", "MeanOps", "ArgMaxOps", "ArgMinOps", "Flash_kernel_traits",
           "Flash_fwd_kernel_traits", "Flash_bwd_kernel_traits", "memory", "detail", "native",
           "gpu_kernel_impl", "gpu_kernel_impl_nocast", "gpu_kernel_with_scalars",
           "opmath_gpu_kernel_with_scalars", "launch_vectorized_kernel", "launch_legacy_kernel"}
TAG = re.compile(r"^(?:\w*Functor\w*|\w+_functor|\w+_kernel_impl|\w+_kernel_cuda|\w+_impl|"
                 r"\w+Ops|\w+Op|\w+_kernel)$")
GENERIC_TEMPLATES = ("elementwise_kernel", "vectorized_elementwise_kernel",
                     "unrolled_elementwise_kernel", "reduce_kernel", "multi_tensor_apply_kernel",
                     "index_elementwise_kernel", "elementwise_kernel_with_index",
                     "distribution_elementwise_grid_stride_kernel", "vectorized_gather_kernel",
                     "launch_kernel")


def _split_template(name):
    """(base, template arguments, rest) of `name` at its first top-level '<'."""
    depth, start = 0, None
    for i, ch in enumerate(name):
        if ch == "<":
            if depth == 0:
                start = i
            depth += 1
        elif ch == ">" and depth:
            depth -= 1
            if depth == 0:
                return name[:start], name[start + 1:i], name[i + 1:]
    return name, "", ""


def _strip_args(name):
    """`name` up to its argument list: the first '(' outside template brackets."""
    depth = 0
    for i, ch in enumerate(name):
        if ch == "<":
            depth += 1
        elif ch == ">" and depth:
            depth -= 1
        elif ch == "(" and depth == 0:
            return name[:i]
    return name


def normalize(name):
    """A name that the same kernel has in dtrain's trace and PyTorch's, whatever its vector width,
    element type or template configuration: no "void", namespaces, argument list or template
    arguments; ATen's generic kernels keep their functor or the function of their lambda
    (reduce_kernel[sum_functor]); Triton kernels lose their trailing index."""
    n = name.strip()
    if n.startswith("void "):
        n = n[5:]
    n = n.replace("(anonymous namespace)", "anon").replace("operator()", "operator_call")
    n = re.sub(r"\{lambda\([^{}]*\)#\d+\}", "lambda", n)
    n = _strip_args(n).strip()
    base, targs, _ = _split_template(n)
    short = base.split("::")[-1].strip() or base.strip()
    if short in GENERIC_TEMPLATES and targs:
        for ident in re.findall(r"[A-Za-z_]\w*", targs):
            if ident not in GENERIC and TAG.match(ident):
                return "%s[%s]" % (short, ident)
    m = re.match(r"^(triton_\w+?)_\d+$", short)
    return m.group(1) if m else short


def kernel_class(name, kind):
    """A coarse class of GPU work, for comparing two traces whose kernel names differ."""
    if kind != "kernel":
        return kind
    n = name.lower()
    for cls, pat in (
            ("attention", r"flash|fmha|attention|sdpa|attn"),
            ("convolution", r"conv|fprop|dgrad|wgrad|implicit_gemm|winograd|im2col|col2im"),
            ("normalization", r"norm|bn_|batchnorm|welford"),
            ("gemm", r"gemm|nvjet|cublas|cutlass|s16816|s1688|s884|wgmma|hmma|gemv|matmul|"
                     r"splitk|xmma"),
            ("optimizer", r"adam|sgd|multi_tensor|foreach"),
            ("softmax/loss", r"softmax|nll_loss|cross_entropy|log_softmax"),
            ("reduction", r"reduce|sum_functor|mean|norm_kernel|argmax|scan"),
            ("embedding/index", r"embedding|index|gather|scatter"),
            ("copy/layout", r"copy|cat_array|catarray|transpose|nchwtonhwc|nhwctonchw|permute"),
            ("elementwise", r"elementwise|fill|functor|pointwise|triton_poi")):
        if re.search(pat, n):
            return cls
    return "other"


def short(s, width=NAME_WIDTH):
    s = " ".join(s.split()).replace("|", "\\|")
    return s if len(s) <= width else s[:width - 3] + "..."


# ---------------------------------------------------------------------------------------------
# Analysis

class Trace:
    """The numbers of one trace, all times in microseconds."""

    def __init__(self, events, steps=None, raw_names=False, label="trace"):
        self.label = label
        xs = [e for e in events if e.get("ph") == "X" and "ts" in e]
        gpu = [e for e in xs if gpu_kind(e)]
        runtime = [e for e in xs if is_runtime(e)]
        self.any_runtime = bool(runtime)
        cpu = [e for e in xs if is_cpu_range(e)]

        # Step ranges: the outermost CPU ranges named STEP_RANGE (a copy nested in another, as
        # some exporters write, is the same step).
        ranges = []
        for s, t in sorted(span(e) for e in cpu if e.get("name") == STEP_RANGE):
            if ranges and s >= ranges[-1][0] and t <= ranges[-1][1]:
                continue
            ranges.append((s, t))
        self.found_steps = len(ranges)
        self.note = None
        if ranges:
            if steps and steps < len(ranges):
                ranges = ranges[-steps:]
                self.note = "last %d of %d step ranges (earlier ones left out)" % (
                    steps, self.found_steps)
            elif steps and steps > len(ranges):
                self.note = "--steps %d: the trace has only %d" % (steps, len(ranges))
            self.n = len(ranges)
        else:
            everything = [span(e) for e in xs]
            if not everything:
                raise ValueError("no complete ('X') events in the trace")
            ranges = [(min(s for s, _ in everything), max(t for _, t in everything))]
            self.n = steps or 1
            self.note = "no '%s' ranges: the whole trace counts as %d step%s" % (
                STEP_RANGE, self.n, "" if self.n == 1 else "s")
        self.ranges = ranges
        starts = [s for s, _ in ranges]

        def in_steps(ts):
            i = bisect.bisect_right(starts, ts) - 1
            return i >= 0 and ts < ranges[i][1]

        # GPU work launched inside the steps: by the launching call's correlation id.
        launch_at = {}
        for e in runtime:
            c = corr_id(e)
            if c is not None:
                launch_at[c] = e
        self.launch_of = {}
        step_work = []
        for e in gpu:
            launch = launch_at.get(corr_id(e))
            if launch is not None:
                self.launch_of[id(e)] = launch
                inside = in_steps(float(launch["ts"]))
            else:
                inside = in_steps(float(e["ts"]))
            if inside:
                step_work.append(e)
        self.step_work = step_work

        self.lo = ranges[0][0]
        self.cpu_hi = ranges[-1][1]
        self.hi = max([self.cpu_hi] + [span(e)[1] for e in step_work])
        self.window = self.hi - self.lo
        self.cpu_step = sum(t - s for s, t in ranges) / len(ranges)
        self.step_lengths = [t - s for s, t in ranges]
        if step_work:
            self.gpu_span = (max(span(e)[1] for e in step_work)
                             - min(span(e)[0] for e in step_work))
        else:
            self.gpu_span = 0.0

        # Sums and counts of the steps' work, by kind and by (normalized) name.
        self.time = collections.Counter()
        self.count = collections.Counter()
        self.by_name = collections.defaultdict(lambda: [0.0, 0])
        self.by_class = collections.Counter()
        for e in step_work:
            kind = gpu_kind(e)
            d = float(e.get("dur", 0) or 0)
            self.time[kind] += d
            self.count[kind] += 1
            name = str(e.get("name", "?"))
            key = name if raw_names or kind != "kernel" else normalize(name)
            if kind != "kernel":
                key = "[%s] %s" % (kind, name)
            slot = self.by_name[key]
            slot[0] += d
            slot[1] += 1
            self.by_class[kernel_class(name, kind)] += d

        # Busy and idle: per device; the device with the most work in the window is "the GPU".
        per_dev = collections.defaultdict(list)
        for e in gpu:
            dev = (e.get("args") or {}).get("device", e.get("pid"))
            per_dev[dev].append((span(e), e))
        self.devices = {}
        for dev, items in per_dev.items():
            merged = union(clip([iv for iv, _ in items], self.lo, self.hi))
            self.devices[dev] = (sum(t - s for s, t in merged), merged, items)
        self.busy, self.merged, self.gaps, self.gpu_items = 0.0, [], [], []
        if self.devices:
            self.device = max(self.devices, key=lambda d: self.devices[d][0])
            self.busy, self.merged, self.gpu_items = self.devices[self.device]
            self.gaps = sorted(gaps_of(self.merged, self.lo, self.hi),
                               key=lambda g: (-(g[1] - g[0]), g[0]))
        self.idle = self.window - self.busy

        # Runtime and driver calls made inside the steps, and what made the synchronizing ones.
        self.calls = collections.defaultdict(lambda: [0, 0.0, 0.0])  # count, total, longest
        self.sync_sites = collections.defaultdict(lambda: [0, 0.0])
        self.syncs = []
        self.op_of = self._enclosing_ops(cpu, runtime)
        for e in runtime:
            s, t = span(e)
            if not in_steps(s):
                continue
            name = str(e.get("name", "?"))
            c = self.calls[name]
            c[0] += 1
            c[1] += t - s
            c[2] = max(c[2], t - s)
            if name in SYNC_CALLS or "Synchronize" in name:
                self.syncs.append(e)
                site = self.sync_sites[(name, self.op_of.get(id(e), "-"))]
                site[0] += 1
                site[1] += t - s

    @staticmethod
    def _enclosing_ops(cpu, runtime):
        """id(runtime call) -> "outermost op > innermost op" of the host ranges around it on
        its thread, step ranges left out."""
        by_thread = collections.defaultdict(list)
        for e in cpu:
            name = str(e.get("name", ""))
            if name == STEP_RANGE or name.startswith("ProfilerStep#"):
                continue
            s, t = span(e)
            by_thread[(e.get("pid"), e.get("tid"))].append((s, 0, -t, t, name))
        for e in runtime:
            s, t = span(e)
            by_thread[(e.get("pid"), e.get("tid"))].append((s, 1, -t, t, e))
        out = {}
        for items in by_thread.values():
            items.sort(key=lambda x: (x[0], x[1], x[2]))
            stack = []
            for s, is_call, _, t, what in items:
                while stack and stack[-1][0] < s:
                    stack.pop()
                if is_call:
                    if stack:
                        outer, inner = stack[0][1], stack[-1][1]
                        out[id(what)] = outer if outer == inner else outer + " > " + inner
                else:
                    while stack and stack[-1][0] < t:
                        stack.pop()
                    stack.append((t, what))
        return out

    # Per-step figures in milliseconds.
    def ms(self, us):
        return us / 1e3 / self.n

    def per_step(self):
        """The figures of a step, in milliseconds; None for the GPU's in a trace without GPU
        work."""
        g = bool(self.devices)
        return collections.OrderedDict([
            ("wall ms/step", self.ms(self.window)),
            ("CPU step ms (mean range)", self.cpu_step / 1e3),
            ("GPU span ms/step", self.ms(self.gpu_span) if g else None),
            ("GPU busy %", (100.0 * self.busy / self.window if self.window else 0.0)
             if g else None),
            ("GPU idle ms/step", self.ms(self.idle) if g else None),
            ("kernel ms/step", self.ms(self.time["kernel"]) if g else None),
            ("kernels/step", self.count["kernel"] / self.n if g else None),
            ("memcpy ms/step", self.ms(self.time["memcpy"]) if g else None),
            ("memcpys/step", self.count["memcpy"] / self.n if g else None),
            ("memset ms/step", self.ms(self.time["memset"]) if g else None),
            ("memsets/step", self.count["memset"] / self.n if g else None),
            ("host syncs/step", len(self.syncs) / self.n),
            ("host sync ms/step", self.ms(sum(span(e)[1] - span(e)[0] for e in self.syncs))),
        ])

    @staticmethod
    def describe_gpu(e):
        name = str(e.get("name", "?"))
        return short(normalize(name) if gpu_kind(e) == "kernel" else name, 50)

    def around(self, gap):
        """The GPU work that ends a gap's start and starts at its end, with the op that launched
        the latter, and the synchronizing calls that overlap the gap."""
        s, t = gap
        before = [e for iv, e in self.gpu_items if abs(iv[1] - s) < 1e-6]
        after = [e for iv, e in self.gpu_items if abs(iv[0] - t) < 1e-6]
        parts = []
        if before:
            parts.append("after " + self.describe_gpu(before[0]))
        if after:
            launch = self.launch_of.get(id(after[0]))
            op = self.op_of.get(id(launch)) if launch is not None else None
            parts.append("before " + self.describe_gpu(after[0])
                         + (" (launched in %s)" % short(op, 60) if op else ""))
        during = sorted({"%s (%s)" % (e["name"], self.op_of.get(id(e), "-"))
                         for e in self.syncs if span(e)[0] < t and span(e)[1] > s})
        if during:
            parts.append("during " + ", ".join(during))
        return "; ".join(parts) or "-"


# ---------------------------------------------------------------------------------------------
# Reports

def fmt(v, digits=3):
    if v is None:
        return "-"
    if isinstance(v, int):
        return str(v)
    return ("%." + str(digits) + "f") % v


def table(header, rows, out):
    out.append("| " + " | ".join(header) + " |")
    out.append("|" + "|".join(" --- " for _ in header) + "|")
    for r in rows:
        out.append("| " + " | ".join(str(c) for c in r) + " |")
    out.append("")


def report(tr, top=25, ngaps=8, title=None):
    out = ["# " + (title or tr.label), ""]
    out.append("steps: %d (%d '%s' ranges in the trace)%s" % (
        tr.n, tr.found_steps, STEP_RANGE, "; " + tr.note if tr.note else ""))
    out.append("window: %.3f ms (first step's start to the end of the steps' work on host and "
               "GPU)" % (tr.window / 1e3))
    if len(tr.step_lengths) > 1:
        out.append("step ranges (ms): " + " ".join("%.3f" % (x / 1e3)
                                                   for x in tr.step_lengths[:30])
                   + (" ..." if len(tr.step_lengths) > 30 else ""))
    out.append("")
    table(["per step", "value"], [(k, fmt(v)) for k, v in tr.per_step().items()], out)
    if not tr.devices:
        out.append("No GPU kernels, memcpys or memsets in this trace (a CPU-only profile): "
                   "no GPU figures.")
        out.append("")
    else:
        if len(tr.devices) > 1:
            out.append("GPU figures are device %s's; busy %% of the others: %s" % (
                tr.device, ", ".join("%s: %.1f" % (d, 100.0 * v[0] / tr.window)
                                     for d, v in tr.devices.items() if d != tr.device)))
            out.append("")
        if not tr.count["kernel"]:
            out.append("No kernels launched inside the steps.")
            out.append("")
        out.append("## Largest GPU idle gaps (offsets from the window's start)")
        out.append("")
        rows = [(fmt((s - tr.lo) / 1e3), fmt((t - s) / 1e3), tr.around((s, t)))
                for s, t in tr.gaps[:ngaps] if t > s]
        table(["at ms", "idle ms", "around"], rows, out)
        if tr.by_name:
            total = sum(v[0] for v in tr.by_name.values())
            out.append("## Top GPU work by time (ms and count per step)")
            out.append("")
            items = sorted(tr.by_name.items(), key=lambda kv: (-kv[1][0], kv[0]))
            rows = [(short(k), fmt(v[1] / tr.n, 2), fmt(tr.ms(v[0])),
                     "%.1f%%" % (100.0 * v[0] / total if total else 0)) for k, v in items[:top]]
            if len(items) > top:
                rest = items[top:]
                rows.append(("(%d more)" % len(rest), fmt(sum(v[1] for _, v in rest) / tr.n, 2),
                             fmt(tr.ms(sum(v[0] for _, v in rest))),
                             "%.1f%%" % (100.0 * sum(v[0] for _, v in rest) / total)))
            table(["name", "count", "ms", "share of GPU work"], rows, out)
    out.append("## Host runtime/driver calls inside the steps")
    out.append("")
    if not tr.any_runtime:
        out.append("No CUDA runtime or driver calls in this trace.")
        out.append("")
        return out
    out.extend(runtime_table([tr]))
    if tr.sync_sites:
        out.append("Synchronizing calls inside the steps, by the host ops that made them:")
        out.append("")
        rows = [(name, short(op, 70), fmt(c / tr.n, 2), fmt(tr.ms(us)))
                for (name, op), (c, us) in sorted(tr.sync_sites.items(),
                                                  key=lambda kv: -kv[1][1])]
        table(["call", "in op", "calls/step", "ms/step"], rows, out)
    else:
        out.append("No synchronizing runtime call inside the steps.")
        out.append("")
    return out


def runtime_table(trs, extra=8):
    names = list(WATCHED)
    totals = collections.Counter()
    for tr in trs:
        for name, (c, us, _) in tr.calls.items():
            totals[name] += us / tr.n
    names += [n for n, _ in totals.most_common() if n not in names][:extra]
    out = []
    if len(trs) == 1:
        tr = trs[0]
        rows = []
        for n in names:
            c, us, longest = tr.calls.get(n, (0, 0.0, 0.0))
            rows.append((n, c, fmt(c / tr.n, 2), fmt(tr.ms(us)), fmt(longest / 1e3)))
        table(["call", "count", "per step", "ms/step", "longest ms"], rows, out)
    else:
        a, b = trs
        rows = []
        for n in names:
            ca, ua, _ = a.calls.get(n, (0, 0.0, 0.0))
            cb, ub, _ = b.calls.get(n, (0, 0.0, 0.0))
            rows.append((n, fmt(ca / a.n, 2), fmt(cb / b.n, 2), fmt(a.ms(ua)), fmt(b.ms(ub))))
        table(["call", a.label + " /step", b.label + " /step", a.label + " ms/step",
               b.label + " ms/step"], rows, out)
    return out


def compare(a, b, top=25):
    out = ["# %s vs %s" % (a.label, b.label), ""]
    pa, pb = a.per_step(), b.per_step()
    rows = []
    for k in pa:
        va, vb = pa[k], pb[k]
        d = None if va is None or vb is None else vb - va
        rows.append((k, fmt(va), fmt(vb), fmt(d)))
    table(["per step", a.label, b.label, "%s - %s" % (b.label, a.label)], rows, out)

    if a.by_name or b.by_name:
        out.append("## GPU work by normalized name (ms/step, sorted by |difference|)")
        out.append("")
        keys = set(a.by_name) | set(b.by_name)
        both = [k for k in keys if k in a.by_name and k in b.by_name]

        def row(k):
            ma = a.ms(a.by_name[k][0]) if k in a.by_name else 0.0
            mb = b.ms(b.by_name[k][0]) if k in b.by_name else 0.0
            ca = a.by_name[k][1] / a.n if k in a.by_name else 0.0
            cb = b.by_name[k][1] / b.n if k in b.by_name else 0.0
            return k, ma, mb, ca, cb

        rows = sorted((row(k) for k in both), key=lambda r: (-abs(r[2] - r[1]), r[0]))
        table(["name", a.label, b.label, "diff", "count/step " + a.label,
               "count/step " + b.label],
              [(short(k), fmt(ma), fmt(mb), fmt(mb - ma), fmt(ca, 2), fmt(cb, 2))
               for k, ma, mb, ca, cb in rows[:top]], out)
        for tr, other in ((a, b), (b, a)):
            only = sorted(((k, v) for k, v in tr.by_name.items() if k not in other.by_name),
                          key=lambda kv: (-kv[1][0], kv[0]))
            out.append("## Only in %s (%d names, %.3f ms/step)" % (
                tr.label, len(only), tr.ms(sum(v[0] for _, v in only))))
            out.append("")
            if only:
                table(["name", "ms/step", "count/step"],
                      [(short(k), fmt(tr.ms(v[0])), fmt(v[1] / tr.n, 2)) for k, v in only[:top]],
                      out)
        out.append("## GPU work by class (ms/step)")
        out.append("")
        classes = sorted(set(a.by_class) | set(b.by_class),
                         key=lambda c: -(b.ms(b.by_class[c]) + a.ms(a.by_class[c])))
        table(["class", a.label, b.label, "diff"],
              [(c, fmt(a.ms(a.by_class[c])), fmt(b.ms(b.by_class[c])),
                fmt(b.ms(b.by_class[c]) - a.ms(a.by_class[c]))) for c in classes], out)
    else:
        out.append("No GPU work in either trace.")
        out.append("")
    out.append("## Host runtime/driver calls inside the steps (count and ms per step)")
    out.append("")
    if a.any_runtime or b.any_runtime:
        out.extend(runtime_table([a, b]))
    else:
        out.append("No CUDA runtime or driver calls in either trace.")
        out.append("")
    return out


# ---------------------------------------------------------------------------------------------
# Self-test: a hand-made trace whose numbers are worked out below.

MUL4 = ("void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, "
        "float, at::native::binary_internal::MulFunctor<float> >, at::detail::Array<char*, 3> >"
        "(int, at::native::BinaryFunctor<float, float, float, "
        "at::native::binary_internal::MulFunctor<float> >, at::detail::Array<char*, 3>)")
MUL2 = ("void at::native::vectorized_elementwise_kernel<2, "
        "at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, "
        "at::native::binary_internal::MulFunctor<float> >, "
        "at::detail::Array<char*, 3> >(int, at::native::BinaryFunctor<c10::BFloat16, "
        "c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float> >, "
        "at::detail::Array<char*, 3>)")
GEMM = ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_"
        "segment_k_off_kernel__5x_cublas")
SUM = ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, "
       "at::native::func_wrapper_t<float, at::native::sum_functor<float, float, "
       "float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, "
       "4> >(at::native::ReduceOp<float, at::native::func_wrapper_t<float, "
       "at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::"
       "{lambda(float, float)#1}>, unsigned int, float, 4>)")
CAT = ("void at::native::(anonymous namespace)::CatArrayBatchedCopy<float, unsigned int, 2, 128, 1>"
       "(float*, at::native::(anonymous namespace)::CatArrInputTensorMetadata<float, unsigned int, "
       "128, 1>, at::native::(anonymous namespace)::TensorSizeStride<unsigned int, 4u>, int, "
       "unsigned int)")
GELU = ("void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::"
        "gelu_tanh_kernel_impl(at::TensorIteratorBase&)::{lambda()#1}::operator()() const::"
        "{lambda()#2}::operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2> >(int, "
        "at::native::(anonymous namespace)::gelu_tanh_kernel_impl(at::TensorIteratorBase&)::"
        "{lambda()#1}::operator()() const::{lambda()#2}::operator()() const::{lambda(float)#1}, "
        "at::detail::Array<char*, 2>)")


def synthetic(mul=MUL4, gemm_us=30):
    """Host thread (pid 1, tid 1): steps [0, 100] and [100, 200]. GPU 0, streams 7 and 8:

        K3  cat      [-10, 5]    launched at -20, before the steps: not the steps' work
        K1  gemm     [10, 40]    stream 7, launched at 5 (step 1)
        K2  mul      [20, 50]    stream 8, launched at 12: overlaps K1
        memcpy       [60, 70]    stream 7, cudaMemcpyAsync at 20
        (cudaStreamSynchronize [25, 75] inside aten::item [22, 78])
        K1  gemm     [120, 150]  stream 7, launched at 110 inside aten::mm [108, 118]
        memset       [140, 160]  stream 8, cudaMemsetAsync at 116: overlaps K1
        K4  sum      [170, 180]  stream 7, no correlation: counts since it starts in step 2
        K2  mul      [210, 230]  stream 8, launched at 190 (step 2): ends after the last step
        (cudaDeviceSynchronize [200, 230] after the steps)
    A copy of the step range on the GPU (gpu_user_annotation) must be ignored."""
    ev = []

    def cpu(name, ts, dur, cat="cpu_op"):
        ev.append({"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur})

    def call(name, ts, dur, corr=None):
        e = {"ph": "X", "cat": "cuda_runtime", "name": name, "pid": 1, "tid": 1, "ts": ts,
             "dur": dur, "args": {}}
        if corr is not None:
            e["args"]["correlation"] = corr
        ev.append(e)

    def gpu(cat, name, stream, ts, dur, corr=None):
        e = {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur,
             "args": {"device": 0, "stream": stream}}
        if corr is not None:
            e["args"]["correlation"] = corr
        ev.append(e)

    cpu(STEP_RANGE, 0, 100, "user_annotation")
    cpu(STEP_RANGE, 100, 100, "user_annotation")
    ev.append({"ph": "X", "cat": "gpu_user_annotation", "name": STEP_RANGE, "pid": 0, "tid": 7,
               "ts": 10, "dur": 150})
    ev.append({"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "GPU 0"}})
    call("cudaLaunchKernel", -20, 5, 7)
    gpu("kernel", CAT, 7, -10, 15, 7)
    call("cudaLaunchKernel", 5, 5, 1)
    gpu("kernel", GEMM, 7, 10, gemm_us, 1)
    call("cudaLaunchKernel", 12, 5, 2)
    gpu("kernel", mul, 8, 20, 30, 2)
    call("cudaMemcpyAsync", 20, 4, 3)
    gpu("gpu_memcpy", "Memcpy DtoH (Device -> Pinned)", 7, 60, 10, 3)
    cpu("aten::item", 22, 56)
    cpu("aten::_local_scalar_dense", 23, 54)
    call("cudaStreamSynchronize", 25, 50)
    cpu("aten::mm", 108, 10)
    call("cudaLaunchKernel", 110, 5, 4)
    gpu("kernel", GEMM, 7, 120, gemm_us, 4)
    call("cudaMemsetAsync", 116, 3, 5)
    gpu("gpu_memset", "Memset (Device)", 8, 140, 20, 5)
    gpu("kernel", SUM, 7, 170, 10)
    call("cudaLaunchKernel", 190, 5, 6)
    gpu("kernel", mul, 8, 210, 20, 6)
    call("cudaDeviceSynchronize", 200, 30)
    return {"traceEvents": ev}


def self_test():
    """Checks the numbers of the synthetic trace (worked out by hand in synthetic()'s
    docstring), prints its report and a comparison with a variant, and the count of checks."""
    import os
    import tempfile

    passed = [0]

    def check(ok, what=""):
        if not ok:
            raise AssertionError(what)
        passed[0] += 1

    def close(x, y):
        check(abs(x - y) < 1e-9, (x, y))

    # Names: the same kernel with another vector width or element type matches.
    for raw, want in ((MUL4, "vectorized_elementwise_kernel[MulFunctor]"),
                      (MUL2, "vectorized_elementwise_kernel[MulFunctor]"),
                      (SUM, "reduce_kernel[sum_functor]"),
                      (GELU, "vectorized_elementwise_kernel[gelu_tanh_kernel_impl]"),
                      (CAT, "CatArrayBatchedCopy"), (GEMM, GEMM),
                      ("triton_per_fused_add_native_layer_norm_3",
                       "triton_per_fused_add_native_layer_norm")):
        check(normalize(raw) == want, (normalize(raw), want))
    check(union([(10, 40), (20, 50), (50, 55), (60, 70)]) == [(10, 55), (60, 70)])
    check(gaps_of([(10, 55), (60, 70)], 0, 80) == [(0, 10), (55, 60), (70, 80)])

    # Through a gzipped file, as a trace is read.
    fd, path = tempfile.mkstemp(suffix=".json.gz")
    os.close(fd)
    with gzip.open(path, "wt") as f:
        json.dump(synthetic(), f)
    tr = Trace(load_events(path), label="A")
    os.remove(path)
    check((tr.n, tr.found_steps) == (2, 2))
    # Window: [0, 230]; the last step's K2 ends at 230, after the host's 200.
    check((tr.lo, tr.cpu_hi, tr.hi) == (0, 200, 230))
    # Union over both streams, clipped to the window: [0,5] (K3's tail) [10,50] [60,70] [120,160]
    # [170,180] [210,230] = 5 + 40 + 10 + 40 + 10 + 20 = 125 us busy of 230, 105 idle.
    check(tr.merged == [(0, 5), (10, 50), (60, 70), (120, 160), (170, 180), (210, 230)])
    close(tr.busy, 125)
    close(tr.idle, 105)
    # Gaps: 50 [70,120], 30 [180,210], 10 [50,60], 10 [160,170], 5 [5,10].
    check(tr.gaps == [(70, 120), (180, 210), (50, 60), (160, 170), (5, 10)], tr.gaps)
    # The steps' kernels: K1 30 + K2 30 + K1 30 + K4 10 + K2 20 = 120 us in 5 launches (K3 is not
    # the steps'); memcpy 10 us, memset 20 us.
    close(tr.time["kernel"], 120)
    check((tr.count["kernel"], tr.count["memcpy"], tr.count["memset"]) == (5, 1, 1))
    close(tr.time["memcpy"], 10)
    close(tr.time["memset"], 20)
    p = tr.per_step()
    close(p["wall ms/step"], 0.115)  # 230 / 2
    close(p["CPU step ms (mean range)"], 0.100)
    close(p["GPU span ms/step"], 0.110)  # [10, 230] / 2
    close(p["GPU busy %"], 100.0 * 125 / 230)  # 54.348
    close(p["GPU idle ms/step"], 0.0525)
    close(p["kernel ms/step"], 0.060)
    close(p["kernels/step"], 2.5)
    close(p["memcpy ms/step"], 0.005)
    close(p["memset ms/step"], 0.010)
    close(p["host syncs/step"], 0.5)  # one cudaStreamSynchronize; cudaDeviceSynchronize is after
    close(p["host sync ms/step"], 0.025)
    # By name: gemm 60 us (0.030 ms/step), mul 50 (0.025), sum 10 (0.005); K3 is not there.
    close(tr.by_name[GEMM][0], 60)
    close(tr.by_name["vectorized_elementwise_kernel[MulFunctor]"][0], 50)
    close(tr.by_name["reduce_kernel[sum_functor]"][0], 10)
    check("CatArrayBatchedCopy" not in tr.by_name)
    # Calls inside the steps: 4 launches (the one at -20 is before), 1 memcpy, 1 memset, 1 sync.
    check(tr.calls["cudaLaunchKernel"][:2] == [4, 20.0])
    check(tr.calls["cudaMemcpyAsync"][:2] == [1, 4.0])
    check("cudaDeviceSynchronize" not in tr.calls)
    check(dict(tr.sync_sites) == {
        ("cudaStreamSynchronize", "aten::item > aten::_local_scalar_dense"): [1, 50.0]})
    around = tr.around((70, 120))
    check(around == ("after Memcpy DtoH (Device -> Pinned); before " + short(GEMM, 50)
                     + " (launched in aten::mm); during cudaStreamSynchronize "
                       "(aten::item > aten::_local_scalar_dense)"), around)

    # Comparison: B's elementwise kernel is the bf16, width-2 variant and its gemm takes 40 us.
    b = Trace(synthetic(mul=MUL2, gemm_us=40)["traceEvents"], label="B")
    check(set(b.by_name) == set(tr.by_name))
    close(b.ms(b.by_name[GEMM][0]) - tr.ms(tr.by_name[GEMM][0]), 0.010)
    close(b.per_step()["kernel ms/step"], 0.070)

    lines = report(tr, title="synthetic trace (bench/trace_summary.py --self-test)")
    lines += compare(tr, b)
    text = "\n".join(lines)
    check("| GPU busy % | 54.348 |" in text)
    check("| 0.070 | 0.050 | after Memcpy" in text)
    # A trace with no GPU work (a CPU-only profile, legacy format: no categories) says so.
    cpu_only = [{"ph": "X", "name": STEP_RANGE, "pid": "CPU functions", "tid": 1, "ts": 0,
                 "dur": 50}, {"ph": "X", "name": "aten::mm", "pid": "CPU functions", "tid": 1,
                              "ts": 5, "dur": 10}]
    t = Trace(cpu_only)
    check("No GPU kernels" in "\n".join(report(t)) and t.n == 1 and t.busy == 0)
    check(t.per_step()["GPU busy %"] is None)
    print(text)
    print("self-test: %d passed, 0 failed" % passed[0])


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("traces", nargs="*", metavar="TRACE", help="one or two Chrome traces")
    ap.add_argument("--top", type=int, default=25, help="rows of kernel tables (default 25)")
    ap.add_argument("--steps", type=int, default=None, metavar="N",
                    help="only the last N step ranges (earlier ones are warm-up); without step "
                         "ranges, the whole trace counts as N steps")
    ap.add_argument("--gaps", type=int, default=8, help="idle gaps to list (default 8)")
    ap.add_argument("--labels", help="names of the traces in the report, comma-separated "
                                     "(default: the file names)")
    ap.add_argument("--raw-names", action="store_true",
                    help="group kernels by their full names, not normalized ones")
    ap.add_argument("--self-test", action="store_true",
                    help="check the arithmetic on a hand-made trace and print its report")
    args = ap.parse_args()
    if args.self_test:
        self_test()
        return
    if not 1 <= len(args.traces) <= 2:
        ap.error("give one or two traces")
    labels = args.labels.split(",") if args.labels else [
        p.rsplit("/", 1)[-1] for p in args.traces]
    if len(labels) != len(args.traces):
        ap.error("--labels: one label per trace")
    if len(set(labels)) < len(labels):
        labels = ["A", "B"]
    trs = [Trace(load_events(p), args.steps, args.raw_names, label)
           for p, label in zip(args.traces, labels)]
    lines = []
    if len(trs) == 2:
        lines += compare(trs[0], trs[1], args.top)
    for tr in trs:
        lines += report(tr, args.top, args.gaps)
    sys.stdout.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
