"""The roofline checked against measurement: per point, the modelled bytes of a decode step over the measured step
time = the HBM bandwidth the step achieved, as a share of the GPU's, and one sentence saying whether model and
measurement agree and, where they do not, what the results show about why.

Measured step time (`step_measurement`): the engine's decode step measured directly where the point record has it
(metrics.step_ms, the gaps between streamed chunks while all of the point's requests decode; its p50, labelled
"steady step p50"); else derived, as before, as mean TPOT x mean acceptance length (1 without a draft): TPOT is per
output token of one request, and one step (a draft round + the target's verify) yields mean-acceptance-length
tokens per request. Mean TPOT is 1000 / per-user output tok/s (bench.measure.metrics.summarize defines per-user tok/s that
way). The derived step holds whatever else the whole window holds (ramp-up, tail, prefill), the steady one less.

What the results tell besides the numbers (read from the results directory alone):
- prefill mixed into decode: from the raw request records, the share of the measured requests' decode time
  (first to last streamed token) during which some measured request was still waiting for its first token;
  those steps carry prefill chunks the byte model does not count;
- vLLM's whole-engine CUDA graph downgrade (a TRITON_MLA draft on 0.26.0), re-read from the server log with
  bench.measure.effective (results written before the run-time flag existed have only the log).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from bench.core.fmt import fmt
from bench.measure.effective import read_effective
from bench.results.records import PointRecord
from bench.results.store import SweepStore

# A decode window with prefill running next to it this much of the time is not a pure decode measurement.
OVERLAP_SHARE = 0.10
# At or above this share of peak bandwidth the step is bandwidth-bound as the model assumes (HBM reads rarely
# reach more than ~80-90% of a datasheet figure); below FAR_BELOW most of the step is something else.
NEAR_ROOFLINE = 0.70
FAR_BELOW = 0.35


@dataclass
class StepFacts:
    """What the results say about a point's measured step beyond its metrics."""

    prefill_overlap: dict[str, float] = field(default_factory=dict)  # point id -> share of decode time
    downgrades: dict[str, dict] = field(default_factory=dict)  # engine id -> {asked, ran, because_of}


def step_facts(
    sweep_dir: Path, records: dict[str, PointRecord] | None = None, raw: dict[str, list[dict]] | None = None
) -> StepFacts:
    """The prefill overlap of every point with raw records and the CUDA graph downgrade of every engine whose
    server log says so. `records`, `raw`: the directory's point records and raw request rows when already read
    (bench.report.request_views.read_raw), so that a report reads them once."""
    store, facts = SweepStore(sweep_dir), StepFacts()
    records = store.records() if records is None else records
    logs_read: set[str] = set()  # one read of each engine's log, downgrade or not
    for pid, point in records.items():
        rows = None
        if raw is not None:
            rows = pd.DataFrame(raw[pid]) if pid in raw else None
        elif (path := store.root / point.raw if point.raw else store.raw_path(pid)).is_file():
            rows = pd.read_parquet(path)
        if rows is not None and len(rows):
            share = prefill_overlap(rows)
            if share is not None:
                facts.prefill_overlap[pid] = share
        engine = point.engine_id
        log = store.log_path(engine) if engine else None
        if engine not in logs_read and log is not None and log.is_file():
            logs_read.add(engine)
            down = read_effective(log.read_text(errors="replace"), []).get("cudagraph_downgrade")
            if down:
                facts.downgrades[engine] = down
    return facts


def prefill_overlap(raw: pd.DataFrame) -> float | None:
    """Share of the measured requests' decode time (first to last chunk) that overlaps some measured request's
    prefill (send to first chunk); None without a measured request that streamed two chunks."""
    if "phase" in raw:  # warmup requests ran before the window
        raw = raw[raw.phase == "measure"]
    if "status" in raw:
        raw = raw[raw.status == "ok"]
    prefills, decodes = [], []
    for send, chunks in zip(raw.send_time, raw.chunk_times):
        times = list(chunks) if chunks is not None else []
        if not times:
            continue
        prefills.append((float(send), float(times[0])))
        if len(times) > 1:
            decodes.append((float(times[0]), float(times[-1])))
    total = sum(end - start for start, end in decodes)
    if not decodes or total <= 0:
        return None
    merged = _union(prefills)
    overlap = sum(_overlap(start, end, merged) for start, end in decodes)
    return overlap / total


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def _overlap(start: float, end: float, merged: list[tuple[float, float]]) -> float:
    return sum(max(0.0, min(end, b) - max(start, a)) for a, b in merged)


def measured_step(per_user_tok_s: object, mean_acceptance_length: object) -> tuple[float, float] | None:
    """(mean TPOT ms, step ms) of a point; None when either is unknown."""
    per_user, mal = number(per_user_tok_s), number(mean_acceptance_length)
    if per_user is None or mal is None or per_user <= 0:
        return None
    tpot_ms = 1e3 / per_user
    return tpot_ms, tpot_ms * mal


STEADY_STEP = "steady step p50"
DERIVED_STEP = "mean TPOT x mean acceptance length"


def step_measurement(r, mal: float) -> tuple[float | None, float | None, str | None]:
    """(mean TPOT ms, step ms, where the step comes from) of a points-table row: the directly measured step's p50
    (column step_p50_ms, from metrics.step_ms) when the row has one, else mean TPOT x mean acceptance length
    (`mal`); (None, None, None) when neither is known. Rows read with getattr: tables without the column work."""
    derived = measured_step(getattr(r, "per_user_output_throughput", None), mal)
    tpot_ms = derived[0] if derived else None
    steady = number(getattr(r, "step_p50_ms", None))
    if steady is not None and steady > 0:
        window = getattr(r, "window", None)
        label = f"step p50 ({window} window)" if isinstance(window, str) and window != "steady" else STEADY_STEP
        return tpot_ms, steady, label
    if derived is None:
        return None, None, None
    return tpot_ms, derived[1], DERIVED_STEP


def explain(
    *,
    concurrency: int,
    k: int,
    fraction: float,
    overlap: float | None = None,
    downgrade: dict | None = None,
    emulated_extra: float = 0.0,
) -> str:
    """Where the modelled bytes and the measured step agree, and where not, why: the bound first (or what the
    results show overrides it), then what else the measured step holds."""
    if fraction > 1.0:
        reasons = [
            f"faster than its modelled bytes allow ({fmt(fraction, '.0%')} of peak): the model overcounts (routing less "
            "spread than uniform, or reads served from L2)"
        ]
    elif downgrade:
        reasons = [
            f"{fmt(fraction, '.0%')} of peak: vLLM ran the whole engine with {downgrade['ran']} CUDA graphs instead of "
            f"{downgrade['asked']} (because of {downgrade['because_of']}; server log), so launches, not bytes, set "
            "the step"
        ]
    else:
        reasons = [_bound(concurrency, k, fraction)]
    if overlap is not None and overlap >= OVERLAP_SHARE:
        reasons.append(
            f"prefill mixed in: another request was prefilling during {fmt(overlap, '.0%')} of the decode time, so the "
            "measured step holds prefill chunks the model does not count (decode alone is faster)"
        )
    if emulated_extra:
        reasons.append(
            f"emulated DCP rank: {fmt(emulated_extra / 1e9, '.2f')} GB of the modelled bytes are projections sized for the "
            "gathered heads, which a real DCP rank does not read"
        )
    return "; ".join(reasons) + "."


def _bound(concurrency: int, k: int, fraction: float) -> str:
    unmodelled = "launches, activations, sampler" + (", draft metadata and its sequential passes" if k else "")
    if fraction >= NEAR_ROOFLINE:
        return f"agrees: bandwidth-bound, {fmt(fraction, '.0%')} of peak"
    if fraction < FAR_BELOW and concurrency == 1:
        return f"latency-bound at batch 1: the step takes {fmt(1 / fraction, '.1f')}x its bytes' time at peak ({unmodelled})"
    where = "far below" if fraction < FAR_BELOW else "below"
    return f"{where} the roofline ({fmt(fraction, '.0%')} of peak): the rest of the step is work the model omits ({unmodelled})"


def number(v: object) -> float | None:
    """A finite float, or None (None, NaN, text)."""
    try:
        f = float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None
