"""Per-point metrics, derived from raw request records and /metrics snapshots. Unknown stays None, never 0."""

from __future__ import annotations

import math

import numpy as np

from bench.core.errors import BenchError
from bench.measure import window as W

SPEC_COUNTERS = {
    "drafts": "vllm:spec_decode_num_drafts_total",
    "draft_tokens": "vllm:spec_decode_num_draft_tokens_total",
    "accepted_tokens": "vllm:spec_decode_num_accepted_tokens_total",
}
PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
# Counters of what can make a window run faster or slower than its workload asks (vLLM v1's /metrics; in tokens for
# the prefix cache): hits on prompts that were meant to be fresh, and preempted requests (recomputed later).
CACHE_COUNTERS = {
    "prefix_cache_queries": "vllm:prefix_cache_queries_total",
    "prefix_cache_hits": "vllm:prefix_cache_hits_total",
    "preemptions": "vllm:num_preemptions_total",
}
# What vLLM's own stat logger counted (summed over engines and, for requests, over finish reasons: stop, length,
# abort...): the independent count that the client's token and request counts are checked against per window
# (`served_check`; a mismatch flags the point), with vLLM's mean TTFT and TPOT reported beside the client's (never
# flagged). The client's counts come from each response's usage and its times from its own clock; these come from
# the engine's iteration stats, timed by vLLM's front end, and also see traffic the client did not send. vLLM 0.26.0 and 0.32.0 both have them (v1/metrics/loggers.py).
SERVED_COUNTERS = {
    "generation_tokens": "vllm:generation_tokens_total",
    "finished_requests": "vllm:request_success_total",
    "ttft_s_sum": "vllm:time_to_first_token_seconds_sum",
    "ttft_count": "vllm:time_to_first_token_seconds_count",
    "tpot_s_sum": "vllm:request_time_per_output_token_seconds_sum",
    "tpot_count": "vllm:request_time_per_output_token_seconds_count",
}


def parse_prometheus(text: str) -> list[tuple[str, dict[str, str], float]]:
    """(sample name, labels, value) of every sample in a Prometheus text exposition (prometheus_client's
    parser: counters keep their `_total` sample names, histograms their `_bucket` / `_sum` / `_count`). A page
    that does not parse is a server problem worth its own error, not an empty reading."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        return [
            (s.name, dict(s.labels), float(s.value))
            for fam in text_string_to_metric_families(text)
            for s in fam.samples
        ]
    except ValueError as exc:
        raise BenchError(f"the server's /metrics page does not parse as Prometheus text ({exc})") from exc


def spec_counters(samples) -> dict:
    """Totals of the spec-decode counters (summed over engines), per-position by position label."""
    out: dict = {k: None for k in SPEC_COUNTERS}
    per_pos: dict[int, float] = {}
    for name, labels, value in samples:
        for key, metric in SPEC_COUNTERS.items():
            if name == metric:
                out[key] = (out[key] or 0.0) + value
        if name == PER_POSITION and "position" in labels:
            pos = int(labels["position"])
            per_pos[pos] = per_pos.get(pos, 0.0) + value
    out["per_position"] = [per_pos[p] for p in sorted(per_pos)] if per_pos else None
    return out


def counter_totals(samples, counters: dict[str, str]) -> dict:
    """{key: the counter's total summed over every label set}, None where the server has no such counter."""
    out: dict = {k: None for k in counters}
    for name, _labels, value in samples:
        for key, metric in counters.items():
            if name == metric:
                out[key] = (out[key] or 0.0) + value
    return out


def counter_deltas(before: dict, after: dict, counters: dict[str, str]) -> dict:
    """{key: after - before} for each of `counters`' keys between two `counter_totals` snapshots (None where either
    is unknown)."""
    return {
        k: (after[k] - before[k]) if after.get(k) is not None and before.get(k) is not None else None for k in counters
    }


def served_check(before: dict, after: dict, measured_rows: list[dict]) -> dict:
    """One window's cross-check: what vLLM counted and timed (SERVED_COUNTERS between two snapshots) beside what the
    client received and timed in that window's measured requests (tokens from each response's usage; requests sent;
    TTFT and TPOT of the successful ones, bench.measure.metrics.request_latencies). Sums and counts, so that windows add."""
    d = counter_deltas(before, after, SERVED_COUNTERS)
    lat = [request_latencies(r) for r in measured_rows]
    ttft = [x["ttft"] for x in lat if x["ttft"] is not None]
    tpot = [x["tpot"] for x in lat if x["tpot"] is not None]
    return {
        "server_generation_tokens": d["generation_tokens"],
        "server_finished_requests": d["finished_requests"],
        "client_output_tokens": sum(r.get("output_tokens") or 0 for r in measured_rows),
        "client_requests": len(measured_rows),
        "server_ttft_ms_sum": None if d["ttft_s_sum"] is None else d["ttft_s_sum"] * 1e3,
        "server_ttft_count": d["ttft_count"],
        "server_tpot_ms_sum": None if d["tpot_s_sum"] is None else d["tpot_s_sum"] * 1e3,
        "server_tpot_count": d["tpot_count"],
        "client_ttft_ms_sum": sum(ttft),
        "client_ttft_count": len(ttft),
        "client_tpot_ms_sum": sum(tpot),
        "client_tpot_count": len(tpot),
    }


def served_total(checks: list[dict]) -> dict:
    """Windows' cross-checks together (None where any window's is unknown), with vLLM's tokens over the client's
    (`token_ratio`) and both sides' mean TTFT and TPOT in ms (`*_ms_vllm`, `*_ms_client`)."""
    keys = dict.fromkeys(k for c in checks for k in c)
    out: dict = {}
    for key in keys:
        values = [c.get(key) for c in checks]
        out[key] = None if any(v is None for v in values) else sum(values)
    server, client = out.get("server_generation_tokens"), out.get("client_output_tokens")
    out["token_ratio"] = server / client if server is not None and client else None
    for metric in ("ttft", "tpot"):
        for side, name in (("server", "vllm"), ("client", "client")):
            total, n = out.get(f"{side}_{metric}_ms_sum"), out.get(f"{side}_{metric}_count")
            out[f"{metric}_ms_{name}"] = total / n if total is not None and n else None
    return out


def cache_delta(before: dict, after: dict) -> dict:
    """Prefix-cache hits and preemptions over a window, and the hit rate (hit tokens over queried tokens)."""
    d = counter_deltas(before, after, CACHE_COUNTERS)
    q, h = d["prefix_cache_queries"], d["prefix_cache_hits"]
    return {**d, "prefix_cache_hit_rate": h / q if q and h is not None else None}


def info_labels(samples, metric: str) -> dict[str, str] | None:
    for name, labels, _ in samples:
        if name == metric:
            return labels
    return None


def counter_delta(before: dict, after: dict) -> dict:
    """The spec-decode counts between two counter snapshots (None where either side is unknown)."""
    d = counter_deltas(before, after, SPEC_COUNTERS)
    pos = None
    if after.get("per_position") and before.get("per_position") is not None:
        b = before["per_position"] + [0.0] * (len(after["per_position"]) - len(before["per_position"]))
        pos = [a - x for a, x in zip(after["per_position"], b)]
    return {**d, "per_position": pos}


def acceptance(counts: dict) -> dict:
    """Acceptance from spec-decode counts (drafts = verify steps)."""
    drafts, draft_tokens, accepted = counts.get("drafts"), counts.get("draft_tokens"), counts.get("accepted_tokens")
    pos = counts.get("per_position")
    return {
        "num_drafts": drafts,
        "num_draft_tokens": draft_tokens,
        "num_accepted_tokens": accepted,
        "acceptance_rate": accepted / draft_tokens if draft_tokens else None,
        "mean_acceptance_length": 1 + accepted / drafts if drafts and accepted is not None else None,
        "per_position_acceptance": [p / drafts for p in pos] if pos is not None and drafts else None,
    }


def acceptance_length_se(per_position: list[float] | None, drafts: float | None) -> float | None:
    """Standard error of the mean acceptance length over `drafts` verify steps, from the per-position acceptance
    fractions (position i accepted in a fraction p_i of the steps, so a step accepts X >= i drafts with p_i: E[X] =
    sum p_i, E[X^2] = sum (2i - 1) p_i), if the steps are independent draws. That holds for vLLM's synthetic
    acceptance (one uniform draw per position and step); a real draft's steps correlate within a request, and this
    understates their error. None without per-position fractions or steps."""
    if not per_position or not drafts:
        return None
    mean = sum(per_position)
    square = sum((2 * i + 1) * p for i, p in enumerate(per_position))
    return math.sqrt(max(square - mean * mean, 0.0) / drafts)


def spec_delta(before: dict, after: dict) -> dict:
    """Acceptance over the measured window from two counter snapshots."""
    return acceptance(counter_delta(before, after))


def request_counts(rows: list[dict]) -> dict | None:
    """Spec-decode counts summed over requests from the server's per-request numbers (vLLM
    --per-request-spec-decode-metrics: verify steps, drafted and accepted tokens, and a histogram of steps that
    accepted exactly j draft tokens, so position i was accepted by the steps with j >= i). None unless every
    request carries them."""
    if not rows or any(r.get("spec_steps") is None for r in rows):
        return None
    hists = [list(r.get("spec_histogram") or []) for r in rows]
    k = max(len(h) for h in hists) - 1
    per_position = [float(sum(sum(h[i:]) for h in hists)) for i in range(1, k + 1)] if k > 0 else None
    return {
        "drafts": float(sum(r["spec_steps"] for r in rows)),
        "draft_tokens": float(sum(r.get("spec_draft_tokens") or 0 for r in rows)),
        "accepted_tokens": float(sum(r.get("spec_accepted_tokens") or 0 for r in rows)),
        "per_position": per_position,
    }


def distribution(values) -> dict:
    """mean, p50, p90, p99 and n of the known values (None and NaN left out)."""
    return W.distribution([v for v in values if v is not None and not math.isnan(v)])


def request_latencies(rec: dict) -> dict:
    """TTFT, TPOT, E2E (ms) and token-accurate ITLs of one successful request record (dict form).

    A chunk that carries k tokens after a gap g contributes k inter-token latencies of g/k each, so ITL and
    TPOT agree under speculative decoding.
    """
    times, tokens = rec["chunk_times"], rec["chunk_tokens"]
    if rec["status"] != "ok" or not times:
        return {"ttft": None, "tpot": None, "e2e": None, "itl": []}
    send, end = rec["send_time"], rec["end_time"]
    ttft = (times[0] - send) * 1e3
    out_tokens = sum(tokens)
    tpot = (times[-1] - times[0]) * 1e3 / (out_tokens - tokens[0]) if out_tokens > tokens[0] else None
    itl = []
    if tokens[0] > 1:
        itl += [0.0] * (tokens[0] - 1)  # tokens delivered with the first one
    for i in range(1, len(times)):
        gap = (times[i] - times[i - 1]) * 1e3
        itl += [gap / tokens[i]] * tokens[i]
    return {"ttft": ttft, "tpot": tpot, "e2e": (end - send) * 1e3, "itl": itl}


def _serving_time(measured: list[dict]) -> float:
    """Seconds from first send to last end, summed per trial: the pauses between trials are not serving time."""
    duration = 0.0
    for trial in sorted({r.get("trial") or 0 for r in measured}):
        rows = [r for r in measured if (r.get("trial") or 0) == trial]
        ends = [r["end_time"] for r in rows if r["end_time"] is not None]
        if ends:
            duration += max(ends) - min(r["send_time"] for r in rows)
    return duration


WHOLE_KEYS = (
    "duration_s",
    "output_throughput",
    "request_throughput",
    "total_token_throughput",
    "per_user_output_throughput",
    "ttft_ms",
    "tpot_ms",
    "itl_ms",
)


def summarize(records: list[dict], concurrency: int | None = None) -> dict:
    """Throughput and latency over the measured requests. With `concurrency` (a closed loop at C in flight) the
    headline figures are the steady window's (bench.measure.window: ramp-up and drain left out), with the engine's step
    time and the precision, and the whole window's sit under `whole`; `window` says which the headline is.
    Without it, or when no steady span exists, the headline is the whole window, labelled so."""
    whole = _whole(records)
    if concurrency is None:
        return {**whole, "window": "whole"}
    measured = [r for r in records if r["phase"] == "measure"]
    steady = W.steady(closed_runs(measured), concurrency)
    if steady is None or not steady["output_throughput"]:
        return {**whole, "window": "whole", "steady": None}
    return {**whole, **_steady_headline(measured, steady, whole), "whole": {k: whole[k] for k in WHOLE_KEYS}}


def closed_runs(measured: list[dict]) -> list[list[dict]]:
    """The measured rows cut into the closed-loop runs that each ramp up, hold C in flight and drain: one per
    trial, and within a trial one per /metrics window when categories were measured apart (each window drains to
    zero before the next starts, so one span across them would take in the drains and ramp-ups between)."""
    keys = sorted({(r.get("trial") or 0, r.get("window") or "") for r in measured})
    return [[r for r in measured if (r.get("trial") or 0, r.get("window") or "") == key] for key in keys]


def _steady_headline(measured: list[dict], steady: dict, whole: dict) -> dict:
    """The steady window's figures under the headline names; TTFT from the requests sent inside the span (a
    prefill under load), or the whole window's when none was (one wave)."""
    spans = [W.Span(a, b) for a, b in steady["spans"]]
    length = steady["span_s"]
    sent = [r for r in measured if any(s.start <= r["send_time"] < s.end for s in spans)]
    done = [r for r in measured if r["status"] == "ok" and any(s.start < (r["end_time"] or 0) <= s.end for s in spans)]
    own_ttft = bool(steady["ttft_ms"]["n"])
    return {
        "window": "steady",
        "output_throughput": steady["output_throughput"],
        "request_throughput": len(done) / length,
        "total_token_throughput": (steady["output_tokens"] + sum(_prompt_tokens(r) for r in sent)) / length,
        "per_user_output_throughput": steady["per_user_output_throughput"],
        "ttft_ms": steady["ttft_ms"] if own_ttft else whole["ttft_ms"],
        "tpot_ms": steady["tpot_ms"],
        "itl_ms": steady["itl_ms"],
        "step_ms": steady["step_ms"],
        "precision": steady["precision"],
        "steady": {
            "span_s": length,
            "spans": steady["spans"],
            "fraction_of_window": length / whole["duration_s"] if whole["duration_s"] else None,
            "output_tokens": steady["output_tokens"],
            "requests_sent": len(sent),
            "requests_finished": len(done),
            "ttft_window": "steady" if own_ttft else "whole",
            "stalls": steady["stalls"],
            "span_throughput": steady["span_throughput"],
            "cycles": steady["cycles"],
            "short": steady["short"],
            "cycle_windows": steady["cycle_windows"],
            "cycle_s": steady["cycle_s"],
            "cycle_tokens": steady["cycle_tokens"],
        },
    }


def _whole(records: list[dict]) -> dict:
    """Throughput and latency distributions over every measured request, first send to last end."""
    measured = [r for r in records if r["phase"] == "measure"]
    ok = [r for r in measured if r["status"] == "ok"]
    lat = [request_latencies(r) for r in ok]
    out = {
        "requests": len(measured),
        "completed": len(ok),
        "errors": len(measured) - len(ok),
        "error_samples": sorted({r["error"] for r in measured if r["error"]})[:5],
    }
    duration = _serving_time(measured)
    if not ok or not duration or duration <= 0:  # unknown, never 0
        return {
            **out,
            "duration_s": None,
            "request_throughput": None,
            "output_throughput": None,
            "total_token_throughput": None,
            "per_user_output_throughput": None,
            **{k: distribution([]) for k in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")},
        }
    output = sum(r["output_tokens"] for r in ok)
    prompt = sum(_prompt_tokens(r) for r in ok)
    tpot = distribution([x["tpot"] for x in lat])
    return {
        **out,
        "duration_s": duration,
        "output_tokens": output,
        "request_throughput": len(ok) / duration,
        "output_throughput": output / duration,
        "total_token_throughput": (output + prompt) / duration,
        "per_user_output_throughput": 1e3 / tpot["mean"] if tpot["mean"] else None,
        "ttft_ms": distribution([x["ttft"] for x in lat]),
        "tpot_ms": tpot,
        "itl_ms": distribution([v for x in lat for v in x["itl"]]),
        "e2e_ms": distribution([x["e2e"] for x in lat]),
    }


def _prompt_tokens(row: dict) -> int:
    """The prompt's tokens: the server's count (text), which for token-id prompts equals the length sent."""
    return row["prompt_tokens"] if row.get("prompt_tokens") is not None else row["prompt_len"]


def category_metrics(rows: list[dict], whole: dict | None = None) -> list[dict]:
    """One row per category of the measured requests: requests, lengths (the actual output lengths), TTFT and
    TPOT, and acceptance with where it came from (`acceptance_source`): the server's per-request numbers summed
    over the category's requests; else, for a point with one category, the point's /metrics window (`whole`,
    "window"); else unknown (None: a mixed window's /metrics counts cannot be split by category)."""
    by_category: dict[str, list[dict]] = {}
    for r in rows:
        if r["phase"] == "measure":
            by_category.setdefault(r.get("category") or "random", []).append(r)
    out = []
    for category, group in sorted(by_category.items()):
        ok = [r for r in group if r["status"] == "ok"]
        counts = request_counts(ok)
        source: str | None = "per-request"
        if counts is None:
            counts = whole if len(by_category) == 1 else None
            source = "window" if counts is not None else None
        lat = [request_latencies(r) for r in ok]
        tpot = distribution([x["tpot"] for x in lat])
        out.append(
            {
                "category": category,
                "requests": len(group),
                "completed": len(ok),
                "conversations": len({r.get("conversation") for r in group if r.get("conversation") is not None}),
                "prompt_tokens_mean": _mean([r.get("prompt_tokens") for r in ok]),
                "output_tokens_mean": _mean([r.get("output_tokens") for r in ok]),
                "output_tokens": sum(r.get("output_tokens") or 0 for r in ok),
                "ttft_p50_ms": distribution([x["ttft"] for x in lat])["p50"],
                "tpot_p50_ms": tpot["p50"],
                "per_user_output_throughput": 1e3 / tpot["mean"] if tpot["mean"] else None,
                "acceptance_source": source,
                **acceptance(counts or {}),
            }
        )
    return out


def _mean(values: list) -> float | None:
    known = [v for v in values if v is not None]
    return float(np.mean(known)) if known else None
