"""Benchmark: what one call through the NVTX plugin's wrapper costs, against the bare function, with no tool
attached (what BENCH_NVTX=1 installs) and with nvtx's own no-op calls forced. Moved out of the unit tests, where it
asserted a time per call (a benchmark, not a test). The end-to-end effect on decode: plugin_overhead.py.

Usage: python benchmarks/wrapper_per_call.py [--number 100000] [--repeat 5]
Prints one JSON document: ns per call, best of the repeats, and the differences to the bare function.
"""

from __future__ import annotations

import argparse
import json
import timeit

from bench.profiling import wrapping


def per_call_ns(fn, number: int, repeat: int) -> float:
    return min(timeit.repeat(lambda: fn(1), number=number, repeat=repeat)) / number * 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--number", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()

    def noop(x):
        return x

    bare_ns = per_call_ns(noop, args.number, args.repeat)
    wrapped_ns = per_call_ns(wrapping.make_wrapper(noop, "bench.x"), args.number, args.repeat)
    forced_ns: float | None = None
    try:
        import nvtx

        forced = wrapping.make_wrapper(noop, "bench.x", domain=nvtx.get_domain("bench"))
        forced_ns = per_call_ns(forced, args.number, args.repeat)
    except ImportError:
        pass
    out = {"bare_ns": bare_ns, "wrapped_ns": wrapped_ns, "nvtx_forced_ns": forced_ns}
    out["wrapped_minus_bare_ns"] = wrapped_ns - bare_ns
    if forced_ns is not None:
        out["nvtx_forced_minus_bare_ns"] = forced_ns - bare_ns
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
