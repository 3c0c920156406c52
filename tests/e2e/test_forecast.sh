#!/usr/bin/env bash
# e2e: the scaling forecast (Note [scaling forecast], issue 54 point 7).
#   1. `dtrain bench --forecast` on one rank: the gradient engine runs for it
#      (dist.reduce_single_rank), the table has the presets' rows (nvlink 2/4/8, infiniband
#      16/32/64) and the assumptions, and PREFIX.json's forecast adds up: step = the step without
#      communication + the exposed time, efficiency = their ratio. --forecast-from gives the
#      same forecast again from that file, and docs/PERFORMANCE.md's 8-GPU figures from the files
#      behind them (docs/forecast/). Bad --link values, --link without --forecast and `--link
#      measured` on one rank fail with a line naming --link.
#   2. A training run's report.txt ends with the forecast.
#   3. The model against measurement, on CPU ranks over MPI: at N = 2 and 4 ranks, the forecast
#      made from one-rank runs with the link measured on N ranks (`--link measured`: the bench
#      times the job's MPI all-reduce at the bucket sizes and fits a bus bandwidth and a latency)
#      against the step the N-rank bench measured.
#
# How part 3 can be fair on a shared 2-core machine, and its tolerance:
#   - The forecast assumes every rank computes as the one-rank run did. N ranks on 2 cores do
#     not (4 ranks time-share them), so the one-rank runs the forecast comes from run as N copies
#     at once, each computing with the share of the cores one rank of the N-rank job has; the
#     forecast is the copies' mean. What is left to the model is the communication.
#   - dist.overlap=false: on CPUs MPI's reduction runs on the cores that backward needs, so an
#     all-reduce "hidden" behind backward slows it instead of costing nothing, as the model
#     assumes (and as it is on a GPU, whose collectives run beside its kernels). With overlap on,
#     2 ranks here ran 34-47% slower than forecast. The overlap's arithmetic is checked in
#     tests/unit/test_forecast.cpp on hand-made timelines.
#   - The model (per-rank batch 4, 4.2M parameters: 16 MiB of gradients in 4 buckets a step)
#     makes communication 40-70% of the step: a forecast that leaves it out misses by 36-72%.
#   - What the model leaves out only slows the measured step: the slowest rank of the N-rank job
#     sets its pace (the forecast assumes no straggler), and MPI's polling threads and other
#     processes take the cores the ranks need while they wait for each other. On this machine,
#     shared with other builds, the medians over the rounds ranged from -5% (load average about 3)
#     to -40% (about 6; single rounds +3% to -51%). So the tolerance is one-sided where the model
#     is: over the 5 rounds (each: the N-rank bench, then its copies), the median of the forecast's
#     error must lie between -45% and +15% of the measured step, and the median share of the
#     measured scaling overhead (the N-rank step less the one-rank step) that the forecast's
#     exposed communication explains must be at least 25% (the medians were 32% to 79%; a forecast
#     without communication explains none). On a machine to itself, a forecast that counted the bytes
#     twice would be high by about 30%, one that ran the buckets' collectives side by side
#     instead of one after another would explain under a quarter. ctest runs this test alone
#     (RUN_SERIAL): another test beside it would be the kind of load that lowers the medians.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
e2e_setup forecast
py=${DTRAIN_REF_PYTHON:-/usr/bin/python3}

cat >"$tmp/mlp.yaml" <<'EOF'
run:
  name: forecast
  seed: 0
  threads: 1
model:
  name: mlp
  hidden: [1024, 1024, 1024, 1024]
data:
  format: synthetic
  synthetic_task: classification
  synthetic_features: 1024
  synthetic_classes: 10
  synthetic_size: 4096
  synthetic_test_size: 256
  workers: 0
train:
  epochs: 1
  global_batch: 4
  optimizer: sgd
  lr: 0.01
  loss: cross_entropy
dist:
  bucket_cap_mb: 4
  first_bucket_mb: 1
  overlap: false
EOF
cfg=$tmp/mlp.yaml
cd "$tmp"

# 1. One rank, the presets.
run 120 one "$bin" bench "$cfg" --forecast --out "$tmp/one"
[[ $rc == 0 ]] || { show one; fail "bench --forecast exited with $rc"; }
grep -q "^--forecast on one rank: dist.reduce_single_rank=true" one.out || { show one; fail "no word on the gradient engine"; }
grep -q "^scaling forecast (a forecast from measured numbers, not a measurement" one.out ||
  { show one; fail "no forecast, or not marked as one"; }
for row in "nvlink +2 +1 " "nvlink +4 +1 " "nvlink +8 +1 " "infiniband +16 +2 " "infiniband +32 +4 " "infiniband +64 +8 "; do
  grep -qE "^  $row" one.out || { show one; fail "no forecast row '$row'"; }
done
grep -q "^  assumes: every rank computes as this one did" one.out || { show one; fail "no assumptions"; }
grep -q "^  overlap with backward: as in the bucket timeline" one.out || { show one; fail "the overlap is not the timeline's"; }
"$py" - "$tmp/one.json" <<'EOF' || fail "the forecast's JSON does not add up"
import json, sys
f = json.load(open(sys.argv[1]))["forecast"]
assert f["overlap"] == "measured", f["overlap"]
src = f["from"]
assert src["world"] == 1 and src["rank_batch"] == 4 and src["collective"] == "all_reduce", src
assert len(src["buckets"]) >= 4 and sum(b["bytes"] for b in src["buckets"]) >= 16 << 20, src["buckets"]
one = f["one_rank_step_s"]
assert abs(one - (src["step_s"] - src["comm_s"])) < 1e-12, (one, src)
assert [(r["link"], r["ranks"], r["nodes"]) for r in f["rows"]] == [
    ("nvlink", 2, 1), ("nvlink", 4, 1), ("nvlink", 8, 1),
    ("infiniband", 16, 2), ("infiniband", 32, 4), ("infiniband", 64, 8)], f["rows"]
for r in f["rows"]:
    assert abs(r["step_s"] - (one + r["exposed_s"])) < 1e-12, r
    assert abs(r["efficiency"] - one / r["step_s"]) < 1e-12, r
    # exposed may exceed the collectives' time: it starts from each bucket's launch, which with
    # dist.overlap=false comes after the end of backward (that gap is in comm_s too)
    assert r["exposed_s"] > 0 and r["collectives_s"] > 0, r
    # 16 MiB all-reduced over NVLink (360 GB/s): at least f(N) x 16 MiB / 360 GB/s in collectives
    if r["link"] == "nvlink":
        n = r["ranks"]
        assert r["collectives_s"] >= 2 * (n - 1) / n * (16 << 20) / 360e9, r
print("ok: the one-rank forecast adds up;", [(r["link"], r["ranks"], round(r["efficiency"], 4)) for r in f["rows"]])
EOF

# --forecast-from: the same forecast again from the saved measurements, nothing run; the inputs of
# docs/PERFORMANCE.md's tables give its numbers.
run 60 again "$bin" bench --forecast-from "$tmp/one.json" --link nvlink
[[ $rc == 0 ]] || { show again; fail "--forecast-from exited with $rc"; }
"$py" - "$tmp/one.json" "$tmp/again.out" <<'EOF' || fail "--forecast-from does not give the bench's forecast again"
import json, re, sys
rows = json.load(open(sys.argv[1]))["forecast"]["rows"]
text = open(sys.argv[2]).read()
for r in rows[:3]:
    # milliseconds as the table prints them: 3 decimals under 10 ms, else 2
    want = f"{1e3 * r['step_s']:.3f}" if r["step_s"] < 0.01 else f"{1e3 * r['step_s']:.2f}"
    assert re.search(rf"^  nvlink +{r['ranks']} +1 .* {want} +", text, re.M), (want, text)
print("ok: --forecast-from gives the same nvlink rows")
EOF
for f in gpt2_124m_h100:97 resnet50_h100:99; do
  run 60 "doc.${f%%:*}" "$bin" bench --forecast-from "$src/docs/forecast/${f%%:*}.json"
  [[ $rc == 0 ]] && grep -qE "^  nvlink +8 +1 .* ${f##*:}%$" "doc.${f%%:*}.out" ||
    { show "doc.${f%%:*}"; fail "docs/forecast/${f%%:*}.json: not ${f##*:}% at 8 GPUs, as docs/PERFORMANCE.md says"; }
done
run 60 fromconfig "$bin" bench "$cfg" --forecast-from "$tmp/one.json"
[[ $rc == 2 ]] && grep -q "forecast-from takes no config" fromconfig.err || { show fromconfig; fail "--forecast-from with a config: rc $rc"; }
echo '{"from": {"step_s": 0.01}}' >"$tmp/empty.json"
run 60 fromempty "$bin" bench --forecast-from "$tmp/empty.json"
[[ $rc == 1 ]] && grep -q "nothing to send" fromempty.err || { show fromempty; fail "--forecast-from without buckets or gradient bytes: rc $rc"; }
echo "ok: --forecast-from"

# Bad links: one line naming --link, exit 1.
run 60 badlink "$bin" bench "$cfg" --forecast --link warp-drive --out "$tmp/bad"
[[ $rc == 1 ]] && grep -q "\-\-link 'warp-drive': no preset named 'warp-drive'" badlink.err ||
  { show badlink; fail "--link warp-drive: rc $rc, or no line naming it"; }
run 60 badbus "$bin" bench "$cfg" --forecast --link bus=fast,step_us=3 --out "$tmp/bad"
[[ $rc == 1 ]] && grep -q "bus must be a number >= 0, got 'fast'" badbus.err ||
  { show badbus; fail "--link bus=fast: rc $rc, or no line naming it"; }
run 60 measured1 "$bin" bench "$cfg" --forecast --link measured --out "$tmp/bad"
[[ $rc == 1 ]] && grep -q "\-\-link measured: the collective is timed on this job's ranks" measured1.err ||
  { show measured1; fail "--link measured on one rank: rc $rc, or no line saying why"; }
run 60 noforecast "$bin" bench "$cfg" --link nvlink --out "$tmp/bad"
[[ $rc != 0 ]] && grep -q "forecast" noforecast.err || { show noforecast; fail "--link without --forecast: rc $rc"; }
echo "ok: bad --link values"

# 2. A training run's report.txt ends with the forecast (on a CPU, the log has no line of it).
run 120 train "$bin" "$cfg" train.max_steps=12 run.dir="$tmp/runs" train.eval=false
[[ $rc == 0 ]] || { show train; fail "training exited with $rc"; }
grep -q "^scaling forecast (a forecast" runs/forecast/report.txt || fail "report.txt has no forecast"
grep -qE "^  nvlink +8 +1 " runs/forecast/report.txt || fail "report.txt's forecast has no 8-GPU row"
grep -q "overlap with backward: none assumed" runs/forecast/report.txt ||
  fail "one rank without the gradient engine: the report does not say that no overlap is assumed"
! grep -q "^scaling forecast" train.out || fail "a CPU run's log carries the forecast line"
echo "ok: report.txt holds the forecast"

# 3. The model against measurement: 2 and 4 ranks, 5 rounds.
rounds=5
for r in $(seq $rounds); do
  for n in 2 4; do
    run 300 "m$n.$r" "$mpiexec" "${mpi_flags[@]}" -np $n "$bin" bench "$cfg" train.global_batch=$((4 * n)) \
      --forecast --link measured --out "$tmp/m$n.$r"
    [[ $rc == 0 ]] || { show "m$n.$r"; fail "the $n-rank bench exited with $rc"; }
    link=$("$py" -c "import json, sys; l = json.load(open(sys.argv[1]))['forecast']['links'][0]
assert l['name'] == 'measured', l
print('name=m%d,bus=%.6g,step_us=%.6g,ranks=%d' % ($n, l['bus_gbps'], l['step_us'], $n))" "$tmp/m$n.$r.json")
    pids=()
    for i in $(seq $n); do
      timeout -k 10 300 "$bin" bench "$cfg" --forecast --link "$link" --out "$tmp/c$n.$r.$i" \
        >"$tmp/c$n.$r.$i.out" 2>&1 &
      pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || fail "a one-rank copy of round $r ($n) failed: $(tail -3 "$tmp"/c$n.$r.*.out)"; done
  done
done
"$py" - "$tmp" $rounds <<'EOF' || fail "the forecast is not within the tolerance of the measured steps"
import json, statistics, sys
tmp, rounds = sys.argv[1], int(sys.argv[2])
LOW, HIGH = -0.45, 0.15  # the median error's bounds, of the measured step (see the header)
EXPLAINED = 0.25         # the median share of the scaling overhead the forecast explains
ok = True
for n in (2, 4):
    errs, no_comm, explained = [], [], []
    for r in range(1, rounds + 1):
        m = json.load(open(f"{tmp}/m{n}.{r}.json"))
        measured = m["rows"][0]["step_mean_s"]
        copies = [json.load(open(f"{tmp}/c{n}.{r}.{i}.json"))["forecast"] for i in range(1, n + 1)]
        for c in copies:
            assert [(x["link"], x["ranks"]) for x in c["rows"]] == [(f"m{n}", n)], c["rows"]
        forecast = statistics.mean(c["rows"][0]["step_s"] for c in copies)
        one = statistics.mean(c["one_rank_step_s"] for c in copies)
        exposed = statistics.mean(c["rows"][0]["exposed_s"] for c in copies)
        link = m["forecast"]["links"][0]
        errs.append(forecast / measured - 1)
        no_comm.append(one / measured - 1)
        explained.append(exposed / max(measured - one, 1e-9))
        print(f"{n} ranks, round {r}: forecast {1e3 * forecast:.2f} ms ({1e3 * one:.2f} without "
              f"communication + {1e3 * exposed:.2f} exposed; link {link['bus_gbps']:.3g} GB/s, "
              f"{link['step_us']:.3g} us a ring step), measured {1e3 * measured:.2f} ms "
              f"(communication {1e3 * m['forecast']['from']['comm_s']:.2f}): "
              f"{100 * errs[-1]:+.1f}%, without communication {100 * no_comm[-1]:+.1f}%, "
              f"explains {100 * explained[-1]:.0f}% of the overhead")
    e, c, x = statistics.median(errs), statistics.median(no_comm), statistics.median(explained)
    print(f"{n} ranks: median error {100 * e:+.1f}% (bounds {100 * LOW:+.0f}% to {100 * HIGH:+.0f}%), "
          f"without communication {100 * c:+.1f}%; explains {100 * x:.0f}% of the scaling overhead "
          f"(at least {100 * EXPLAINED:.0f}%)")
    if not LOW <= e <= HIGH:
        print(f"FAIL: {n} ranks: the forecast's median error {100 * e:+.1f}% is outside the bounds")
        ok = False
    if x < EXPLAINED:
        print(f"FAIL: {n} ranks: the forecast explains {100 * x:.0f}% of the measured scaling overhead")
        ok = False
sys.exit(0 if ok else 1)
EOF
echo "ok: the scaling forecast against measured steps on 2 and 4 CPU ranks"
