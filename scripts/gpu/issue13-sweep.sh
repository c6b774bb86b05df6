#!/usr/bin/env bash
# On the H200 host after install-on-gpu-host.sh, vLLM 0.26.0 patched: the one-rank Kimi K2.6 sweep
# (profiles/kimi-k2.6-rank-h200.toml), one server at a time in priority order, each started only if the time left
# can hold it, resumable across calls: results stay in /tmp/res/kimi-rank on the machine and go back as
# $OUT/kimi-rank.tgz after every call (so a lost machine loses one call at most).
# Usage: issue13-sweep.sh BUDGET_SECONDS
#   ENGINES  ';'-separated engine labels as `sweep --dry-run` prints them, in the order to run
#   SHAPES   ','-separated shapes (CONCxINxOUT) to run on each
#   LAYERS   another depth than the profile's 61 (development; its own results folder)
#   SERVER_S seconds one server needs (start + its points) before it is started (default 230)
#   SEED     a results folder to continue (copied to the machine's results folder first, then --resume): the
#            committed reports/examples/kimi-rank-h200/results, so new points join the first sweep's
set -uo pipefail
source scripts/gpu/common.sh
budget=${1:?usage: issue13-sweep.sh BUDGET_SECONDS}
engines=${ENGINES:-"no-spec dcp1 k0;FLASHMLA/fp8 dcp1 k3;FLASHMLA/auto dcp1 k3;TRITON_MLA/fp8 dcp1 k3;TRITON_MLA/auto dcp1 k3"}
shapes=${SHAPES:-"1x1024x256,8x1024x256,32x1024x256,1x8192x256,8x8192x256,32x8192x256"}
server_s=${SERVER_S:-230}
prof=profiles/kimi-k2.6-rank-h200.toml; res=/tmp/res/kimi-rank
if [ -n "${LAYERS:-}" ]; then
  sed "s/layers=61/layers=$LAYERS/" $prof > /tmp/kimi-rank-l$LAYERS.toml; prof=/tmp/kimi-rank-l$LAYERS.toml
  res=/tmp/res/kimi-rank-l$LAYERS
fi
if [ -n "${SEED:-}" ] && [ ! -e $res/manifest.json ]; then mkdir -p /tmp/res && cp -r "$SEED" $res; fi
[ -e /tmp/bench-patched ] || { python -m bench patch apply && touch /tmp/bench-patched; } || exit 1
python -m bench patch status > "$OUT/patch-status.txt"
nvidia-smi --query-gpu=timestamp,memory.used,utilization.gpu --format=csv,noheader -l 5 >> /tmp/gpu-mem.csv &
smi=$!
python - "$prof" > "$OUT/estimate.txt" <<'PY'
import sys
from bench.models import kimi_rank as K
from bench.config.profile import load_profile
spec = K.parse_spec(load_profile(sys.argv[1], "gpu").model.target)
print(K.estimate(spec).table())
PY
cat "$OUT/estimate.txt"
points_of() {  # the point ids of one engine label and the chosen shapes
  python - "$prof" "$1" "$shapes" <<'PY'
import sys
from bench.core.hardware import detect_machine
from bench.config.plan import make_plan
from bench.config.profile import load_profile
prof, label, shapes = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
plan = make_plan(load_profile(prof, "gpu"), detect_machine())
print(",".join(p.id for p in plan.runnable + plan.skipped if p.engine.label() == label and p.shape.label in shapes))
PY
}
IFS=';' read -ra labels <<< "$engines"
for label in "${labels[@]}"; do
  left=$((budget - SECONDS))
  if [ $left -lt $server_s ]; then echo "== $left s left: not starting [$label]"; break; fi
  pts=$(points_of "$label")
  [ -n "$pts" ] || { echo "== no points for [$label]"; continue; }
  resume=""; [ -e $res/manifest.json ] && resume=--resume
  echo "== [$label] $pts ($left s left)"
  timeout -s TERM $((left - 20)) python -m bench sweep "$prof" --points "$pts" --out $res $resume 2>&1 \
    | grep -vE "^\[?(INFO|DEBUG)" | tee -a "$OUT/sweep.log" | tail -12
done
kill $smi 2>/dev/null
cp /tmp/gpu-mem.csv "$OUT/" 2>/dev/null
tar czf "$OUT/$(basename $res).tgz" --exclude="$(basename $res)/run" -C /tmp/res "$(basename $res)"
ls $res/points | wc -l
