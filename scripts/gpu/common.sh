# Sourced by the H200 scripts after install-on-gpu-host.sh: environment, the suite's vLLM plugin registered (the
# suite is on PYTHONPATH, not pip-installed, so its entry point needs a dist-info on the path), GPU facts in $OUT.
export PYTHONPATH=/tmp/site:$PWD VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONUNBUFFERED=1 BENCH_VLLM_CACHE=/tmp/vllm-cache
export BENCH_GIT_SHA=${BENCH_GIT_SHA:-unknown}
export LD_LIBRARY_PATH=/tmp/site/_debs/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
NSYS=/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys
python - <<'PY'
import pathlib, tomllib
eps = tomllib.loads(pathlib.Path("pyproject.toml").read_text())["project"]["entry-points"]
d = pathlib.Path("/tmp/site/bench-0.1.0.dist-info")
d.mkdir(exist_ok=True)
(d / "METADATA").write_text("Metadata-Version: 2.1\nName: bench\nVersion: 0.1.0\n")
(d / "entry_points.txt").write_text(
    "".join(f"[{g}]\n" + "".join(f"{k} = {v}\n" for k, v in e.items()) + "\n" for g, e in eps.items()))
PY
nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv > "$OUT/gpu.txt"
