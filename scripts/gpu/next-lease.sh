#!/usr/bin/env bash
# On the H200 host after install-on-gpu-host.sh: the open issues' GPU work as a queue, in priority order, within one
# call's BUDGET_SECONDS (the call's limit less what came before it in the command: the install takes ~25 s). Every
# call of a lease runs this same command; each task resumes where the last call stopped (results stay in /tmp/res,
# every call sends back $OUT/steady.tgz and $OUT/dcp.tgz), and a finished task costs only a `--resume` that finds
# nothing to run.
#   1. issue 21: the two DCP points the committed example lacks (DCP 2 and DCP 1 at 8x8192), continued from the
#      committed sweep (a DCP server start with piecewise graphs and the 8k warm-up wave: ~250 s a point)
#   2. issue 18: the client cross-check at windows of 25 s or more, 2 rounds ABBA (128 requests a run)
#   3. issue 18: a third start of no-spec at 8x1024x256 (/tmp/res/lease-3): the no-spec between-start spread
#      (reports/examples/kimi-rank-h200-one-lease: two starts 11% apart)
# (The session of 2026-12-05 ran this queue's earlier tasks: no-spec / FLASHMLA / TRITON_MLA at 8x1024 on one lease,
# twice; reports/examples/kimi-rank-h200-one-lease.)
# Carry limit (64 MiB with .gpu/part3, ~52 MB): move reports/examples aside keeping kimi-rank-h200-dcp (task 1
# continues its sweep), and tests/ (7.7 MB) too; put both back before committing.
set -uo pipefail
budget=${1:?usage: next-lease.sh BUDGET_SECONDS}
left() { echo $((budget - SECONDS)); }
DCP_SIZES=2,1 SHAPES=8x8192x256 bash scripts/gpu/issue21-dcp.sh "$(left)" patched
[ -e /tmp/res/crosscheck-25s ] || X_PROMPTS=128 X_DIR=crosscheck-25s bash scripts/gpu/issue18-steady.sh "$(left)" x
B_DIR=lease-3 B_SHAPES=8x1024x256 B_ENGINES='no-spec dcp1 k0' bash scripts/gpu/issue18-steady.sh "$(left)" b
