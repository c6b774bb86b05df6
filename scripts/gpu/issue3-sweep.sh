#!/usr/bin/env bash
# On the H200 host after install-on-gpu-host.sh: patch the installed vLLM 0.26.0, then run (or resume) the tiny GPU
# profile into /tmp/res/PROFILE and pack it into $OUT. Usage: issue3-sweep.sh SECONDS [PROFILE]
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONUNBUFFERED=1 BENCH_GIT_SHA=${BENCH_GIT_SHA:-unknown}
budget=${1:-480}
profile=${2:-tiny}
res=/tmp/res/$profile-gpu
python -m bench patch apply || exit 1
python -m bench patch status | tee "$OUT/patch-status.txt"
nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv | tee "$OUT/gpu.txt"
resume=""; [ -e "$res/manifest.json" ] && resume="--resume"
timeout -s TERM "$budget" python -m bench sweep "$profile" --out "$res" $resume 2>&1 | tee -a "$OUT/sweep.log"
echo "sweep exit: ${PIPESTATUS[0]}"
tar czf "$OUT/$profile-gpu.tgz" -C /tmp/res --exclude="$profile-gpu/run" "$profile-gpu"
ls -la "$res"/points | wc -l
