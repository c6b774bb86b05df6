#!/usr/bin/env bash
# Issue 20 on CPU: `bench ab` of profiles/tiny-known-slow.toml twice, on this machine's .venv:
#   a-a  the same environment on both sides: the gate must not say "slower" (exit 0 or 6, never 4);
#   a-b  the candidate sleeps DELAY_MS (default 30) after every engine step: the gate must say "slower" (exit 4).
# Usage: scripts/known-slow-ab.sh OUT_DIR [ROUNDS] [DELAY_MS]. Writes OUT_DIR/{a-a,a-b}/ and OUT_DIR/exit-codes.txt.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: known-slow-ab.sh OUT_DIR [ROUNDS] [DELAY_MS]}; rounds=${2:-5}; delay=${3:-30}
mkdir -p "$out"
py=.venv/bin/python
$py -m bench ab profiles/tiny-known-slow.toml --baseline .venv --candidate .venv --rounds "$rounds" \
  --out "$out/a-b" --candidate-env BENCH_STEP_DELAY_MS="$delay" > "$out/a-b.log" 2>&1
echo "a-b (candidate BENCH_STEP_DELAY_MS=$delay, $rounds rounds): exit $?" >> "$out/exit-codes.txt"
$py -m bench ab profiles/tiny-known-slow.toml --baseline .venv --candidate .venv --rounds "$rounds" \
  --out "$out/a-a" > "$out/a-a.log" 2>&1
echo "a-a ($rounds rounds): exit $?" >> "$out/exit-codes.txt"
cat "$out/exit-codes.txt"
