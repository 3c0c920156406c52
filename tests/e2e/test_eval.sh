#!/usr/bin/env bash
# e2e: evaluation inside epochs and top-5 accuracy. A 10-class synthetic MLP under mpirun -np 2
# and -np 1 with train.eval_every_steps=6 and epochs of 16 steps evaluates at steps 6, 12, 16
# (the epoch's end, once), 18, 24, 30 and 32; every eval record holds the whole test split, a
# top-5 accuracy at least the top-1 accuracy, and the loss read just before it; both world sizes
# agree. Without a test split, or below 0, the key is refused by name.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
e2e_setup eval
e2e_torch_python
cfg=$src/configs/synthetic_linear.yaml
common=(run.dir="$tmp/runs" run.log_every=0 model.name=mlp model.hidden=32 train.loss=cross_entropy
        data.synthetic_task=classification data.synthetic_features=20 data.synthetic_classes=10
        data.synthetic_size=1024 train.global_batch=64 train.epochs=2
        train.optimizer=adamw train.lr=0.01)

for np in 2 1; do
  run 300 "np$np" "$mpiexec" "${mpi_flags[@]}" -np "$np" "$bin" "$cfg" "${common[@]}" data.synthetic_test_size=256 train.eval_every_steps=6 run.name="np$np"
  [[ $rc == 0 ]] || { show "np$np"; fail "$np rank(s): exit $rc"; }
  grep -qE "test accuracy [0-9.]+%  top-5 [0-9.]+%" "$tmp/np$np.out" "$tmp/np$np.err" ||
    { show "np$np"; fail "$np rank(s): no evaluation line with a top-5 accuracy"; }
  grep -qE "^final test accuracy: [0-9.]+%, top-5 [0-9.]+% \(loss" "$tmp/runs/np$np/report.txt" ||
    fail "$np rank(s): report.txt has no final top-5 accuracy"
done

"$py" - "$tmp/runs/np2/metrics.jsonl" "$tmp/runs/np1/metrics.jsonl" <<'PY' || fail "the eval records are not as expected"
import json, sys
def evals(path):
    recs = [json.loads(l) for l in open(path)]
    reads = {r["step"] for r in recs if r["type"] == "train"}
    out = [r for r in recs if r["type"] == "eval"]
    for r in out:
        assert r["test_count"] == 256, r
        assert 0 <= r["test_accuracy"] <= r["test_top5_accuracy"] <= 1, r
        assert r["step"] in reads, ("no loss read before the evaluation at", r["step"])
    summary = recs[-1]
    assert summary["type"] == "summary" and summary["test_top5_accuracy"] == out[-1]["test_top5_accuracy"], summary
    return out
two, one = evals(sys.argv[1]), evals(sys.argv[2])
steps = [r["step"] for r in two]
assert steps == [6, 12, 16, 18, 24, 30, 32], steps
assert [r["step"] for r in one] == steps
assert [r["epoch"] for r in two] == [1, 1, 1, 2, 2, 2, 2]
for a, b in zip(two, one):  # the same training on 1 and 2 ranks, up to float rounding
    assert abs(a["test_loss"] - b["test_loss"]) <= 1e-4 * abs(b["test_loss"]), (a, b)
    assert abs(a["test_top5_accuracy"] - b["test_top5_accuracy"]) <= 2 / 256, (a, b)
assert two[-1]["test_top5_accuracy"] > 0.8, two[-1]  # learnt (chance: 0.5)
print("evaluations at", steps, "top-5", [round(r["test_top5_accuracy"], 3) for r in two])
PY
echo "ok: train.eval_every_steps=6 evaluates at steps 6-32 on 2 and 1 ranks alike, with top-5 accuracy"

run 60 notest "$bin" "$cfg" "${common[@]}" run.name=notest data.synthetic_test_size=0 train.eval_every_steps=4
[[ $rc == 1 ]] || { show notest; fail "no test split: exit $rc, expected 1"; }
grep -q "train.eval_every_steps.*no test split" "$tmp/notest.err" || { show notest; fail "no test split: the error does not name train.eval_every_steps"; }
run 60 negative "$bin" "$cfg" "${common[@]}" run.name=negative data.synthetic_test_size=256 train.eval_every_steps=-1
[[ $rc == 1 ]] || { show negative; fail "train.eval_every_steps=-1: exit $rc, expected 1"; }
grep -q "train.eval_every_steps.*must be >= 0" "$tmp/negative.err" || { show negative; fail "-1: the error does not name the key"; }
echo "ok: no test split and a negative value are refused naming train.eval_every_steps"
echo "PASS"
