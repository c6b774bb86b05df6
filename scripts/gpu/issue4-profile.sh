#!/usr/bin/env bash
# On the H200 host after install-on-gpu-host.sh: nsys captures of one FLASHMLA and one TRITON_MLA EAGLE3 point
# (tiny-block64 profile, 8x128x128) with the NVTX plugin on, analysed into $OUT. The plugin's cost without a
# profiler: scripts/gpu/issue4-overhead.sh.
# Usage: issue4-profile.sh capture POINT:SECONDS...
set -uo pipefail
source scripts/gpu/common.sh  # environment, the plugin registered, $NSYS
nsys=$NSYS
python -m bench patch apply >/dev/null; python -m bench patch status > "$OUT/patch-status.txt"
[ "${1:-}" = capture ] || { echo "usage: $0 capture POINT:SECONDS..." >&2; exit 2; }
shift
# each point under nsys (server start under nsys is slower than without)
for item in "$@"; do
  p=${item%%:*}
  timeout ${item##*:} python -m bench profile tiny-block64 --point $p --num-prompts 16 --nsys $nsys --out /tmp/prof/$p 2>&1 | tail -8
done
find /tmp/prof -name '*.nsys-rep' | xargs -r ls -la
tar czf "$OUT/profiles.tgz" --exclude='*.nsys-rep' --exclude='*.sqlite' --exclude='run' -C /tmp prof
