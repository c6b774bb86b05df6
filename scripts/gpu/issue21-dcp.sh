#!/usr/bin/env bash
# On the H200 host after install-on-gpu-host.sh, vLLM 0.26.0: issue 21, one rank of DCP-N through vLLM's own DCP
# code on a loopback group (profiles/kimi-k2.6-rank-h200-dcp.toml, bench/profiling/dcp_loopback.py), V2 runner.
# Resumable across calls: results stay in /tmp/res on the machine and go back as $OUT/dcp.tgz after every call. A
# lease that finds no /tmp/res/dcp starts from the committed reports/examples/kimi-rank-h200-dcp/sweep (its points are
# done; `--resume` runs the ones it lacks).
# Usage: issue21-dcp.sh BUDGET_SECONDS STEP...
#   unpatched  vLLM as installed (no patch), vLLM's own speculative keys (--draft-keys upstream), DCP 4 at 1x8192:
#              expected to die in warm-up with the seed's crash, classified dcp-draft-seq-lens-none
#   patched    the 0.26 patch series applied; the profile's points in the order DCP 4, 8, 2, 1 (DCP_SIZES, SHAPES)
set -uo pipefail
source scripts/gpu/common.sh
export VLLM_USE_V2_MODEL_RUNNER=1
budget=${1:?usage: issue21-dcp.sh BUDGET_SECONDS STEP...}; shift
prof=profiles/kimi-k2.6-rank-h200-dcp.toml
mkdir -p /tmp/res
nvidia-smi --query-gpu=timestamp,memory.used,utilization.gpu,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active \
  --format=csv,noheader -l 1 >> /tmp/res/gpu-telemetry.csv &
smi=$!
points_of() {  # point ids of the DCP sizes (','-separated) and shapes (','-separated), in the order given
  python - "$prof" "$1" "$2" <<'PY'
import sys
from bench.core.hardware import detect_machine
from bench.config.plan import make_plan
from bench.config.profile import load_profile
prof, sizes, shapes = sys.argv[1], [int(s) for s in sys.argv[2].split(",")], sys.argv[3].split(",")
plan = make_plan(load_profile(prof, "gpu"), detect_machine())
print(",".join(p.id for n in sizes for s in shapes for p in plan.runnable if p.engine.dcp_size == n and p.shape.label == s))
PY
}
sweep() {  # sweep DIR POINTS ARGS...: run (or resume) those points into /tmp/res/DIR within the time left
  local dir=/tmp/res/$1 pts=$2 left=$((budget - SECONDS - 60)) resume=""; shift 2
  [ $left -gt 120 ] || { echo "== $left s left: not starting $dir"; return; }
  [ -e $dir/manifest.json ] && resume=--resume
  echo "== $dir ($left s left)"
  timeout -s TERM $((left + 60)) python -m bench sweep $prof --time-budget $left --points "$pts" --out $dir $resume "$@" 2>&1 \
    | grep -vE "^\[?(INFO|DEBUG)" | tee -a "$OUT/sweep-$(basename $dir).log" | tail -20
}
for step in "$@"; do
  case $step in
    unpatched)
      [ -e /tmp/bench-patched ] && { echo "== already patched in this lease: no unpatched run"; continue; }
      python -m bench patch status > "$OUT/patch-status-unpatched.txt"
      sweep unpatched "$(points_of 4 1x8192x256)" --draft-keys upstream
      grep -h -m2 -B4 "NoneType' object is not subscriptable" /tmp/res/unpatched/logs/*.log > "$OUT/unpatched-crash.txt" ;;
    patched)
      [ -e /tmp/bench-patched ] || { python -m bench patch apply && touch /tmp/bench-patched; } || exit 1
      python -m bench patch status > "$OUT/patch-status.txt"
      committed=reports/examples/kimi-rank-h200-dcp/sweep
      [ -d /tmp/res/dcp ] || [ ! -e $committed/manifest.json ] || cp -r $committed /tmp/res/dcp
      sweep dcp "$(points_of ${DCP_SIZES:-4,8,2,1} ${SHAPES:-1x8192x256,8x8192x256})" ;;
  esac
done
kill $smi 2>/dev/null
tar czf "$OUT/dcp.tgz" --exclude="*/run" -C /tmp res
ls /tmp/res/*/points 2>/dev/null | head -50
