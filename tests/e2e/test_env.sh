#!/usr/bin/env bash
# e2e: `dtrain env`, alone and under mpirun: the versions (LibTorch, MPI), the GPUs or "no GPU",
# CUDA_VISIBLE_DEVICES, the launcher and every rank's binding, as text and as JSON (parsed by
# Python, checked against what Python and mpirun say); the hints and the exit code: 1 for what
# would stop training (srun's task numbers against MPI's, run.device cuda without a GPU, a config
# whose data.path is not a folder), 0 for
# advice. On a CPU build, the stand-in NVML (tests/fake_nvml, found through LD_LIBRARY_PATH as
# the driver's libnvidia-ml.so.1) plays a machine with two GPUs.
# Env (set by ctest): DTRAIN_BIN, DTRAIN_SOURCE_DIR, DTRAIN_MPIEXEC, DTRAIN_MPI_FLAGS,
# DTRAIN_REF_PYTHON, DTRAIN_FAKE_NVML.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
e2e_setup env
py=${DTRAIN_REF_PYTHON:-python3}
cfg=$src/configs/synthetic_linear.yaml
expect_rc() { [[ $rc == "$2" ]] || { show "$1"; fail "$1: exit code $rc, expected $2"; }; }
# The environment without any launcher's or CUDA's variables (ctest may run under either).
clean=(env -u CUDA_VISIBLE_DEVICES -u SLURM_JOB_ID -u SLURM_STEP_ID -u SLURM_STEPID -u SLURM_PROCID
       -u SLURM_LOCALID -u SLURM_NTASKS -u SLURM_STEP_NUM_TASKS -u OMPI_COMM_WORLD_SIZE
       -u OMPI_COMM_WORLD_RANK -u OMPI_COMM_WORLD_LOCAL_RANK)
gpus_here=0
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  gpus_here=$(nvidia-smi -L | grep -c '^GPU ' || true)
fi
cuda_build=0
if ldd "$bin" | grep -qE 'libtorch_cuda|libc10_cuda'; then cuda_build=1; fi

# ---- alone, as text --------------------------------------------------------------------------
run 60 text "${clean[@]}" "$bin" env
expect_rc text 0
has_out text "LibTorch" "MPI" "Open MPI" "CUDA_VISIBLE_DEVICES: not set" "Launcher: none, 1 rank(s)" \
  "Result: nothing found that would stop training (exit 0)"
if [[ $gpus_here == 0 ]]; then has_out text "no GPU"; fi
if [[ $cuda_build == 0 ]]; then
  for s in 'CUDA runtime +none \(CPU build\)' 'NCCL +none \(CPU build\)' 'cuDNN +none \(CPU build\)' \
           'nvJPEG +none \(CPU build\)'; do
    grep -qE "^  $s" "$tmp/text.out" || { show text; fail "text: no line '$s'"; }
  done
fi
echo "ok: dtrain env alone: $(grep -m1 -F 'MPI ' "$tmp/text.out" | sed 's/^ *//')"

# ---- alone, as JSON: the facts against Python's and mpirun's ----------------------------------
run 60 json "${clean[@]}" "$bin" env --json
expect_rc json 0
want=$(sed -nE 's/^project\(dtrain VERSION ([0-9.]+).*/\1/p' "$src/CMakeLists.txt")
ompi=$("$mpiexec" --version 2>&1 | sed -nE 's/.*\(Open MPI\) ([0-9.]+).*/\1/p' | head -n1)
"$py" - "$tmp/json.out" "$want" "$ompi" "$gpus_here" "$cuda_build" <<'EOF' || { show json; fail "dtrain env --json: the facts are wrong"; }
import json, os, sys
d = json.load(open(sys.argv[1]))
want, ompi, gpus_here, cuda_build = sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5] == "1"
for k in ["version_text", "dtrain", "libtorch", "build", "cuda", "driver", "cudnn", "nccl", "nvjpeg", "mpi",
          "nvml", "gpus", "cuda_devices", "cuda_visible_devices", "launcher", "world", "ranks",
          "hints", "exit_code"]:
    assert k in d, "no key " + k
assert d["dtrain"] == want, (d["dtrain"], want)
assert d["version_text"].startswith("dtrain " + want + " (LibTorch " + d["libtorch"]), d["version_text"]
assert d["build"] == ("cuda" if cuda_build else "cpu"), d["build"]
assert d["mpi"]["library"].startswith("Open MPI v" + ompi), (d["mpi"], ompi)
assert d["launcher"] == "none" and d["world"] == 1 and d["exit_code"] == 0, d
assert d["cuda_visible_devices"] is None
assert [h for h in d["hints"] if h["stops"]] == [], d["hints"]
if gpus_here == 0:
    assert d["gpus"] == [] and d["cuda_devices"] == 0, d["gpus"]
else:
    assert len(d["gpus"]) == gpus_here, d["gpus"]
if not cuda_build:
    assert d["cuda"] == {"compiled": None, "runtime": None, "driver": None}, d["cuda"]
    assert d["nccl"] is None and d["cudnn"]["compiled"] is None
    assert d["nvjpeg"] == {"ok": False, "text": "this dtrain is a CPU build (no CUDA, no nvJPEG)", "decoder": None}, d["nvjpeg"]
else:
    assert d["nvjpeg"]["decoder"] in (None, "hardware", "CUDA"), d["nvjpeg"]
    assert d["nvjpeg"]["ok"] == (d["nvjpeg"]["decoder"] is not None) or d["cuda_devices"] == 0, d["nvjpeg"]
(r,) = d["ranks"]
mine = sorted(os.sched_getaffinity(0))  # the same mask dtrain inherited from this shell
assert r["rank"] == 0 and r["local_rank"] == 0 and r["world"] == 1, r
assert r["cpu_count"] == len(mine), (r, mine)
assert r["threads"] == len(mine), r  # run.threads 0, alone: every CPU of the mask
first = r["cpus"].split(",")[0].split("-")[0]
assert int(first) == mine[0], (r["cpus"], mine)
assert r["device"] == ("cuda:0" if d["cuda_devices"] else "cpu"), r
print("ok: the JSON facts agree with Python and mpirun")
EOF

# ---- under mpirun: both ranks, their binding gathered to rank 0 -------------------------------
run 120 np2 "${clean[@]}" "$mpiexec" "${mpi_flags[@]}" -np 2 "$bin" env
expect_rc np2 0
has_out np2 "Launcher: mpirun, 2 rank(s) on 1 host(s)" "rank  local  host"
host=$(grep -A3 'rank  local  host' "$tmp/np2.out" | awk '$1 == "0" {print $3}')
[[ -n $host ]] || { show np2; fail "np2: no row for rank 0"; }
for r in 0 1; do
  grep -qE "^  $r +$r/2 +$host +(cpu|cuda:[0-9]+) " "$tmp/np2.out" || { show np2; fail "np2: no binding row for rank $r"; }
done
[[ $(grep -c 'Result:' "$tmp/np2.out") == 1 ]] || { show np2; fail "np2: printed by more than rank 0"; }
run 120 np2json "${clean[@]}" "$mpiexec" "${mpi_flags[@]}" -np 2 "$bin" env --json
expect_rc np2json 0
"$py" - "$tmp/np2json.out" <<'EOF' || { show np2json; fail "mpirun -np 2 dtrain env --json: wrong ranks"; }
import json, sys
d = json.load(open(sys.argv[1]))
assert d["launcher"] == "mpirun" and d["world"] == 2, d
assert [r["rank"] for r in d["ranks"]] == [0, 1], d["ranks"]
assert [r["local_rank"] for r in d["ranks"]] == [0, 1], d["ranks"]
for r in d["ranks"]:
    assert r["world"] == 2 and r["local_world"] == 2 and r["host"] and r["cpus"], r
    assert r["threads"] >= 1 and r["cpu_count"] >= 1, r
EOF
echo "ok: mpirun -np 2: both ranks and their bindings on rank 0"

# ---- Slurm's numbers against MPI's ---------------------------------------------------------
# A task of an srun step (with a PMI rank) that MPI sees alone: training would stop (the launch
# check), exit 1.
run 60 srun "${clean[@]}" SLURM_JOB_ID=7 SLURM_STEP_ID=0 SLURM_PROCID=0 SLURM_LOCALID=0 SLURM_NTASKS=2 PMI_RANK=0 \
  "$bin" env
expect_rc srun 1
has_out srun "error: the MPI/PMI setup is wrong: srun started this process as task 0 of 2" \
  "srun --mpi=pmix" "Result: 1 problem(s) above would stop training (exit 1)"
run 60 srunjson "${clean[@]}" SLURM_JOB_ID=7 SLURM_STEP_ID=0 SLURM_PROCID=0 SLURM_LOCALID=0 SLURM_NTASKS=2 PMI_RANK=0 \
  "$bin" env --json
expect_rc srunjson 1
"$py" -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["exit_code"] == 1 and d["launcher"] == "srun" and any(h["stops"] for h in d["hints"]), d' \
  "$tmp/srunjson.out" || { show srunjson; fail "srun mismatch: JSON"; }
# The same variables in a batch script (no srun step): it would train as one rank: advice, exit 0.
run 60 batch "${clean[@]}" SLURM_JOB_ID=7 SLURM_PROCID=0 SLURM_NTASKS=2 "$bin" env
expect_rc batch 0
has_out batch "advice: Slurm's job has 2 tasks (SLURM_NTASKS)" "Launcher: none"
echo "ok: srun task 0 of 2 alone in MPI: error, exit 1; in a batch script: advice, exit 0"

# ---- CUDA_VISIBLE_DEVICES, run.device from a config, bad input ---------------------------------
run 60 visible "${clean[@]}" CUDA_VISIBLE_DEVICES=3,5 "$bin" env
expect_rc visible 0
has_out visible "CUDA_VISIBLE_DEVICES: '3,5'"
if [[ $gpus_here == 0 ]]; then
  run 60 wantcuda "${clean[@]}" "$bin" env "$cfg" run.device=cuda
  expect_rc wantcuda 1
  has_out wantcuda "error: run.device is cuda but no CUDA device is visible"
  run 60 wantcpu "${clean[@]}" "$bin" env "$cfg" run.device=cpu
  expect_rc wantcpu 0
  echo "ok: run.device cuda without a GPU: exit 1"
fi
run 60 nodata "${clean[@]}" "$bin" env "$src/configs/fashion_mnist.yaml" data.path="$tmp/no-data"
expect_rc nodata 1
has_out nodata "error: data.path: no such folder: $tmp/no-data"
echo "ok: a config whose data.path is missing: exit 1, naming data.path"
run 60 badkey "${clean[@]}" "$bin" env "$cfg" run.device=gpu
[[ $rc != 0 ]] || { show badkey; fail "a bad run.device: exit 0"; }
grep -qF "run.device" "$tmp/badkey.err" || { show badkey; fail "the error does not name run.device"; }
run 60 full "${clean[@]}" bash -c "exec '$bin' env >/dev/full"
[[ $rc != 0 ]] || fail "dtrain env >/dev/full: exit 0"
grep -qF "writing standard output failed" "$tmp/full.err" || { show full; fail "no error for a full stdout"; }
echo "ok: CUDA_VISIBLE_DEVICES shown; bad config and full stdout are errors"

# ---- help and version ----------------------------------------------------------------------
run 30 help "$bin" --help
expect_rc help 0
has_out help "dtrain env"
run 30 envhelp "$bin" env --help
expect_rc envhelp 0
has_out envhelp "--json" "dtrain env"
run 30 version "$bin" --version
expect_rc version 0
[[ $(wc -l <"$tmp/version.out") == 1 ]] || { show version; fail "--version is not one line"; }
if [[ $cuda_build == 1 ]]; then
  grep -qE ', CUDA [0-9]+\.[0-9]+ \+ NCCL [0-9]+\.[0-9]+\.[0-9]+' "$tmp/version.out" || { show version; fail "--version lacks CUDA and NCCL"; }
else
  has_out version "CPU only"
fi
echo "ok: --help names dtrain env; --version: $(cat "$tmp/version.out")"

# ---- a CPU build on a "machine with GPUs": the stand-in NVML -------------------------------
if [[ $cuda_build == 0 && -n ${DTRAIN_FAKE_NVML:-} ]]; then
  fake_dir=$(dirname "$DTRAIN_FAKE_NVML")
  [[ -f $fake_dir/libnvidia-ml.so.1 ]] || fail "no stand-in NVML at $fake_dir"
  run 60 fake "${clean[@]}" LD_LIBRARY_PATH="$fake_dir" "$bin" env
  expect_rc fake 0
  has_out fake "Fake GPU H200" "Fake GPU A100" "0000:19:00.0" "0000:3B:00.0" "555.42.06, supports CUDA 12.5" \
    "1.00 GiB / 80.00 GiB" "37%" \
    "advice: NVML sees 2 GPU(s) but this dtrain was built with a CPU-only LibTorch"
  grep -qE '^  0 +- +Fake GPU H200 +9\.0 ' "$tmp/fake.out" || { show fake; fail "fake: the GPU row"; }
  run 60 fakecuda "${clean[@]}" LD_LIBRARY_PATH="$fake_dir" "$bin" env "$cfg" run.device=cuda
  expect_rc fakecuda 1
  has_out fakecuda "error: run.device is cuda but no CUDA device is visible (this dtrain was built with a CPU-only LibTorch)"
  echo "ok: a CPU-only build where NVML sees GPUs: advice (exit 0); run.device cuda there: exit 1"
fi
echo "PASS"
