"""Benchmark: what the NVTX plugin costs on decode throughput, with no profiler attached, measured inside ONE
engine so that engine-to-engine variance (which on an H200 with the tiny model is larger than any plugin effect:
two servers of the same config gave 1.8k and 2.7k tok/s) does not enter the ratio.

The engine runs in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0), so the plugin's wrappers live here too and
`Profiler.set_enabled` swaps them out and back between runs. Runs alternate on/off, off/on, ... with fresh prompts
for every run (no prefix-cache help). One sweep point of a profile gives the engine config and the shape; the
shape's concurrency becomes max_num_seqs.

Usage: python benchmarks/plugin_overhead.py PROFILE --point ID [--rounds 8] [--mode nvtx|timing] [--out FILE]
Prints one JSON document: every run, the per-round on/off ratios, their median and a 95% bootstrap CI.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("profile")
    ap.add_argument("--point", default=None, help="point id prefix (default: the first runnable point)")
    ap.add_argument("--rounds", type=int, default=8, help="on/off pairs (default 8)")
    ap.add_argument("--prompts", type=int, default=None, help="prompts per run (default: the point's)")
    ap.add_argument(
        "--mode",
        choices=["nvtx", "timing"],
        default="nvtx",
        help="nvtx: BENCH_NVTX=1, no tool attached (default); timing: the in-process timers",
    )
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)

    from bench.config.plan import make_plan
    from bench.config.profile import load_profile
    from bench.core.hardware import detect_machine
    from bench.engine.launch import resolve_models
    from bench.engine.server import server_env
    from bench.load.loadgen import make_prompts
    from bench.profiling import plugin

    # vLLM's caches, temp files and sockets as a sweep's server has them; the engine core in this process.
    work = Path(tempfile.mkdtemp(prefix="bench-plugin-overhead-"))
    cache = os.environ.get("BENCH_VLLM_CACHE")
    os.environ.update(server_env(work, {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}, Path(cache) if cache else None))

    machine = detect_machine()
    profile = load_profile(args.profile, machine.platform)
    plan = make_plan(profile, machine)
    if args.point:
        plan = plan.select([args.point])
    if not plan.runnable:
        sys.exit(
            f"no runnable point in {profile.name} here: " + "; ".join(f"{p.id}: {p.skip_reason}" for p in plan.skipped)
        )
    point = plan.runnable[0]
    engine, shape = point.engine, point.shape
    if shape is None:
        sys.exit(f"{point.id} is a text workload: the point must be a random-id shape (users x input x output)")
    if engine.tensor_parallel_size > 1 or engine.dcp_size > 1:
        sys.exit("one process, one device: the point must have TP 1 and DCP 1")
    flavor = profile.model.flavor if profile.model.flavor != "auto" else machine.platform
    target, draft, load_format, vocab = resolve_models(engine, flavor)

    prof = plugin.activate(nvtx=args.mode == "nvtx", timing=args.mode == "timing", timing_dir=work / "timing")
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    server = dict(engine.server)
    server["max_num_seqs"] = shape.concurrency
    llm = LLM(
        model=target, speculative_config=engine.speculative_config(draft), load_format=load_format or "auto", **server
    )
    wrapped = sorted(set(prof.wrapped.values()))
    if not wrapped:
        sys.exit("the plugin wrapped nothing in this vLLM: nothing to measure")
    n = args.prompts or point.num_prompts
    params = SamplingParams(max_tokens=shape.output_len, ignore_eos=True, temperature=0.0)
    seeds = itertools.count()  # fresh prompts for every run

    def run(on: bool) -> dict:
        prof.set_enabled(on)
        prompts = [TokensPrompt(prompt_token_ids=ids) for ids in make_prompts(n, shape.input_len, vocab, next(seeds))]
        t0 = time.perf_counter()
        outs = llm.generate(prompts, params, use_tqdm=False)
        wall = time.perf_counter() - t0
        tokens = sum(len(o.outputs[0].token_ids) for o in outs)
        return {
            "plugin": "on" if on else "off",
            "tokens": tokens,
            "wall_s": round(wall, 4),
            "tok_s": round(tokens / wall, 2),
        }

    run(True), run(False)  # warm-up, not counted
    runs, ratios = [], []
    for i in range(args.rounds):
        order = (True, False) if i % 2 == 0 else (False, True)
        pair = {on: run(on) for on in order}
        runs += [pair[order[0]], pair[order[1]]]
        ratios.append(pair[True]["tok_s"] / pair[False]["tok_s"])
        print(
            f"round {i}: on {pair[True]['tok_s']:.0f} off {pair[False]['tok_s']:.0f} tok/s ratio {ratios[-1]:.4f}",
            file=sys.stderr,
            flush=True,
        )
    prof.set_enabled(True)
    ranges = None
    if prof.recorder is not None:
        prof.recorder.close()
        from bench.profiling.timing import load_timing_dir

        ranges = load_timing_dir(work / "timing")["name"].value_counts().to_dict()

    boot = random.Random(1)
    means = sorted(statistics.fmean(boot.choices(ratios, k=len(ratios))) for _ in range(5000))
    result = {
        "benchmark": "plugin_overhead",
        "mode": args.mode,
        "profile": profile.name,
        "point": point.id,
        "engine": engine.label(),
        "shape": shape.label,
        "prompts_per_run": n,
        "vllm": plugin.vllm_version(),
        "device": machine.to_dict(),
        "wrapped_ranges": wrapped,
        "runs": runs,
        "round_ratios_on_over_off": [round(r, 4) for r in ratios],
        "ratio_median": round(statistics.median(ratios), 4),
        "ratio_mean": round(statistics.fmean(ratios), 4),
        "ratio_mean_ci95": [round(means[int(0.025 * len(means))], 4), round(means[int(0.975 * len(means)) - 1], 4)],
        "on_tok_s_median": statistics.median(r["tok_s"] for r in runs if r["plugin"] == "on"),
        "off_tok_s_median": statistics.median(r["tok_s"] for r in runs if r["plugin"] == "off"),
        "ranges_recorded_while_on": ranges,
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
