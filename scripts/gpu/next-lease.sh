#!/usr/bin/env bash
# On the H200 host after install-on-gpu-host.sh: the open issues' GPU work in priority order within one call's
# BUDGET_SECONDS (the call's limit less what came before it in the command: the install takes ~25 s). It is what a
# session's third `run` (the one that installs vLLM) runs; a later call of the same lease runs
# `DCP_SIZES=2,1 SHAPES=8x8192x256 bash scripts/gpu/issue21-dcp.sh BUDGET patched` alone, which resumes where this
# stopped.
#   1. issue 18: the client cross-check at windows of 25 s or more (128 requests a run, 2 rounds ABBA, one
#      FLASHMLA/fp8 server at 8x1024x256; ~5 min with the server's start) -> $OUT/steady.tgz
#   2. issue 21: the two DCP points the committed example lacks (DCP 2 and DCP 1 at 8x8192), continued from the
#      committed sweep, in the time left -> $OUT/dcp.tgz
# Carry limit (64 MiB with .gpu/part3, ~52 MB): move reports/examples aside keeping kimi-rank-h200-dcp (the sweep
# step 2 continues), and tests/ (7.7 MB) too; put both back before committing.
set -uo pipefail
budget=${1:?usage: next-lease.sh BUDGET_SECONDS}
left() { echo $((budget - SECONDS)); }
X_PROMPTS=128 X_DIR=crosscheck-25s bash scripts/gpu/issue18-steady.sh "$(left)" x
DCP_SIZES=2,1 SHAPES=8x8192x256 bash scripts/gpu/issue21-dcp.sh "$(left)" patched
