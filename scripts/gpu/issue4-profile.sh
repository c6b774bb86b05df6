#!/usr/bin/env bash
# On the H200 host after install-on-gpu-host.sh: nsys captures of one FLASHMLA and one TRITON_MLA EAGLE3 point
# (tiny-block64 profile, 8x128x128) with the NVTX plugin on, analysed into $OUT. The plugin's cost without a
# profiler: scripts/gpu/issue4-overhead.sh.
# Usage: issue4-profile.sh capture POINT:SECONDS...
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONUNBUFFERED=1 BENCH_GIT_SHA=${BENCH_GIT_SHA:-unknown}
export BENCH_VLLM_CACHE=/tmp/vllm-cache
export LD_LIBRARY_PATH=/tmp/site/_debs/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
nsys=/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys
# The suite is not pip-installed here: register its vLLM plugin entry point with a dist-info on the path.
python - <<'PY'
import tomllib, pathlib
eps = tomllib.loads(pathlib.Path("pyproject.toml").read_text())["project"]["entry-points"]
d = pathlib.Path("/tmp/site/bench-0.1.0.dist-info"); d.mkdir(exist_ok=True)
(d / "METADATA").write_text("Metadata-Version: 2.1\nName: bench\nVersion: 0.1.0\n")
(d / "entry_points.txt").write_text("".join(f"[{g}]\n" + "".join(f"{k} = {v}\n" for k, v in e.items()) + "\n"
                                            for g, e in eps.items()))
print((d / "entry_points.txt").read_text())
PY
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
