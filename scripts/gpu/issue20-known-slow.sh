#!/usr/bin/env bash
# On the H200 host after install-on-gpu-host.sh: issue 20's known regression caught on a GPU. `bench ab` of
# profiles/tiny-known-slow-h200.toml, ROUNDS rounds (default 5, the fewest at which the point's 2 Holm-adjusted
# gated tests can reach p < 0.05), both sides this host's interpreter:
#   a-b  the candidate sleeps DELAY_MS (default 10) after every engine step: the gate must say "slower" (exit 4);
#   a-a  the same environment on both sides: never exit 4 (0 or 6).
# Usage: issue20-known-slow.sh BUDGET_SECONDS SIDE... (ROUNDS, DELAY_MS from the environment). The sides run one
# after the other within the budget; resumable across calls: results stay in /tmp/res20/<side> on the machine
# (`ab --resume` continues a side cut by the budget) and are copied to $OUT/<side>/ after every call, with the exit
# code in $OUT/<side>/exit-code.txt (124: cut by the budget, run the script again). A side not in /tmp/res20 starts
# from reports/examples/h200-ab-known-slow/<side> when the working tree has it (a later lease finishes that run).
set -uo pipefail
source scripts/gpu/common.sh
budget=${1:?usage: issue20-known-slow.sh BUDGET_SECONDS a-b|a-a...}; shift
rounds=${ROUNDS:-5}; delay=${DELAY_MS:-10}
py=$(command -v python)
mkdir -p /tmp/res20
[ -e /tmp/bench-patched ] || { python -m bench patch apply > /tmp/res20/patch-apply.txt && touch /tmp/bench-patched; } || exit 1
python -m bench patch status > /tmp/res20/patch-status.txt
for side in "$@"; do
  [ "$side" = a-b ] || [ "$side" = a-a ] || { echo "side must be a-b or a-a" >&2; exit 2; }
  dir=/tmp/res20/$side
  # a fresh lease continues the committed run (its records travel with the working tree)
  [ -d $dir ] || [ ! -d reports/examples/h200-ab-known-slow/$side ] || cp -r reports/examples/h200-ab-known-slow/$side $dir
  if grep -qE "exit [0-9]$" $dir/exit-code.txt 2>/dev/null; then echo "== $side done: $(cat $dir/exit-code.txt)"; continue; fi
  left=$((budget - SECONDS - 30))
  [ $left -gt 60 ] || { echo "== $left s left: not starting $side"; continue; }
  extra=(); resume=()
  [ "$side" = a-b ] && extra=(--candidate-env "BENCH_STEP_DELAY_MS=$delay")
  [ -d $dir/baseline ] && resume=(--resume)
  echo "== $side ($left s left${resume:+, resumed})"
  timeout -s TERM $left python -m bench ab profiles/tiny-known-slow-h200.toml --baseline "$py" --candidate "$py" \
    --rounds "$rounds" --out $dir "${resume[@]}" "${extra[@]}" >> /tmp/res20/$side.log 2>&1
  rc=$?
  grep -vE "^\[?(INFO|DEBUG)" /tmp/res20/$side.log | tail -25
  echo "$side ($rounds rounds${extra:+, candidate BENCH_STEP_DELAY_MS=$delay}): exit $rc" | tee $dir/exit-code.txt
done
mkdir -p "$OUT/issue20"
cp -r /tmp/res20/. "$OUT/issue20/"
find "$OUT/issue20" -name run -type d -prune -exec rm -rf {} +
tar czf "$OUT/issue20.tgz" -C "$OUT" issue20 && rm -rf "$OUT/issue20"
