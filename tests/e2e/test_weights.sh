#!/usr/bin/env bash
# e2e: weights for Python through the dtrain CLI, with Debian's python3-torch and the twins in
# python/dtrain_models.py. A twin's torch.save(model.state_dict()) starts a 2-rank run through
# model.init_weights (rank 0 loads, the Trainer broadcasts); the run leaves run_dir/model.pt,
# which torch.load opens and the twin loads strictly, and which holds the starting weights (the
# learning rate is 1e-12). A file that is not a state_dict ends the run with an error naming it.
# Env (set by ctest; defaults for a manual run): DTRAIN_BIN, DTRAIN_SOURCE_DIR, DTRAIN_MPIEXEC,
# DTRAIN_MPI_FLAGS, DTRAIN_REF_PYTHON.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
e2e_setup weights
e2e_torch_python

# The twin of model.name=mlp model.hidden=16 on 12 features and 4 classes, randomized.
"$py" - "$src/python" "$tmp/init.pt" <<'PY' || fail "the twin could not save its state_dict"
import sys
sys.path.insert(0, sys.argv[1])
import torch, dtrain_models
torch.manual_seed(1)
m = dtrain_models.Mlp(12, (16,), 4)
with torch.no_grad():
    for p in m.parameters():
        p.normal_(0.0, 0.5)
torch.save(m.state_dict(), sys.argv[2])
PY

args=(run.dir="$tmp/runs" data.format=synthetic data.synthetic_task=classification
      data.synthetic_features=12 data.synthetic_classes=4 data.synthetic_size=256
      data.synthetic_test_size=64 data.workers=0 model.name=mlp model.hidden=16
      train.loss=cross_entropy train.optimizer=sgd train.lr=1e-12 train.global_batch=64
      train.epochs=1 train.max_steps=2)
printf 'run:\n  name: w\n' >"$tmp/w.yaml"
run 180 start "$mpiexec" "${mpi_flags[@]}" -np 2 "$bin" "$tmp/w.yaml" "${args[@]}" \
  model.init_weights="$tmp/init.pt" run.name=w
[[ $rc == 0 ]] || { show start; fail "start: exited with code $rc"; }
grep -qF "model.init_weights: loaded $tmp/init.pt" "$tmp/start.out" ||
  { show start; fail "start: no 'model.init_weights: loaded' line"; }
[[ -s $tmp/runs/w/model.pt ]] || { show start; fail "no $tmp/runs/w/model.pt"; }
grep -qF "weights for Python: $tmp/runs/w/model.pt" "$tmp/start.out" ||
  { show start; fail "start: no 'weights for Python' line"; }
echo "ok: 2 ranks started from a twin's state_dict and wrote model.pt"

"$py" - "$src/python" "$tmp/runs/w/model.pt" "$tmp/init.pt" <<'PY' || fail "model.pt check failed"
import sys
sys.path.insert(0, sys.argv[1])
import torch, dtrain_models
sd = torch.load(sys.argv[2])
torch.load(sys.argv[2], weights_only=True)
m = dtrain_models.Mlp(12, (16,), 4)
m.load_state_dict(sd)  # strict
init = torch.load(sys.argv[3])
assert sorted(sd) == sorted(init), (sorted(sd), sorted(init))
diff = max(float((sd[k] - init[k]).abs().max()) for k in sd)
assert diff < 1e-6, "model.pt is %g away from the starting weights" % diff
x = torch.randn(5, 12)
ref = dtrain_models.Mlp(12, (16,), 4)
ref.load_state_dict(init)
assert torch.allclose(m(x), ref(x), atol=1e-5)
print("model.pt: %d tensors, max |model.pt - init| = %g" % (len(sd), diff))
PY
echo "ok: torch.load + load_state_dict(strict) of model.pt; it holds the starting weights"

# Not a state_dict: an error naming the file, on every launch (1 rank).
echo "not weights" >"$tmp/bad.pt"
run 120 bad "$bin" "$tmp/w.yaml" "${args[@]}" model.init_weights="$tmp/bad.pt" run.name=bad
[[ $rc != 0 ]] || fail "bad: a text file as model.init_weights did not fail"
grep -qF "$tmp/bad.pt" "$tmp/bad.err" || { show bad; fail "bad: the error does not name the file"; }
[[ ! -e $tmp/runs/bad/model.pt ]] || fail "bad: a failed run wrote model.pt"
echo "ok: a text file as model.init_weights: $(grep -m1 error "$tmp/bad.err")"
echo "PASS"
