#!/usr/bin/env bash
# e2e: every model-bearing file of a run is the model it says it is, and the numbers given for it
# are its own (issue 49, point 3). On 2 ranks:
#   - an early stop (train.monitor, train.early_stop_patience, evaluations every 10 steps) is the
#     run's end: a complete checkpoint of the stop step that records it (state.pt's
#     stopped_early, read with PyTorch), model.pt equal to that checkpoint's, model.json naming
#     the step, the early stop and the evaluation of that step (metrics.jsonl's), the log's
#     weights line the step; the same command run again, also with more train.epochs, is refused
#     (exit 1, one line naming the step and the fix) and leaves every file as it was; a raised
#     train.early_stop_patience trains on from that checkpoint;
#   - `dtrain eval --json` of model.pt and of best/model.pt gives model.json's and best.json's
#     numbers;
#   - a finished run trained on and stopped by SIGUSR1: exit 75, its stop line names the step the
#     untouched model.pt still holds (model.json's) and the checkpoint of the stop step, and
#     report.txt presents no older evaluation as the final model's.
# Env as in the other e2e scripts (DTRAIN_BIN, DTRAIN_SOURCE_DIR, DTRAIN_MPIEXEC, DTRAIN_MPI_FLAGS,
# DTRAIN_REF_PYTHON).
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
e2e_setup run_end
e2e_torch_python
cfg=$src/configs/synthetic_linear.yaml
np2=("$mpiexec" "${mpi_flags[@]}" -np 2 "$bin")
# 2048 samples of 4 classes, global batch 128: 16 steps per epoch, 640 in 40 epochs.
cls=(run.dir="$tmp/runs" run.name=es data.synthetic_task=classification data.synthetic_classes=4
     train.loss=cross_entropy data.synthetic_size=2048 data.synthetic_test_size=512 run.log_every=0
     train.monitor=test_accuracy checkpoint.keep_best=true train.eval=false train.eval_every_steps=10)
files() { (cd "$tmp/runs/$1" && find . -type f ! -name .lock -exec md5sum {} + | sort); }

# 1. The early stop ends the run: its checkpoint, model.pt and model.json are of the stop step.
run 300 es "${np2[@]}" "$cfg" "${cls[@]}" train.epochs=40 train.early_stop_patience=1
[[ $rc == 0 ]] || { show es; fail "the early-stopped run: exit $rc"; }
step=$(sed -nE "s/^early stop: test_accuracy has not improved on its best, [0-9.]+% at step [0-9]+, for 1 evaluation in a row \(train.early_stop_patience 1, now [0-9.]+%\): training ends after step ([0-9]+); model.pt will hold this step's weights, best\/model.pt step [0-9]+'s$/\1/p" "$tmp/es.out" | head -1)
[[ -n $step ]] || { show es; fail "the run did not stop early, or its line is not in the metric's terms"; }
# The early stop in the user's terms (issue 54, point 1): the rule at the start, the reason once
# more at the end, no hook names.
grep -qF "early stopping: training ends once test_accuracy (higher is better) has gone 1 evaluation in a row without improving on its best (train.early_stop_patience); evaluations every 10 steps" "$tmp/es.out" ||
  { show es; fail "no line saying the early-stopping rule"; }
grep -qE "^stopped after step $step of 640: early stop: test_accuracy has not improved on its best, [0-9.]+% at step" "$tmp/es.out" ||
  { show es; fail "the summary does not say why the run stopped in the metric's terms"; }
! grep -qE "hook|evaluation\(s\)" "$tmp/es.out" || { show es; fail "hook jargon in the early stop's lines"; }
grep -qF "weights for Python: $tmp/runs/es/model.pt (step $step of 640, an early stop;" "$tmp/es.out" ||
  { show es; fail "the weights line does not name step $step and the early stop"; }
"$py" - "$tmp/runs/es" "$step" <<'PY' || fail "the early stop's files are not of its step"
import json, os, sys, torch
rundir, step = sys.argv[1], int(sys.argv[2])
ck = f"{rundir}/checkpoints/step-{step:09d}"
assert os.path.exists(f"{ck}/COMPLETE"), f"no complete checkpoint of the stop step {step}"
st = torch.load(f"{ck}/state.pt", weights_only=False)  # typed dicts
assert st["step"] == step and st["stopped_early"] == 1, (st["step"], st.get("stopped_early"))
assert st["stop_reason"].startswith("early stop: test_accuracy has not improved on its best, "), st["stop_reason"]
a, b = torch.load(f"{rundir}/model.pt"), torch.load(f"{ck}/model.pt")
assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), "model.pt is not the checkpoint's model"
m = json.load(open(f"{rundir}/model.json"))
recs = [json.loads(l) for l in open(f"{rundir}/metrics.jsonl")]
last = [r for r in recs if r["type"] == "eval"][-1]
assert last["step"] == step, (last["step"], step)  # the stop came at that evaluation
want = {"weights": "model.pt", "step": step, "epoch": (step - 1) // 16 + 1, "steps_per_epoch": 16,
        "total_steps": 640, "ended": "early stop", "stop_reason": st["stop_reason"], "stopped_by_rank": 0,
        "evaluation": {"step": step, "test_count": 512, "test_loss": last["test_loss"],
                       "test_accuracy": last["test_accuracy"]},
        "checkpoint": ck}
assert m == want, (m, want)
summary = recs[-1]
assert summary["type"] == "summary" and summary["eval_step"] == step and summary["checkpoint_step"] == step, summary
print(f"early stop at step {step}: checkpoint, model.pt and model.json of that step, its evaluation {m['evaluation']}")
PY
echo "ok: the early stop at step $step wrote a checkpoint that records it, and model.pt + model.json of that step"

# 2. The same command again, also with more epochs: refused before the data, nothing changes.
before=$(files es)
for epochs in 40 80; do
  name=es_again$epochs
  run 120 $name "${np2[@]}" "$cfg" "${cls[@]}" train.epochs=$epochs train.early_stop_patience=1
  [[ $rc == 1 ]] || { show $name; fail "$name: an early-stopped run run again: exit $rc, expected 1"; }
  for s in "this run has finished: its checkpoint is at step $step, where it stopped early (early stop: test_accuracy" \
           "nothing was written" "More train.epochs or train.max_steps do not train on" \
           "change its rule: train.early_stop_patience (1 now; raise it, or 0 for no early stopping) or train.monitor"; do
    grep -qF -- "$s" "$tmp/$name.err" || { show $name; fail "$name: the error lacks '$s'"; }
  done
  [[ $(grep -c "error: " "$tmp/$name.err") == 1 ]] || { show $name; fail "$name: the error is not printed once"; }
  ! grep -q "^data: " "$tmp/$name.out" || { show $name; fail "$name: the data was loaded before the refusal"; }
  [[ $(files es) == "$before" ]] || { diff <(echo "$before") <(files es) >&2 || true; fail "$name: the run's files changed"; }
done
echo "ok: run again (train.epochs 40 and 80): refused, nothing trained or rewritten"

# 3. dtrain eval of model.pt and of best/model.pt gives model.json's and best.json's numbers.
run 300 eval_model "${np2[@]}" eval "$cfg" "${cls[@]}" --json
[[ $rc == 0 ]] || { show eval_model; fail "dtrain eval of model.pt: exit $rc"; }
run 300 eval_best "${np2[@]}" eval "$cfg" "${cls[@]}" --json --weights "$tmp/runs/es/best/model.pt"
[[ $rc == 0 ]] || { show eval_best; fail "dtrain eval of best/model.pt: exit $rc"; }
"$py" - "$tmp/runs/es" "$tmp/eval_model.out" "$tmp/eval_best.out" <<'PY' || fail "dtrain eval disagrees with model.json or best.json"
import json, sys
rundir, of_model, of_best = sys.argv[1:4]
m = json.load(open(f"{rundir}/model.json"))["evaluation"]
best = json.load(open(f"{rundir}/best/best.json"))
recs = [json.loads(l) for l in open(f"{rundir}/metrics.jsonl")]
at_best = [r for r in recs if r["type"] == "eval" and r["step"] == best["step"]][-1]
assert best["value"] == at_best["test_accuracy"] == best["evaluation"]["test_accuracy"], (best, at_best)
assert best["evaluation"]["step"] == best["step"] and best["epoch"] == at_best["epoch"], best
for name, out, want in (("model.pt", of_model, m), ("best/model.pt", of_best, best["evaluation"])):
    got = json.loads(open(out).read())
    for k in ("test_loss", "test_accuracy", "test_count"):
        assert abs(got[k] - want[k]) <= 1e-6 * max(1.0, abs(want[k])), (name, k, got[k], want[k])
    print(f"dtrain eval {name}: {got['test_accuracy']:.6f} / {got['test_loss']:.6f}, as its record (step {want['step']})")
PY
echo "ok: dtrain eval gives model.json's numbers for model.pt and best.json's for best/model.pt"

# 4. Under another rule (a higher patience) the early-stopped run trains on from its checkpoint.
run 300 es_on "${np2[@]}" "$cfg" "${cls[@]}" train.epochs=40 train.early_stop_patience=4
[[ $rc == 0 ]] || { show es_on; fail "training on with train.early_stop_patience 4: exit $rc"; }
grep -qF "the run stopped early at step $step (early stop: test_accuracy" "$tmp/es_on.out" &&
  grep -qF "train.early_stop_patience 1 -> 4 now: it trains on from there" "$tmp/es_on.out" ||
  { show es_on; fail "es_on: the log does not say the early-stopped run trains on"; }
grep -q "resumed from .*step-0*$step at step $step" "$tmp/es_on.out" || { show es_on; fail "es_on: not resumed at step $step"; }
on=$("$py" -c 'import json, sys; print(json.load(open(sys.argv[1]))["step"])' "$tmp/runs/es/model.json")
(( on > step )) || fail "es_on: model.json is at step $on, not past $step"
echo "ok: train.early_stop_patience 1 -> 4 trained on from step $step to $on"

# 5. A finished run trained on and stopped by SIGUSR1 (to mpirun, which passes it on).
reg=(run.dir="$tmp/runs" run.name=ext data.synthetic_size=2048 run.log_every=20 data.workers=0 run.timeout_s=60)
run 120 ext "${np2[@]}" "$cfg" "${reg[@]}" train.epochs=2
[[ $rc == 0 ]] || { show ext; fail "the first run: exit $rc"; }
model_md5=$(md5sum <"$tmp/runs/ext/model.pt")
timeout -k 10 120 "${np2[@]}" "$cfg" "${reg[@]}" train.epochs=300 >"$tmp/ext_more.out" 2>"$tmp/ext_more.err" &
job=$!
newest() { ls "$tmp/runs/ext/checkpoints" | sort | tail -1; }
for _ in $(seq 1 600); do [[ $(newest) > step-000000048 ]] && break; sleep 0.1; done
[[ $(newest) > step-000000048 ]] || { kill $job || true; fail "ext_more: no checkpoint past step 48"; }
kill -USR1 "$(pgrep -P $job | head -1)"  # mpirun (timeout's child) passes SIGUSR1 on to the ranks
rc=0
wait $job || rc=$?
[[ $rc == 75 ]] || { show ext_more; fail "ext_more: SIGUSR1 while training on: exit $rc, expected 75"; }
stop=$(sed -nE 's/.*stopped by SIGUSR1 after step ([0-9]+) of 4800.*/\1/p' "$tmp/ext_more.out" | head -1)
[[ -n $stop ]] || { show ext_more; fail "ext_more: no stop line"; }
ck=$(printf '%s/runs/ext/checkpoints/step-%09d' "$tmp" "$stop")
grep -qF "stopped by SIGUSR1 after step $stop of 4800: checkpoint $ck written (the run has not ended: these weights are in it alone); $tmp/runs/ext/model.pt still holds step 32, the run's earlier end (model.json); run the same command again to resume (exit code 75)" \
  "$tmp/ext_more.out" || { show ext_more; fail "ext_more: the stop line does not say what model.pt and the checkpoint hold"; }
[[ -f $ck/COMPLETE && $(md5sum <"$tmp/runs/ext/model.pt") == "$model_md5" ]] || fail "ext_more: the files are not what the stop line says"
run 300 eval_ext "${np2[@]}" eval "$cfg" "${reg[@]}" --json
[[ $rc == 0 ]] || { show eval_ext; fail "dtrain eval of ext's model.pt: exit $rc"; }
"$py" - "$tmp/runs/ext" "$stop" "$tmp/eval_ext.out" <<'PY' || fail "ext_more: model.json or the report misstates a file's numbers"
import json, re, sys
rundir, stop, of_model = sys.argv[1], int(sys.argv[2]), sys.argv[3]
m = json.load(open(f"{rundir}/model.json"))
assert m["step"] == 32 and m["ended"] == "completed" and m["evaluation"]["step"] == 32, m
got = json.loads(open(of_model).read())
assert abs(got["test_loss"] - m["evaluation"]["test_loss"]) <= 1e-6 * max(1.0, m["evaluation"]["test_loss"]), (got, m)
recs = [json.loads(l) for l in open(f"{rundir}/metrics.jsonl")]
last = [r for r in recs if r["type"] == "eval"][-1]
summary = recs[-1]
assert summary["type"] == "summary" and summary["steps"] == stop and summary["eval_step"] == last["step"], summary
report = open(f"{rundir}/report.txt").read()
assert not re.search(r"^final test", report, re.M), "report.txt presents an evaluation as the final model's"
whose = "in the checkpoint; the run has not ended" if last["step"] == stop else f"not the last step's, {stop}, which none evaluated"
line = f"last evaluation, of step {last['step']}'s model ({whose}): test loss: {last['test_loss']:.6f}"
assert line in report, (line, report)
print(f"stopped at step {stop}: model.pt and model.json still of step 32 (dtrain eval agrees); report: {line}")
PY
echo "ok: SIGUSR1 while training on: the stop line and report.txt say what each file holds"
echo "PASS"
