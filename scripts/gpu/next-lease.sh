#!/usr/bin/env bash
# On the GPU host after install-on-gpu-host.sh: the open issue's GPU work as one job of JOB_SECONDS, started by the
# lease's first call under scripts/gpu/detached.sh (it outlives the call) and waited for by the calls after it:
#   call:  bash scripts/gpu/detached.sh lease CALL_SECONDS bash scripts/gpu/next-lease.sh JOB_SECONDS
# with COLLECT='bash scripts/gpu/next-lease.sh collect' so that every call sends back $OUT/steady.tgz (the results
# so far, /tmp/res) and the cross-check's log. JOB_SECONDS is the device time the lease has left after the install,
# less a margin: the job stops starting work it cannot finish within it.
#   1. issue 18: the client cross-check on ONE server for as many rounds as the job holds (X_ROUNDS, default 16; a
#      round starts only while 1.2 x the longest still fits), X_PROMPTS requests a run (default 112: windows of
#      ~33 s on the H200), into /tmp/res/crosscheck-long, then what the GPU and the host did during each run
#      (benchmarks/run_telemetry.py). Earlier leases ran one server per call: a cold start (250 s on the H200) per
#      call left room for 2-4 rounds each; the H100 lease (reports/examples/kimi-rank-h100-crosscheck) found the
#      server's speed moving ~18% between rounds, so the client-vs-client verdict needs ~8 rounds or more.
#   2. issue 18: a third start of no-spec at 8x1024x256 (/tmp/res/lease-3) with 250 s or more left: the no-spec
#      between-start spread (reports/examples/kimi-rank-h200-one-lease: two starts 11% apart)
# PROF: another profile (on an H100: profiles/kimi-k2.6-rank-h100-l40.toml, Kimi's rank cut to 40 layers).
# (Earlier sessions ran this queue's other tasks: issue 21's DCP points, no-spec / FLASHMLA / TRITON_MLA at 8x1024 on
# one lease, twice, FLASHMLA 32x1024 in one 398 s window, and on an H100 the cross-check with bench's prompts built
# as vLLM's random dataset builds them.)
# Carry limit (64 MiB with .gpu/part3, ~52 MB): remove reports/examples and tests/ from the working tree while the
# lease runs (committed first), and `git checkout -- reports/examples tests` after: moving them to a folder that
# already exists nests them.
set -uo pipefail
if [ "${1:-}" = collect ]; then  # a call's collection: the results so far and the cross-check's log
  [ -d /tmp/res ] && tar czf "$OUT/steady.tgz" --exclude="*/run" -C /tmp res
  exit 0
fi
budget=${1:?usage: next-lease.sh JOB_SECONDS | collect}
left() { echo $((budget - SECONDS)); }
X_PROMPTS=${X_PROMPTS:-112} X_ROUNDS=${X_ROUNDS:-16} X_DIR=crosscheck-long \
  bash scripts/gpu/issue18-steady.sh "$(left)" x
python benchmarks/run_telemetry.py /tmp/res/crosscheck-long 2>&1 | tee /tmp/res/crosscheck-long/telemetry.md | tail -4
has_points() { ls /tmp/res/$1/points/*.json >/dev/null 2>&1; }
if ! has_points lease-3 && [ "$(left)" -ge 250 ]; then
  B_DIR=lease-3 B_SHAPES=8x1024x256 B_ENGINES='no-spec dcp1 k0' bash scripts/gpu/issue18-steady.sh "$(left)" b
fi
