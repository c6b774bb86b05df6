#!/usr/bin/env bash
# On the H200 host after install-on-gpu-host.sh: the open issues' GPU work as a queue, in priority order, within one
# call's BUDGET_SECONDS (the call's limit less what came before it in the command: the install takes ~25 s). Every
# call of a lease runs this same command; each task resumes where the last call stopped or is skipped once done
# (results stay in /tmp/res, every call sends back $OUT/steady.tgz), so a finished task costs nothing.
#   1. issue 18: the client cross-check at windows of 25 s or more, 2 rounds ABBA (128 requests a run): the round in
#      which vLLM's client goes first, which the two single rounds so far lacked (a round ~93 s, a server start
#      125-240 s)
#   2. issue 18: FLASHMLA/fp8 32x1024x256 in one window as long as a call allows (the profile's 240 s cap raised to
#      900 s; --time-budget ends it), started only at the top of a call (450 s or more left): whether the drift of
#      reports/examples/kimi-rank-h200-3pct's 240 s window goes on, and what precision a longer window reaches
#   3. issue 18: a third start of no-spec at 8x1024x256 (/tmp/res/lease-3), with 250 s or more left: the no-spec
#      between-start spread (reports/examples/kimi-rank-h200-one-lease: two starts 11% apart)
# (Earlier sessions ran this queue's other tasks: issue 21's DCP points, no-spec / FLASHMLA / TRITON_MLA at 8x1024 on
# one lease, twice.)
# Carry limit (64 MiB with .gpu/part3, ~52 MB): move reports/examples and tests/ aside; put both back before committing.
set -uo pipefail
budget=${1:?usage: next-lease.sh BUDGET_SECONDS}
left() { echo $((budget - SECONDS)); }
[ -e /tmp/res/crosscheck-abba ] || X_PROMPTS=128 X_DIR=crosscheck-abba bash scripts/gpu/issue18-steady.sh "$(left)" x
has_points() { ls /tmp/res/$1/points/*.json >/dev/null 2>&1; }
if ! has_points long-32 && [ "$(left)" -ge 450 ]; then
  sed 's/^max_window_s = .*/max_window_s = 900/' profiles/kimi-k2.6-rank-h200-steady.toml > /tmp/kimi-long.toml
  PROF=/tmp/kimi-long.toml B_DIR=long-32 B_SHAPES=32x1024x256 B_ENGINES='FLASHMLA/fp8 dcp1 k3' \
    bash scripts/gpu/issue18-steady.sh "$(left)" b
fi
if ! has_points lease-3 && [ "$(left)" -ge 250 ]; then
  B_DIR=lease-3 B_SHAPES=8x1024x256 B_ENGINES='no-spec dcp1 k0' bash scripts/gpu/issue18-steady.sh "$(left)" b
fi
