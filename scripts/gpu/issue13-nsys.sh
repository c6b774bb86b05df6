#!/usr/bin/env bash
# On the H200 host after install-on-gpu-host.sh: nsys captures of points of the one-rank Kimi K2.6 profile
# (profiles/kimi-k2.6-rank-h200.toml) with the NVTX plugin on, one `bench profile` per point, each started only if
# the call's time left can hold it; analysed on the machine, returned as $OUT/kimi-nsys-<point>.tgz without the
# .nsys-rep / .sqlite (tens to hundreds of MB) and without run/ (vLLM's caches).
# Usage: issue13-nsys.sh BUDGET_SECONDS POINT[:PROMPTS]...
set -uo pipefail
source scripts/gpu/common.sh
budget=${1:?usage: issue13-nsys.sh BUDGET_SECONDS POINT[:PROMPTS]...}; shift
prof=profiles/kimi-k2.6-rank-h200.toml
[ -e /tmp/bench-patched ] || { python -m bench patch apply > /dev/null && touch /tmp/bench-patched; } || exit 1
for item in "$@"; do
  p=${item%%:*}; n=${item#*:}; [ "$n" = "$item" ] && n=8
  out=/tmp/prof/kimi-$p
  if [ -e $out/.done ]; then echo "== $p done"; continue; fi
  left=$((budget - SECONDS))
  if [ $left -lt 280 ]; then echo "== $left s left: not starting $p"; break; fi
  echo "== $p ($n prompts, $left s left)"
  timeout -s TERM $((left - 30)) python -m bench profile $prof --point $p --num-prompts $n --nsys $NSYS --out $out 2>&1 \
    | grep -vE "^\[?(INFO|DEBUG)" | tee "$OUT/nsys-$p.log" | tail -15
  rc=${PIPESTATUS[0]}; echo "== $p exit $rc"; [ $rc = 0 ] && touch $out/.done
  find $out -name '*.nsys-rep' -o -name '*.sqlite' | xargs -r ls -la
  tar czf "$OUT/kimi-nsys-$p.tgz" --exclude='*.nsys-rep' --exclude='*.sqlite' --exclude='nsys_kernels.csv' \
    --exclude='run' -C /tmp/prof kimi-$p
done
