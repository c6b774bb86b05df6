#!/usr/bin/env bash
# On the H200 host after install-on-gpu-host.sh: issue 20's known regression caught on a GPU. `bench ab` of
# profiles/tiny-known-slow-h200.toml, 5 rounds (the fewest at which the point's 2 Holm-adjusted gated tests can
# reach p < 0.05), both sides this host's interpreter:
#   a-b  the candidate sleeps DELAY_MS (default 10) after every engine step: the gate must say "slower" (exit 4);
#   a-a  the same environment on both sides: never exit 4 (0 or 6).
# One side per call (each fits a 10-minute run): issue20-known-slow.sh a-b|a-a [ROUNDS] [DELAY_MS]; results in
# $OUT/<side>/ (compare.md, per-round sweeps), the exit code in $OUT/<side>/exit-code.txt.
set -uo pipefail
source scripts/gpu/common.sh
side=${1:?usage: issue20-known-slow.sh a-b|a-a [ROUNDS] [DELAY_MS]}; rounds=${2:-5}; delay=${3:-10}
py=$(command -v python)
extra=()
[ "$side" = a-b ] && extra=(--candidate-env "BENCH_STEP_DELAY_MS=$delay")
[ "$side" = a-b ] || [ "$side" = a-a ] || { echo "side must be a-b or a-a" >&2; exit 2; }
python -m bench ab profiles/tiny-known-slow-h200.toml --baseline "$py" --candidate "$py" --rounds "$rounds" \
  --out "$OUT/$side" "${extra[@]}" 2>&1 | tail -40
rc=${PIPESTATUS[0]}
echo "$side ($rounds rounds${extra:+, candidate BENCH_STEP_DELAY_MS=$delay}): exit $rc" | tee "$OUT/$side/exit-code.txt"
