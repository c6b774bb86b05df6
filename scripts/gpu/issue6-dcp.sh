#!/usr/bin/env bash
# On a 2-GPU host (nvidia-h200-x2 / h100-x2) after install-on-gpu-host.sh, vLLM 0.26.0: the DCP proof and sweep.
# 1. unpatched vLLM, TRITON_MLA/auto draft at TP2 DCP2 8x128x128 (upstream speculative-config keys, which unpatched
#    vLLM accepts): expected to fail in warmup, classified dcp-draft-seq-lens-none;
# 2. patched, the same point: expected ok with spec-decode metrics;
# 3. the tiny-dcp sweep (DCP 1/2 x TRITON_MLA/FLASHMLA x fp8/auto x 2 shapes), resumable within BUDGET seconds.
# Usage: issue6-dcp.sh proof|sweep [BUDGET_SECONDS]
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONUNBUFFERED=1 BENCH_VLLM_CACHE=/tmp/vllm-cache
# NVLink multicast stays off (device rules): these reach every vLLM process through the server environment.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
point=af646ecab618  # TRITON_MLA/auto dcp2 k3 8x128x128 of profiles/tiny-dcp.toml
nvidia-smi --query-gpu=name,memory.total --format=csv > "$OUT/gpus.txt"
if [ "${1:-proof}" = proof ]; then
  python -m bench patch revert; python -m bench patch status > "$OUT/patch-status-unpatched.txt"
  timeout 280 python -m bench sweep tiny-dcp --points $point --draft-keys upstream --out /tmp/dcp/unpatched 2>&1 | tail -4
  grep -n -m3 "NoneType\|seq_lens" /tmp/dcp/unpatched/logs/*.log
  python -m bench patch apply; python -m bench patch status > "$OUT/patch-status-patched.txt"
  timeout 280 python -m bench sweep tiny-dcp --points $point --out /tmp/dcp/patched 2>&1 | tail -4
  tar czf "$OUT/dcp-proof.tgz" --exclude=run -C /tmp dcp
else
  python -m bench patch apply; python -m bench patch status > "$OUT/patch-status.txt"
  res=/tmp/dcp-sweep; resume=""; [ -e $res/manifest.json ] && resume=--resume
  timeout -s TERM ${2:-540} python -m bench sweep tiny-dcp --out $res $resume 2>&1 | tail -20
  tar czf "$OUT/dcp-sweep.tgz" --exclude=run -C /tmp dcp-sweep
fi
