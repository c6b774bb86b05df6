#!/usr/bin/env bash
# On the H200 host after install-on-gpu-host.sh: the open issues' GPU work in priority order within one call's
# BUDGET_SECONDS (the call's limit less what came before it in the command: the install takes 1-2 min). It is what a
# session's third `run` (the one that installs vLLM) runs; later calls of the same lease
# run `issue21-dcp.sh BUDGET patched` alone, which resumes where this stopped.
#   1. issue 19: `profile analyze` against `nsys stats` on the 65 MB export (BIG=0: ~1 min, cores 0-1)
#   2. issue 20: the A/A of the known-slow profile, continued from its committed rounds (~150 s)
#   3. issue 21: the DCP points the committed example lacks (DCP 2 at both shapes, DCP 1 and 8 at 8x8192),
#      continued from the committed sweep, in the time left
# Each step writes its own files under $OUT (analyze-speed-x4.json, issue20.tgz, dcp.tgz).
# Carry limit: .gpu/part3 is ~50 MB and the tree without reports/examples ~8 MB, so only the two folders the steps
# continue from may travel: move reports/examples aside here, keeping kimi-rank-h200-dcp and h200-ab-known-slow
# (3.9 MB), for the three staging calls; put it back before committing.
set -uo pipefail
budget=${1:?usage: next-lease.sh BUDGET_SECONDS}
left() { echo $((budget - SECONDS)); }
BIG=0 bash scripts/gpu/issue19-analyze-speed.sh || echo "== issue 19's benchmark failed (exit $?)"
bash scripts/gpu/issue20-known-slow.sh "$(left)" a-a
DCP_SIZES=2,1,8 SHAPES=1x8192x256,8x8192x256 bash scripts/gpu/issue21-dcp.sh "$(left)" patched
