#!/usr/bin/env bash
# The next GPU lease's plan, as one call on the GPU host after install-on-gpu-host.sh (it outlives the call under
# scripts/gpu/detached.sh; later calls of the lease wait for it):
#   bash scripts/gpu/detached.sh lease CALL_SECONDS bash scripts/gpu/next-lease.sh JOB_SECONDS
# with COLLECT='bash scripts/gpu/queue.sh collect' (every call brings back issue38.tgz / issue39.tgz so far).
# JOB_SECONDS: the device time the lease has left after the install, less ~60 s for the calls and give_back.
#
# Queue (QUEUE overrides it; each item resumes or skips what an earlier lease left: RESUME38 for issue 38's
# starts, RESUME39 for a brought-back issue39.tgz carried in .gpu/):
#   39:profile  issue 39 item 1: nsys captures of the DCP 2 rank without and with dcp-spec-decode first (a pair), then
#               DCP 8's pair, then DCP 1 (~350-450 s a capture; a lease of ~1,500 s job time gets the DCP 2 pair
#               and maybe DCP 8 without the fix);
#   38:ab       issue 38 item 6(b): the A/B with the busy-wait step delay (DELAY_MS, default 0.45 ms; ROUNDS=3
#               MAX_ROUNDS=10), resumed across leases (`ab --resume`; a round unfinished on another machine is
#               run again here: bench.commands.ab.set_aside_other_machine).
# 2026-12-07's second H100 lease ran issue 38's third FLASHMLA start, issue 39's correctness test (16 passed) and one
# A/B round with the slept delay (reports/examples/kimi-rank-h100-l40-ab-sleep): the A/B starts afresh (new --out).
#
# Carry limit: 64 MiB a call (.gpu/part3 is ~50 MB). Commit first, then remove reports/examples and tests/data from
# the working tree for the lease (tests/integration is needed: issue39.sh correct runs a test from it) and
# `git checkout -- reports/examples tests` after. (2026-12-07: removing all of tests/ made `correct` find no test.)
set -uo pipefail
budget=${1:?usage: next-lease.sh JOB_SECONDS}
# shellcheck disable=SC2086
exec bash scripts/gpu/queue.sh "$budget" ${QUEUE:-39:profile 38:ab}
