"""Per-point metrics, derived from raw request records and /metrics snapshots. Unknown stays None, never 0."""

from __future__ import annotations

import math
import re
import urllib.request

import numpy as np

_LINE_RE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
_LABEL_RE = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
SPEC_COUNTERS = {
    "drafts": "vllm:spec_decode_num_drafts_total",
    "draft_tokens": "vllm:spec_decode_num_draft_tokens_total",
    "accepted_tokens": "vllm:spec_decode_num_accepted_tokens_total",
}
PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos_total"


def parse_prometheus(text: str) -> list[tuple[str, dict[str, str], float]]:
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _LINE_RE.match(line)
        if m:
            try:
                out.append((m.group(1), dict(_LABEL_RE.findall(m.group(2) or "")), float(m.group(3))))
            except ValueError:
                continue
    return out


def scrape(base_url: str, timeout: float = 10) -> str:
    with urllib.request.urlopen(base_url + "/metrics", timeout=timeout) as resp:
        return resp.read().decode()


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


def info_labels(samples, metric: str) -> dict[str, str] | None:
    for name, labels, _ in samples:
        if name == metric:
            return labels
    return None


def spec_delta(before: dict, after: dict) -> dict:
    """Acceptance over the measured window from two counter snapshots."""
    d = {
        k: (after[k] - before[k]) if after.get(k) is not None and before.get(k) is not None else None
        for k in SPEC_COUNTERS
    }
    pos = None
    if after.get("per_position") and before.get("per_position") is not None:
        b = before["per_position"] + [0.0] * (len(after["per_position"]) - len(before["per_position"]))
        pos = [a - x for a, x in zip(after["per_position"], b)]
    drafts, draft_tokens, accepted = d["drafts"], d["draft_tokens"], d["accepted_tokens"]
    return {
        "num_drafts": drafts,
        "num_draft_tokens": draft_tokens,
        "num_accepted_tokens": accepted,
        "acceptance_rate": accepted / draft_tokens if draft_tokens else None,
        "mean_acceptance_length": 1 + accepted / drafts if drafts else None,
        "per_position_acceptance": [p / drafts for p in pos] if pos is not None and drafts else None,
    }


def distribution(values) -> dict:
    arr = np.asarray([v for v in values if v is not None and not math.isnan(v)], dtype=float)
    if arr.size == 0:
        return {"mean": None, "p50": None, "p90": None, "p99": None, "n": 0}
    return {
        "mean": float(arr.mean()),
        "p50": float(np.percentile(arr, 50)),
        "p90": float(np.percentile(arr, 90)),
        "p99": float(np.percentile(arr, 99)),
        "n": int(arr.size),
    }


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


def summarize(records: list[dict]) -> dict:
    """Throughput and latency distributions over the measured requests."""
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
    prompt = sum(r["prompt_len"] for r in ok)
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
