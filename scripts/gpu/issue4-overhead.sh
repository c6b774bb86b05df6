#!/usr/bin/env bash
# On the H200 host after install-on-gpu-host.sh: the NVTX plugin's cost on decode throughput inside one engine
# (benchmarks/plugin_overhead.py): FLASHMLA/auto 8x128x128 of tiny-block64, BENCH_NVTX=1 with no tool attached,
# alternating on/off rounds; then, if time is left, the same for the in-process timing mode (CUDA events).
# Usage: issue4-overhead.sh [ROUNDS] [BUDGET_SECONDS]
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONUNBUFFERED=1 BENCH_VLLM_CACHE=/tmp/vllm-cache
rounds=${1:-8}; budget=${2:-420}
python -m bench patch apply >/dev/null; python -m bench patch status > "$OUT/patch-status.txt"
timeout $budget python benchmarks/plugin_overhead.py tiny-block64 --point 69817124664f --rounds $rounds \
  --out "$OUT/plugin-overhead-nvtx.json" > "$OUT/plugin-overhead-nvtx.log" 2>&1
grep -E "^round|ratio_median|ratio_mean|Error" "$OUT/plugin-overhead-nvtx.log" | tail -14
left=$((budget - SECONDS))
if [ $left -gt 150 ]; then
  timeout $left python benchmarks/plugin_overhead.py tiny-block64 --point 69817124664f --rounds $rounds --mode timing \
    --out "$OUT/plugin-overhead-timing.json" > "$OUT/plugin-overhead-timing.log" 2>&1
  grep -E "^round|ratio_median|ratio_mean|Error" "$OUT/plugin-overhead-timing.log" | tail -14
fi
