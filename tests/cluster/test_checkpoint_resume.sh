#!/usr/bin/env bash
# cluster tier: a checkpoint written by 4 ranks on 2 nodes (2 each, launch/mpirun-hosts.sh), at a
# stop: SIGTERM to mpirun-hosts.sh on node 1 becomes SIGUSR1, which mpirun forwards to every rank
# on both nodes; each checkpoints at the same step and exits 75. Then
#   - the same command on the same 2 nodes resumes it, and it ends bit for bit as an uninterrupted
#     4-rank run on the 2 nodes (model and optimizer state, PyTorch's torch.load);
#   - 1 rank alone on node 2 resumes the same checkpoint (checkpoint.resume=PATH, a run of its
#     own), and it ends with the uninterrupted run's parameters within 1e-5 relative.
# Env (set by ctest): DTRAIN_BIN, DTRAIN_SOURCE_DIR, DTRAIN_REF_PYTHON.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cluster_setup resume 2

# The tier's recipe (SGD with momentum: 1 rank and 4 differ by rounding alone).
common=("${recipe[@]}" run.log_every=5 train.max_steps=60 train.global_batch=128
        checkpoint.every_steps=30)

# ---- the stop: SIGTERM to mpirun-hosts.sh while the 4 ranks train -------------------------------
hosts_start 120 stopped "$hostfile" "$cfg" "${common[@]}"
sleep 0.5
script=$(pgrep -f "^bash $src/launch/mpirun-hosts.sh --hostfile $hostfile" | head -1)
[[ -n $script ]] || fail "mpirun-hosts.sh's process not found"
kill -TERM "$script"
rc=0
wait "$job" || rc=$?
[[ $rc == 75 ]] || { show stopped; fail "SIGTERM to mpirun-hosts.sh: exit $rc, expected 75 (a checkpoint, then stop)"; }
step=$(sed -nE 's/.*stopped by SIG[A-Z0-9]+ after step ([0-9]+).*/\1/p' "$tmp/stopped.out" | head -1)
[[ -n $step ]] || { show stopped; fail "the stopped run does not say where it stopped"; }
((step < 60)) || fail "the run ended (step $step) before the stop reached it"
ck=$(checkpoint stopped "$step")
for r in 0 1 2 3; do
  [[ -f $(printf '%s/rank-%05d.pt' "$ck" "$r") ]] || fail "$ck lacks rank $r's file"
done
grep -h "stopped by SIG" "$tmp/stopped.out"
echo "ok: SIGTERM to mpirun-hosts.sh on node 1: 4 ranks on 2 nodes wrote $ck, exit 75"

# ---- resumed on the same 2 nodes, against an uninterrupted run ---------------------------------
hosts_run 120 stopped-resume "$hostfile" "$cfg" "${common[@]}" run.name=stopped
[[ $rc == 0 ]] || { show stopped-resume; fail "resuming on 2 nodes: exit $rc"; }
grep -q "resumed from $ck at step $step" "$tmp/stopped-resume.out" ||
  { show stopped-resume; fail "the resumed run does not say it resumed from $ck"; }
hosts_run 120 whole "$hostfile" "$cfg" "${common[@]}" run.name=whole
[[ $rc == 0 ]] || { show whole; fail "the uninterrupted run: exit $rc"; }
end_whole=$(checkpoint whole 60)
end_resumed=$(checkpoint stopped 60)
same_model "$end_resumed" "$end_whole"
echo "ok: resumed at step $step on the 2 nodes, it ends bit for bit as the uninterrupted run"

# ---- resumed by 1 rank on node 2 --------------------------------------------------------------
run 120 one "$cluster_here/on-node.sh" dtrain-n2 "$bin" "$cfg" "${common[@]}" run.name=one \
  checkpoint.resume="$ck"
[[ $rc == 0 ]] || { show one; fail "resuming with 1 rank on node 2: exit $rc"; }
grep -q "resumed from $ck at step $step" "$tmp/one.out" || { show one; fail "the 1-rank run does not say it resumed from $ck"; }
grep -q "world 1 rank(s) on 1 host: dtrain-n2 (rank 0)" "$tmp/one.out" || { show one; fail "the 1-rank run is not on dtrain-n2"; }
grep -h "resumed from" "$tmp/one.out" "$tmp/one.err" | head -3
end_one=$(checkpoint one 60)
moved "$ck" "$end_one"
close_model "$end_one" "$end_whole"
echo "ok: the 4-rank checkpoint of step $step resumed by 1 rank on node 2 ends with the uninterrupted run's parameters"
echo "PASS"
