#!/usr/bin/env bash
# On the H200 host after install-on-gpu-host.sh, vLLM 0.26.0 patched: issue 18's re-measurement of the one-rank Kimi
# K2.6 example with the steady-window method (profiles/kimi-k2.6-rank-h200-steady.toml, docs/measurement.md).
# Resumable across calls: results stay in /tmp/res on the machine and go back as $OUT/steady.tgz after every call.
# Usage: issue18-steady.sh BUDGET_SECONDS STEP...
#   a   server start A: every point of the profile (no-spec, FLASHMLA/fp8, TRITON_MLA/fp8 x 4 shapes); first the
#       measured copy-bandwidth ceiling (bench/engine/bandwidth.py) into $OUT/bandwidth.json
#   b   server start B: no-spec and FLASHMLA/fp8 again (8x1024x256 first, then the other shapes), a second folder
#   x   the client cross-check (benchmarks/client_crosscheck.py) on one FLASHMLA/fp8 server, 8x1024x256, X_ROUNDS
#       rounds at most (default 2; it starts one only while it fits the time left), X_PROMPTS
#       requests a run (default 128: windows of 25 s and more)
# PROF replaces the profile (a copy with another window cap). A_DIR / B_DIR name the result folders of a and b (default start-a / start-b); B_ENGINES the engine labels of b. GPU telemetry (SM and memory clocks,
# power, temperature, throttle reasons, once a second) goes to gpu-telemetry.csv beside them.
set -uo pipefail
source scripts/gpu/common.sh
budget=${1:?usage: issue18-steady.sh BUDGET_SECONDS STEP...}; shift
prof=${PROF:-profiles/kimi-k2.6-rank-h200-steady.toml}  # PROF: another profile (next-lease.sh's long window)
mkdir -p /tmp/res
[ -e /tmp/bench-patched ] || { python -m bench patch apply && touch /tmp/bench-patched; } || exit 1
python -m bench patch status > "$OUT/patch-status.txt"
nvidia-smi --query-gpu=timestamp,memory.used,utilization.gpu,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active \
  --format=csv,noheader -l 1 >> /tmp/res/gpu-telemetry.csv &
smi=$!
# the host beside it, once a second: /proc/stat's cpu line (jiffies: user nice system idle iowait irq softirq steal;
# steal is time the hypervisor gave this VM's CPUs to another) and the mean CPU clock, to tell a slower host from a
# slower GPU when a server's speed moves at fixed GPU clocks (reports/examples/kimi-rank-h100-crosscheck)
( while sleep 1; do
    echo "$(date +%s.%N),$(head -1 /proc/stat | cut -c6-),$(awk '/MHz/ {s += $4; n++} END {printf "%.0f", s / n}' /proc/cpuinfo)"
  done >> /tmp/res/host-telemetry.csv ) &
host=$!
points_of() {  # point ids of the engine labels (';'-separated) and shapes (','-separated), in the order given
  python - "$prof" "$1" "$2" <<'PY'
import sys
from bench.core.hardware import detect_machine
from bench.config.plan import make_plan
from bench.config.profile import load_profile
prof, labels, shapes = sys.argv[1], sys.argv[2].split(";"), sys.argv[3].split(",")
plan = make_plan(load_profile(prof, "gpu"), detect_machine())
print(",".join(p.id for s in shapes for l in labels for p in plan.runnable if p.engine.label() == l and p.shape.label == s))
PY
}
sweep() {  # sweep DIR POINTS: run (or resume) those points into /tmp/res/DIR within the time left
  local dir=/tmp/res/$1 left=$((budget - SECONDS - 60)) resume=""
  [ $left -gt 120 ] || { echo "== $left s left: not starting $1"; return; }
  [ -e $dir/manifest.json ] && resume=--resume
  echo "== $1 ($left s left)"
  timeout -s TERM $((left + 60)) python -m bench sweep $prof --time-budget $left ${2:+--points "$2"} --out $dir $resume 2>&1 \
    | grep -vE "^\[?(INFO|DEBUG)" | tee -a "$OUT/sweep-$1.log" | tail -20
}
for step in "$@"; do
  case $step in
    a)
      [ -e /tmp/res/bandwidth.json ] || timeout 300 python -m bench.engine.bandwidth > /tmp/res/bandwidth.json
      sweep ${A_DIR:-start-a} "" ;;
    b)
      sweep ${B_DIR:-start-b} "$(points_of "${B_ENGINES:-no-spec dcp1 k0;FLASHMLA/fp8 dcp1 k3}" ${B_SHAPES:-8x1024x256,1x1024x256,32x1024x256,8x8192x256})" ;;
    x)
      left=$((budget - SECONDS - 30))
      [ $left -gt 200 ] || { echo "== $left s left: no cross-check"; continue; }
      timeout -s TERM $left python benchmarks/client_crosscheck.py --start $prof --axis draft_attention_backend=FLASHMLA \
        --axis num_speculative_tokens=3 --shape 8x1024x256 --num-prompts ${X_PROMPTS:-128} --bench-prompt-ids ${X_PROMPT_IDS:-uniform} --rounds ${X_ROUNDS:-2} --time-budget $((left - 20)) --out /tmp/res/${X_DIR:-crosscheck} 2>&1 \
        | grep -vE "^\[?(INFO|DEBUG)" | tee -a "$OUT/crosscheck.log" | tail -30 ;;
  esac
done
kill $smi $host 2>/dev/null
tar czf "$OUT/steady.tgz" --exclude="*/run" -C /tmp res
ls /tmp/res/*/points 2>/dev/null | head -50
