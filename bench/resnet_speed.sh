#!/usr/bin/env bash
# ResNet training side by side with the strongest plain PyTorch (torch.compile of the model) on one
# GPU, in parts that each fit a device call; every part ends by printing the table of all rows
# measured so far (OUT/resnet_speed.md):
#   A  ResNet-50 bf16 channels-last: dtrain at batch 128 (Note [fused BatchNorm] on and off) and 256
#   T  the same in PyTorch: eager at 128, torch.compile (default mode) at 128 and 256
#   B  torch.compile(mode="max-autotune-no-cudagraphs") at 128 (autotuning takes minutes); B256
#      the same at 256
#   C  ResNet-18 at batch 256: dtrain fused and not, PyTorch eager and compile
#   P  where the GPU time goes: dtrain (graph, fused) and torch.compile at 128, five steps each,
#      compared kernel class by kernel class (bench/trace_summary.py -> OUT/profile_resnet50.md)
#   bash bench/resnet_speed.sh "A T"      # after bash launch/gpu.sh build (or its two targets)
# Environment: OUT (default ./gpu-out/resnet), PYTHON, DTRAIN_BIN, TORCH_TIMEOUT (seconds a PyTorch
# run may take, default 420), STEPS (dtrain's timed window
# and PyTorch's timed steps, default 48), EXTRA (overrides for every dtrain run: a CPU smoke test
# with DTRAIN_BIN=build/bin/dtrain EXTRA="data.synthetic_shape=[3,32,32]" TORCH_EXTRA="--size 32
# --device cpu" STEPS=2).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out/resnet}
mkdir -p "$OUT/runs"
PY=${PYTHON:-python3}
BIN=${DTRAIN_BIN:-build-gpu/bin/dtrain}
STEPS=${STEPS:-48}
read -ra EXTRA_ARGS <<<"${EXTRA:-}"
read -ra TORCH_ARGS <<<"${TORCH_EXTRA:-}"
[ -x "$BIN" ] || { echo "no $BIN: run bash launch/gpu.sh build first"; exit 1; }
ROWS=$OUT/rows.jsonl
touch "$ROWS"

# dtrain NAME BATCH [overrides]: ResNet-50's bench config at BATCH, STEPS steps logged as one
# window after 2 windows of warm-up; one row with the last window's rate and the peak memory.
dtrain() {
  local name=$1 batch=$2
  shift 2
  echo "== $name"
  timeout 300 "$BIN" bench/configs/resnet50.yaml run.dir="$OUT/runs" run.name="$name" \
    train.global_batch="$batch" data.synthetic_size=$((batch * STEPS)) train.epochs=3 \
    run.log_every="$STEPS" checkpoint.every_epoch=false "$@" "${EXTRA_ARGS[@]}" >"$OUT/$name.log" 2>&1 ||
    echo "$name: exit $?"
  rm -rf "$OUT/runs/$name"
  $PY - "$OUT/$name.log" "$name" "$batch" "$*" >>"$ROWS" <<'EOF'
import json, re, sys
text = open(sys.argv[1], errors="replace").read()
rates = re.findall(r"step \d+/\d+ .* ([0-9.]+) samples/s", text)
peak = re.search(r"peak GPU memory ([0-9.]+) GiB", text)
print(json.dumps({"name": sys.argv[2], "who": "dtrain", "batch": int(sys.argv[3]), "args": sys.argv[4],
                  "images_per_s": float(rates[-1]) if rates else None,
                  "peak_gib": float(peak.group(1)) if peak else None}))
EOF
  tail -2 "$OUT/$name.log"
}

# torch NAME [bench/torch_resnet.py arguments]: one row from its JSON line.
torch_row() {
  local name=$1
  shift
  echo "== $name"
  timeout "${TORCH_TIMEOUT:-420}" $PY bench/torch_resnet.py --steps "$STEPS" --warmup 8 "$@" "${TORCH_ARGS[@]}" >"$OUT/$name.log" 2>&1 ||
    echo "$name: exit $?"
  $PY - "$OUT/$name.log" "$name" "$*" >>"$ROWS" <<'EOF'
import json, sys
row = None
for line in open(sys.argv[1], errors="replace"):
    if line.startswith("{"):
        try:
            parsed = json.loads(line)
        except ValueError:
            continue
        if isinstance(parsed, dict) and "images_per_s" in parsed:
            row = parsed
out = {"name": sys.argv[2], "who": "torch", "args": sys.argv[3]}
if row:
    out.update(batch=row["batch"], images_per_s=row["images_per_s"], peak_gib=row["peak_mem_gb"] / 1.073741824 if row.get("peak_mem_gb") else None,
               torch=row.get("torch"), device=row.get("device"))
print(json.dumps(out))
EOF
  tail -1 "$OUT/$name.log" | cut -c1-200
}

for part in ${*:-A}; do
  case $part in
    A)
      dtrain dtrain_r50_b128 128
      dtrain dtrain_r50_b128_unfused 128 model.fused_kernels=false
      dtrain dtrain_r50_b256 256 ;;
    T)
      torch_row torch_r50_b128_eager
      torch_row torch_r50_b128_compile --compile
      torch_row torch_r50_b256_compile --compile --batch 256 ;;
    B)
      torch_row torch_r50_b128_autotune --compile --mode max-autotune-no-cudagraphs ;;
    B256)
      torch_row torch_r50_b256_autotune --compile --mode max-autotune-no-cudagraphs --batch 256 ;;
    C)
      dtrain dtrain_r18_b256 256 model.name=resnet18
      dtrain dtrain_r18_b256_unfused 256 model.name=resnet18 model.fused_kernels=false
      torch_row torch_r18_b256_eager --arch resnet18 --batch 256
      torch_row torch_r18_b256_compile --arch resnet18 --batch 256 --compile ;;
    P)
      timeout 300 "$BIN" bench/configs/resnet50.yaml run.dir="$OUT/runs" run.name=prof train.cuda_graph=on \
        run.profile_start=12 run.profile_steps=5 train.max_steps=20 train.epochs=3 "${EXTRA_ARGS[@]}" >"$OUT/prof.log" 2>&1
      timeout 420 $PY bench/torch_resnet.py --compile --profile "$OUT/runs/torch_trace.json" "${TORCH_ARGS[@]}" >"$OUT/torch_prof.log" 2>&1
      $PY bench/trace_summary.py "$OUT/runs/prof/trace.rank0.json" "$OUT/runs/torch_trace.json" >"$OUT/profile_resnet50.md" 2>&1
      rm -rf "$OUT/runs/prof" "$OUT"/runs/torch_trace*
      head -60 "$OUT/profile_resnet50.md" ;;
    *) echo "usage: $0 [A] [T] [B] [B256] [C] [P]"; exit 2 ;;
  esac
done

# The table: every row so far, the fastest torch.compile per model and batch as the baseline.
$PY - "$ROWS" <<'EOF' | tee "$OUT/resnet_speed.md"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def model(r):
    return "resnet18" if "resnet18" in r.get("args", "") else "resnet50"
best = {}
for r in rows:
    if r["who"] == "torch" and "--compile" in r["args"] and r.get("images_per_s"):
        k = (model(r), r.get("batch"))
        best[k] = max(best.get(k, 0), r["images_per_s"])
print("| run | model | batch | images/s | peak GiB | / fastest torch.compile |")
print("| --- | --- | --- | --- | --- | --- |")
for r in rows:
    ips, k = r.get("images_per_s"), (model(r), r.get("batch"))
    ratio = f"{ips / best[k]:.3f}" if ips and k in best else "-"
    peak = f"{r['peak_gib']:.2f}" if r.get("peak_gib") else "-"
    print(f"| {r['name']} ({r['args'] or 'default'}) | {k[0]} | {k[1]} | {ips or '-'} | {peak} | {ratio} |")
EOF
