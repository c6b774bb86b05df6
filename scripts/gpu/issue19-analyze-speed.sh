#!/usr/bin/env bash
# On the H200 host after install-on-gpu-host.sh (bench's pandas/pyarrow/matplotlib come from /tmp/site): issue 19's
# analysis-speed check. `python -m bench profile analyze` and `nsys stats -r nvtx_gpu_proj_sum,nvtx_sum` alternate on
# one scaled export (benchmarks/nsys_analyze_speed.py: the committed vLLM capture x4, the size of a Kimi-rank
# capture), pinned to the same two cores, 5 runs each; then the ~1 GB export (x55) once each for the memory bound.
# Writes $OUT/analyze-speed-x4.json and $OUT/analyze-speed-x55.json (ratio, peak RSS, per-range cross-check).
# BIG=0 skips the ~1 GB export (its ratio, 0.99x, is committed in reports/examples; the done-when is the 65 MB one).
set -uo pipefail
source scripts/gpu/common.sh
rc=0
python benchmarks/nsys_analyze_speed.py --copies 4 --repeat 5 --taskset 0,1 --nsys "$NSYS" \
  --out "$OUT/analyze-speed-x4.json" | tail -20 || rc=1
[ "${BIG:-1}" = 0 ] || python benchmarks/nsys_analyze_speed.py --copies 55 --repeat 1 --taskset 0,1 --nsys "$NSYS" \
  --out "$OUT/analyze-speed-x55.json" | tail -20 || rc=1
exit $rc
