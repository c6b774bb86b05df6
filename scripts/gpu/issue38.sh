#!/usr/bin/env bash
# On the GPU host after install-on-gpu-host.sh: issue 38 item 6 at Kimi scale, as one resumable job (run it under
# scripts/gpu/detached.sh so that it outlives one call; results in /tmp/res38, copied to $OUT/issue38.tgz each call):
#   starts  item 6(a): profiles/kimi-k2.6-rank-h200-starts.toml over its 3 server starts (no-spec and FLASHMLA/fp8
#           k = 3 at 8x1024x256, 3 blocks a start): do the starts agree within their stated precision (starts.md)?
#   ab      item 6(b): `bench ab`, the candidate busy-waiting DELAY_MS once every engine step (default 0.45 ms: ~5%
#           of the ~9.5 ms FLASHMLA step the H100 of 2026-12-07's second lease ran, ~6% of the first's 7.55 ms).
#           A slept 0.4 ms made that step 2.54 ms longer (reports/examples/kimi-rank-h100-l40-ab-sleep): the delay
#           now busy-waits once a step (bench/profiling/step_delay.py); the gate must exit 4;
#   aa      the same environment on both sides: the gate must not exit 4, and a pass (exit 0) states its bound.
#   ab and aa use profiles/kimi-k2.6-rank-h200-ab.toml (AB_PROFILE; on a card under 100 GiB the -h100-l40- variants): its one point, so a round is two server starts;
#   a fixed design of ROUNDS = 4 rounds (one look at full alpha) unless MAX_ROUNDS asks for sequential looks.
#   Plan from the H100 starts (reports/examples/kimi-rank-h100-l40-starts): FLASHMLA's between-start CV ~3.6%, so
#   the paired log ratios' sd ~5%: 4 rounds may miss a 5% slowdown (t ~ 5% / (5% / sqrt 4) = 2 < 3.18 at Holm's level:
#   inconclusive) and leave an A/A's upper bound ~6% (inconclusive); ~8-10 rounds a side (~200 s a round) do both. Start with
#   `ROUNDS=3 MAX_ROUNDS=10` and resume the locked design across leases.
# Usage: issue38.sh BUDGET_SECONDS TASK... (ROUNDS, MAX_ROUNDS, DELAY_MS, MAX_EFFECT from the environment). Each task
# resumes what an earlier call or lease left (`sweep --resume`, `ab --resume`; the A/B's locked design refuses a
# changed one), and a task already finished is skipped. Device time per task is printed and kept in
# /tmp/res38/<task>.seconds.
set -uo pipefail
source scripts/gpu/common.sh
budget=${1:?usage: issue38.sh BUDGET_SECONDS starts|ab|aa...}; shift
rounds=${ROUNDS:-4}; delay=${DELAY_MS:-0.45}; max_effect=${MAX_EFFECT:-0.05}
# The 61-layer rank needs the H200's memory; on a smaller card (an H100) the 40-layer variants of the same profiles.
mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
card=h200; [ "${mib:-0}" -lt 102400 ] && card=h100-l40
profile=${PROFILE:-profiles/kimi-k2.6-rank-$card-starts.toml}
ab_profile=${AB_PROFILE:-profiles/kimi-k2.6-rank-$card-ab.toml}
echo "== card: $card ($mib MiB): $profile, $ab_profile"
max_rounds=(); [ -n "${MAX_ROUNDS:-}" ] && max_rounds=(--max-rounds "$MAX_ROUNDS")
# WARM=0 leaves it out: each call's first server starts once unmeasured (the first on a fresh machine compiled, and
# ran 5-6% slower twice on 2026-12-07's H100s: docs/measurement.md)
warm=--warm-start; [ "${WARM:-1}" = 0 ] && warm=
py=$(command -v python)
res=/tmp/res38
# RESUME38: an issue38.tgz an earlier lease brought back (carried in .gpu/), or a committed starts folder (e.g.
# reports/examples/kimi-rank-h100-l40-starts, on a card of its kind: the profile must match), so that a new machine
# resumes it (the compile cache is gone: its first start compiles again)
if [ -n "${RESUME38:-}" ] && [ ! -d $res ]; then
  if [ -d "$RESUME38" ]; then mkdir -p $res/starts && cp -r "$RESUME38"/start-* $res/starts/; else tar xzf "$RESUME38" -C /tmp; fi
fi
mkdir -p $res
# every call (seconds): issue39.sh in the same lease may have left the series without one fix
python -m bench patch apply >> $res/patch-apply.txt || exit 1
python -m bench patch status > $res/patch-status.txt
# GPU and host telemetry once a second beside the results (the H100 lease of 2026-12-07 found two FLASHMLA starts'
# step p50 5% apart with none recorded): clocks, power, temperature, throttle reasons; /proc/stat's cpu line, CPU MHz
nvidia-smi --query-gpu=timestamp,memory.used,utilization.gpu,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active \
  --format=csv,noheader -l 1 >> $res/gpu-telemetry.csv &
smi=$!
( while sleep 1; do
    echo "$(date +%s.%N),$(head -1 /proc/stat | cut -c6-),$(awk '/MHz/ {s += $4; n++} END {printf "%.0f", s / n}' /proc/cpuinfo)"
  done >> $res/host-telemetry.csv ) &
host=$!
trap 'kill $smi $host 2>/dev/null' EXIT
for task in "$@"; do
  grep -qE "^exit [0-9]+$" $res/$task.exit 2>/dev/null && { echo "== $task done: $(cat $res/$task.exit)"; continue; }
  left=$((budget - SECONDS - 30))
  [ $left -gt 120 ] || { echo "== $left s left: not starting $task"; continue; }
  t0=$SECONDS
  case $task in
    starts)
      resume=(); [ -d $res/starts ] && resume=(--resume)
      timeout -s TERM $left python -m bench sweep $profile --out $res/starts "${resume[@]}" $warm >> $res/starts.log 2>&1 ;;
    ab|aa)
      extra=(); resume=()
      [ "$task" = ab ] && extra=(--candidate-env "BENCH_STEP_DELAY_MS=$delay")
      [ -d $res/$task ] && resume=(--resume)
      timeout -s TERM $left python -m bench ab $ab_profile --baseline "$py" --candidate "$py" --rounds "$rounds" \
        "${max_rounds[@]}" --max-effect "$max_effect" --out $res/$task "${resume[@]}" "${extra[@]}" $warm \
        >> $res/$task.log 2>&1 ;;
    *) echo "unknown task $task" >&2; exit 2 ;;
  esac
  rc=$?
  echo $((SECONDS - t0 + $(cat $res/$task.seconds 2>/dev/null || echo 0))) > $res/$task.seconds.new && mv $res/$task.seconds.new $res/$task.seconds
  grep -vE "^\[?(INFO|DEBUG)" $res/$task.log | tail -20
  [ $rc -eq 124 ] || echo "exit $rc" > $res/$task.exit
  echo "== $task: exit $rc after $(cat $res/$task.seconds) s in all (124: cut by the budget, run again)"
done
# What a later lease would have to carry to skip the first start's compile (issue 38 item 6: start-up before/after)
du -sh /tmp/vllm-cache/* /tmp/torchinductor_* ~/.triton/cache ~/.cache/flashinfer 2>/dev/null > $res/caches.txt
tar czf "$OUT/issue38.tgz" --exclude="*/run" -C /tmp res38
