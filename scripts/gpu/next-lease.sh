#!/usr/bin/env bash
# On the H200 host after install-on-gpu-host.sh: the open issues' GPU work as a queue, in priority order, within one
# call's BUDGET_SECONDS (the call's limit less what came before it in the command: the install takes ~25 s). Every
# call of a lease runs this same command; each task resumes where the last call stopped or is skipped once done
# (results stay in /tmp/res, every call sends back $OUT/steady.tgz), so a finished task costs nothing.
#   1. issue 18: the client cross-check with as many rounds as each call holds (X_ROUNDS=8: a round is started only
#      while 1.2 x the longest still fits), 112 requests a run (windows of ~33 s on the H200; X_PROMPTS sets it), one server per call in
#      /tmp/res/crosscheck-call-N (N = 1, 2, 3: a cold start, 250 s, leaves room for 2 rounds; a warm one, ~85 s, for
#      4), then every call's rounds judged together in /tmp/res/crosscheck-pooled (client_crosscheck.py --pool). The
#      H100 lease (reports/examples/kimi-rank-h100-crosscheck) found the server's speed moving ~18% between rounds,
#      so the client-vs-client verdict needs ~8 rounds or more; each client's timing against vLLM's own agreed to
#      0.1% there
#   2. issue 18: a third start of no-spec at 8x1024x256 (/tmp/res/lease-3), after three cross-check calls, with 250 s
#      or more left: the no-spec between-start spread (reports/examples/kimi-rank-h200-one-lease: two starts 11% apart)
# (Earlier sessions ran this queue's other tasks: issue 21's DCP points, no-spec / FLASHMLA / TRITON_MLA at 8x1024 on
# one lease, twice, FLASHMLA 32x1024 in one 398 s window, and on an H100 the cross-check with bench's prompts built
# as vLLM's random dataset builds them.)
# Carry limit (64 MiB with .gpu/part3, ~52 MB): remove reports/examples and tests/ from the working tree while the
# lease runs (committed first), and `git checkout -- reports/examples tests` after: moving them to a folder that
# already exists nests them.
set -uo pipefail
budget=${1:?usage: next-lease.sh BUDGET_SECONDS}
left() { echo $((budget - SECONDS)); }
calls() { ls -d /tmp/res/crosscheck-call-* 2>/dev/null | wc -l; }
n=$(($(calls) + 1))
if [ "$n" -le 3 ] && [ "$(left)" -ge 300 ]; then
  X_PROMPTS=${X_PROMPTS:-112} X_ROUNDS=8 X_DIR=crosscheck-call-$n bash scripts/gpu/issue18-steady.sh "$(left)" x
  # what the GPU and the host did during each run (the H100's 18% speed shift between rounds is unexplained)
  python benchmarks/run_telemetry.py /tmp/res/crosscheck-call-$n 2>&1 | tee /tmp/res/crosscheck-call-$n/telemetry.md \
    | tail -4
fi
if [ "$(calls)" -gt 0 ]; then  # every call's rounds so far, judged together (exit 6 while inconclusive)
  rm -rf /tmp/res/crosscheck-pooled
  python benchmarks/client_crosscheck.py --pool /tmp/res/crosscheck-call-* --out /tmp/res/crosscheck-pooled 2>&1 \
    | tee -a "$OUT/crosscheck.log" | tail -12
  tar czf "$OUT/steady.tgz" --exclude="*/run" -C /tmp res
fi
has_points() { ls /tmp/res/$1/points/*.json >/dev/null 2>&1; }
if [ "$(calls)" -ge 3 ] && ! has_points lease-3 && [ "$(left)" -ge 250 ]; then
  B_DIR=lease-3 B_SHAPES=8x1024x256 B_ENGINES='no-spec dcp1 k0' bash scripts/gpu/issue18-steady.sh "$(left)" b
fi
