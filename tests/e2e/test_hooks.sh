#!/usr/bin/env bash
# e2e: hooks written in C++. examples/custom_hook.cpp on 2 ranks stops early (every rank at the
# same step) and writes its CSV; a hook that throws on one rank only ends the whole job within
# seconds, with a message naming that rank, the hook and the step, and leaves no process behind.
# Env (set by ctest): DTRAIN_HOOK_EXAMPLE, DTRAIN_HOOK_THROWS (the two programs), DTRAIN_MPIEXEC.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
e2e_setup hooks
example=${DTRAIN_HOOK_EXAMPLE:?"DTRAIN_HOOK_EXAMPLE (build/examples/example_custom_hook) is not set"}
throws=${DTRAIN_HOOK_THROWS:?"DTRAIN_HOOK_THROWS (build/tests/dtrain_e2e_hook_throws) is not set"}
[[ -x $example && -x $throws ]] || fail "hook programs not built: $example $throws"

# The example: early stop on 2 ranks, and its CSV.
run 300 example "$mpiexec" "${mpi_flags[@]}" -np 2 "$example" run.dir="$tmp/runs"
[[ $rc == 0 ]] || { show example; fail "example_custom_hook exited with $rc"; }
grep -q "asks to stop after step" "$tmp/example.out" || { show example; fail "no hook asked to stop"; }
line=$(grep -E "^stopped after step [0-9]+ of [0-9]+" "$tmp/example.out") || { show example; fail "no 'stopped after step' line"; }
read -r done total < <(sed -E 's/^stopped after step ([0-9]+) of ([0-9]+).*/\1 \2/' <<<"$line")
(( done < total )) || fail "stopped at $done of $total: not early"
csv=$tmp/runs/custom_hook/loss.csv
[[ $(head -n1 "$csv") == "step,epoch,loss,lr" ]] || fail "$csv lacks its header"
rows=$(($(wc -l <"$csv") - 1))
(( rows >= 1 )) || fail "$csv has no rows"
last=$(tail -n1 "$csv" | cut -d, -f1)
(( last <= done )) || fail "$csv has step $last after the stop at $done"
echo "ok: custom_hook stopped every rank after step $done of $total; $rows CSV rows"

# A hook that throws on rank 1 only, after step 3.
start=$(date +%s)
run 120 throws "$mpiexec" "${mpi_flags[@]}" -np 2 "$throws"
took=$(($(date +%s) - start))
[[ $rc != 0 ]] || { show throws; fail "a throwing hook did not fail the job"; }
grep -q "\[rank 1\] error: hook 'thrower' failed in hooks: on_step at step 3: the hook gave up" "$tmp/throws.err" ||
  { show throws; fail "the error does not name rank 1, the hook and the step"; }
(( took < 60 )) || fail "the job took ${took} s to end after the hook threw"
sleep 1
# This build's processes (the binary's full path first), not a compiler's or another tree's.
if pgrep -f "^$throws( |\$)" >/dev/null; then fail "processes of $throws are still running"; fi
echo "ok: a hook throwing on rank 1 ended the job in ${took} s (exit $rc)"
echo "PASS"
