#!/usr/bin/env bash
# On the H200 host after install-on-gpu-host.sh: the open issues' GPU work as a queue, in priority order, within one
# call's BUDGET_SECONDS (the call's limit less what came before it in the command: the install takes ~25 s). Every
# call of a lease runs this same command; each task resumes where the last call stopped or is skipped once done
# (results stay in /tmp/res, every call sends back $OUT/steady.tgz), so a finished task costs nothing.
#   1. issue 18: the client cross-check's ABBA pair, 2 rounds of 112 requests (windows of ~33 s): a cold server start
#      (250 s) and two rounds of ~100 s fit one call only with the 1.2 x margin of the second round's start; with
#      128 requests (113 s a round) the second round did not start, twice (reports/examples/kimi-rank-h200-long-window)
#   2. issue 18: the same ABBA pair with bench's prompts built as vllm bench serve's random dataset builds them
#      (consecutive token ids: --bench-prompt-ids consecutive), on a second server: does the prompts' construction
#      explain the clients' gap (reports/examples/kimi-rank-h200-long-window: bench's TPOT 7.4% above vllm's)?
#   3. issue 18: a third start of no-spec at 8x1024x256 (/tmp/res/lease-3), with 250 s or more left: the no-spec
#      between-start spread (reports/examples/kimi-rank-h200-one-lease: two starts 11% apart)
# (Earlier sessions ran this queue's other tasks: issue 21's DCP points, no-spec / FLASHMLA / TRITON_MLA at 8x1024 on
# one lease, twice, and FLASHMLA 32x1024 in one 398 s window.)
# Carry limit (64 MiB with .gpu/part3, ~52 MB): remove reports/examples and tests/ from the working tree while the
# lease runs (committed first), and `git checkout -- reports/examples tests` after: moving them to a folder that
# already exists nests them.
set -uo pipefail
budget=${1:?usage: next-lease.sh BUDGET_SECONDS}
left() { echo $((budget - SECONDS)); }
[ -e /tmp/res/crosscheck-abba-112 ] || X_PROMPTS=112 X_DIR=crosscheck-abba-112 bash scripts/gpu/issue18-steady.sh "$(left)" x
[ -e /tmp/res/crosscheck-consecutive-112 ] || [ "$(left)" -lt 300 ] \
  || X_PROMPTS=112 X_PROMPT_IDS=consecutive X_DIR=crosscheck-consecutive-112 bash scripts/gpu/issue18-steady.sh "$(left)" x
has_points() { ls /tmp/res/$1/points/*.json >/dev/null 2>&1; }
if ! has_points lease-3 && [ "$(left)" -ge 250 ]; then
  B_DIR=lease-3 B_SHAPES=8x1024x256 B_ENGINES='no-spec dcp1 k0' bash scripts/gpu/issue18-steady.sh "$(left)" b
fi
