#!/usr/bin/env bash
# On the GPU host after install-on-gpu-host.sh: several issues' resumable GPU jobs as one queue within one lease's
# budget, each item given what is left (run it under scripts/gpu/detached.sh so that it outlives one call):
#   queue.sh BUDGET_SECONDS ISSUE:TASK...   e.g.  queue.sh 1000 38:starts 39:correct 39:profile 38:ab
# runs scripts/gpu/issue38.sh / issue39.sh with each task in turn (their own environment: RESUME38, RESUME39, ROUNDS,
# CAPTURES...; a finished task is skipped, one cut by the budget resumes on the next lease). The results stay in
# /tmp/res38, /tmp/res39; `queue.sh collect` (the calls' COLLECT) puts their tarballs in $OUT.
set -uo pipefail
collect() {
  [ -d /tmp/res38 ] && tar czf "$OUT/issue38.tgz" --exclude="*/run" -C /tmp res38
  [ -d /tmp/res39 ] && tar czf "$OUT/issue39.tgz" --exclude="*/run" --exclude="*.nsys-rep" --exclude="*.sqlite" \
    --exclude="nsys_kernels.csv" -C /tmp res39
  true
}
if [ "${1:-}" = collect ]; then collect; exit 0; fi
budget=${1:?usage: queue.sh BUDGET_SECONDS ISSUE:TASK... | collect}; shift
for item in "$@"; do
  IFS=: read -r issue task <<< "$item"
  left=$((budget - SECONDS))
  echo "== queue: $item with $left s left"
  [ $left -gt 150 ] || { echo "== queue: $left s left, stopping before $item"; break; }
  bash scripts/gpu/issue$issue.sh "$left" "$task"
done
collect
