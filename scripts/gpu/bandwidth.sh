#!/usr/bin/env bash
# On the H200 host after install-on-gpu-host.sh: the measured memory-bandwidth ceiling the roofline shows beside the
# datasheet figure (bench/engine/bandwidth.py: a device-to-device copy of two 2 GiB buffers, CUDA events, read + write
# counted, best and median of the repeats), once per visible GPU (default: GPU 0 only), as $OUT/bandwidth-gpu<i>.json.
# Usage: bandwidth.sh [GPU_INDEX...]
set -uo pipefail
source scripts/gpu/common.sh
rc=0
for i in "${@:-0}"; do
  echo "== GPU $i"
  timeout 300 python -m bench.engine.bandwidth --device "$i" > "$OUT/bandwidth-gpu$i.json" || rc=1
  python - "$OUT/bandwidth-gpu$i.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
if r.get("bytes_per_s"):
    print(f"{r['gpu_name']}: {r['bytes_per_s'] / 1e12:.3f} TB/s best, {r['median_bytes_per_s'] / 1e12:.3f} median "
          f"({r['bytes_counted']}; torch {r['torch_version']})")
else:
    print("not measured:", r.get("reason"))
PY
done
exit $rc
