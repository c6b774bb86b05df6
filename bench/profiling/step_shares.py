"""Where a decode step's time goes: the share of each part (the draft's MLA metadata builds, the draft's propose,
the target's forward, rejection sampling) in a decode step, CPU time and GPU busy time, from an analysis's ranges
table (`nsys_ranges.parquet`) alone.

A decode step is a `bench.engine.step` range that holds vLLM's own `execute_context_0(0)_generation_N(...)` range
(a batch with no prefill token, N > 0) and launched GPU work (a step that starts after the CUDA trace stopped has
none). Its parts are the `bench.*` ranges inside it on the same thread; nested ranges are inclusive (the metadata
builds are inside the propose, which is inside `bench.model.sample_tokens` with rejection sampling). Per step, each
part's CPU time over the step's CPU time and its GPU busy time (work it launched, whenever it ran) over the step's;
the table gives medians over the decode steps, which a few steps stalling on the host do not move.

Without vLLM's `execute_context` ranges (nsys run without them, or another vLLM) decode steps cannot be told from
prefill ones: `decode_steps` returns no row and says why (`why_no_steps`).

`bench profile analyze` writes `nsys_step_shares.csv` when the capture has decode steps; `bench profile shares
DIR...` prints the tables for analysis folders side by side.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from bench.core.errors import BenchError
from bench.core.fmt import fmt, md_rows

STEP = "bench.engine.step"
PARTS = {  # range -> what it is
    "bench.draft.attn_metadata": "draft MLA metadata build",
    "bench.draft.propose": "draft propose (incl. the metadata builds)",
    "bench.target.forward": "target forward",
    "bench.sample.rejection": "rejection sampling",
}
DECODE = re.compile(r"execute_context_0\(0\)_generation_([1-9]\d*)\(")
RANGE_COLUMNS = ["global_tid", "name", "start_ns", "end_ns", "cpu_ns", "gpu_busy_ns"]
MARKER = re.compile(r"execute_context_\d+\(\d+\)_generation_\d+\(")


def enclosing(step_start: np.ndarray, step_end: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Index of the step (sorted, non-overlapping on one thread) holding each range, -1 for none."""
    idx = np.searchsorted(step_start, start, side="right") - 1
    ok = (idx >= 0) & (end <= step_end[np.clip(idx, 0, None)])
    return np.where(ok, idx, -1)


def decode_steps(ranges: pd.DataFrame) -> pd.DataFrame:
    """One row per decode step (`decode_step_positions`): its CPU and GPU busy ns, and per part the count and sums
    of the ranges inside it (columns `PART:n`, `PART:cpu`, `PART:gpu`)."""
    columns = ["step_cpu", "step_gpu"] + [f"{p}:{k}" for p in PARTS for k in ("n", "cpu", "gpu")]
    steps = decode_step_positions(ranges)
    if not len(steps):
        return pd.DataFrame(columns=columns)
    frame = pd.DataFrame(
        {
            "step_cpu": ranges["cpu_ns"].to_numpy(float)[steps],
            "step_gpu": ranges["gpu_busy_ns"].to_numpy(float)[steps],
        }
    )
    return pd.concat([frame, nested_per_step(ranges, steps, list(PARTS), ("cpu_ns", "gpu_busy_ns"))], axis=1)[columns]


_SUMS = {"cpu_ns": "cpu", "gpu_busy_ns": "gpu"}  # a range column summed per step -> its column suffix


def nested_per_step(
    ranges: pd.DataFrame, steps: np.ndarray, names: list[str], fields: tuple[str, ...] = ("cpu_ns",)
) -> pd.DataFrame:
    """Row i for the step at position steps[i] of `ranges`: per range name in `names`, the count (`NAME:n`) and the
    sums of `fields` (`NAME:cpu`, `NAME:gpu`) of those ranges inside the step, on its thread."""
    tids, rname = ranges["global_tid"].to_numpy(np.int64), ranges["name"].astype(str).to_numpy()
    starts, ends = ranges["start_ns"].to_numpy(np.int64), ranges["end_ns"].to_numpy(np.int64)
    out = {f"{n}:{k}": np.zeros(len(steps), float) for n in names for k in ("n", *(_SUMS[f] for f in fields))}
    candidates = np.isin(rname, names)
    for tid in np.unique(tids[steps]):
        rows = np.flatnonzero(tids[steps] == tid)
        rows = rows[np.argsort(starts[steps[rows]], kind="stable")]
        inner = np.flatnonzero((tids == tid) & candidates)
        where = enclosing(starts[steps[rows]], ends[steps[rows]], starts[inner], ends[inner])
        at, inner = rows[where[where >= 0]], inner[where >= 0]
        for n in names:
            sel = rname[inner] == n
            out[f"{n}:n"] += np.bincount(at[sel], minlength=len(steps))
            for f in fields:
                out[f"{n}:{_SUMS[f]}"] += np.bincount(
                    at[sel], ranges[f].to_numpy(float)[inner[sel]], minlength=len(steps)
                )
    frame = pd.DataFrame(out)
    counts = [c for c in frame if c.endswith(":n")]
    frame[counts] = frame[counts].astype(np.int64)
    return frame


def decode_step_positions(ranges: pd.DataFrame) -> np.ndarray:
    """Positions (in `ranges`, ascending) of the decode steps `decode_steps` keeps: the engine steps that hold a
    decode-only `execute_context` range on their thread and launched GPU work."""
    names = ranges["name"].astype(str).to_numpy()
    tids = ranges["global_tid"].to_numpy(np.int64)
    starts, ends = ranges["start_ns"].to_numpy(np.int64), ranges["end_ns"].to_numpy(np.int64)
    marker = pd.Series(names).str.match(DECODE).to_numpy()
    keep: list[np.ndarray] = []
    for tid in np.unique(tids[names == STEP]):
        steps = np.flatnonzero((tids == tid) & (names == STEP))
        steps = steps[np.argsort(starts[steps], kind="stable")]
        marks = np.flatnonzero((tids == tid) & marker)
        where = enclosing(starts[steps], ends[steps], starts[marks], ends[marks])
        decode = np.zeros(len(steps), bool)
        decode[where[where >= 0]] = True
        keep.append(steps[decode & (ranges["gpu_busy_ns"].to_numpy()[steps] > 0)])
    return np.sort(np.concatenate(keep)) if keep else np.zeros(0, np.int64)


def why_no_steps(ranges: pd.DataFrame) -> str:
    """Why `decode_steps` found none, in one sentence."""
    names = ranges["name"].astype(str)
    if not (names == STEP).any():
        return f"no {STEP} range (the suite's plugin was not active in the engine, BENCH_NVTX=1)"
    if not names.str.match(MARKER).any():
        return "no vLLM execute_context range to tell decode steps from prefill ones (vLLM's NVTX scopes were off)"
    if not names.str.match(DECODE).any():
        return "every engine step held prefill tokens"
    return "no decode step launched GPU work inside the CUDA trace"


def shares(steps: pd.DataFrame) -> pd.DataFrame:
    """Per part (and the step itself, first): median ranges per step, median CPU and GPU busy ms, and the median
    share of the step's CPU and GPU busy time."""
    rows = [
        {
            "part": STEP,
            "what": "decode step",
            "per_step": 1.0,
            "cpu_ms": float(np.median(steps["step_cpu"])) / 1e6,
            "cpu_share": 1.0,
            "gpu_busy_ms": float(np.median(steps["step_gpu"])) / 1e6,
            "gpu_share": 1.0,
        }
    ]
    for part, what in PARTS.items():
        cpu, gpu = steps[f"{part}:cpu"], steps[f"{part}:gpu"]
        rows.append(
            {
                "part": part,
                "what": what,
                "per_step": float(np.median(steps[f"{part}:n"])),
                "cpu_ms": float(np.median(cpu)) / 1e6,
                "cpu_share": float(np.median(cpu / steps["step_cpu"])),
                "gpu_busy_ms": float(np.median(gpu)) / 1e6,
                "gpu_share": float(np.median(gpu / steps["step_gpu"])),
            }
        )
    return pd.DataFrame(rows)


def shares_markdown(table: pd.DataFrame, decode: int, engine_steps: int) -> str:
    """One capture's table, as `bench profile shares` prints it."""
    rows = (
        [
            f"{r.what} (`{r.part}`)",
            f"{fmt(r.per_step)}",
            f"{fmt(r.cpu_ms, '.3f')}",
            f"{fmt(r.cpu_share, '.1%')}",
            f"{fmt(r.gpu_busy_ms, '.3f')}",
            f"{fmt(r.gpu_share, '.1%')}",
        ]
        for r in table.itertuples()
    )
    head = ["part", "per step", "CPU ms", "share of step CPU", "GPU busy ms", "share of step GPU busy"]
    intro = f"{decode} decode steps of {engine_steps} engine steps; medians over the decode steps:\n\n"
    return intro + "\n".join(md_rows(head, rows)) + "\n"


def comparison_markdown(tables: dict[str, pd.DataFrame]) -> str:
    """Captures side by side: each part's median share of a decode step, CPU / GPU busy."""
    rows = []
    for part, what in PARTS.items():
        cells = []
        for t in tables.values():
            r = t.set_index("part").loc[part]
            cells.append(f"{fmt(r.cpu_share, '.1%')} / {fmt(r.gpu_share, '.1%')}")
        rows.append([what, *cells])
    steps = [
        f"{fmt(t.iloc[0].cpu_ms, '.1f')} / {fmt(t.iloc[0].gpu_busy_ms, '.2f')} ms" for t in tables.values()
    ]  # row 0: the step itself
    rows.append(["decode step, CPU / GPU busy (median)", *steps])
    return "\n".join(md_rows(["share of a decode step, CPU / GPU busy", *tables], rows)) + "\n"


@dataclass
class CaptureShares:
    """One analysis folder's decode steps: the shares table, or why there is none."""

    folder: Path
    engine_steps: int
    decode: int
    table: pd.DataFrame | None
    why_none: str | None


def analysis_folder(path: str | Path) -> Path:
    """The folder holding nsys_ranges.parquet: `path` itself, or the one analysis of a `bench profile` results
    folder (profile/capture-*.analysis)."""
    path = Path(path)
    if (path / "nsys_ranges.parquet").is_file():
        return path
    found = sorted(path.glob("profile/capture-*.analysis")) + sorted(path.glob("capture-*.analysis"))
    if len(found) == 1:
        return found[0]
    if not found:
        raise BenchError(
            f"{path}: no nsys_ranges.parquet (not a `bench profile analyze` folder or a profile's results)"
        )
    raise BenchError(f"{path}: {len(found)} captures; name one of: {', '.join(str(f) for f in found)}")


def shares_of(ranges: pd.DataFrame, folder: Path) -> CaptureShares:
    steps = decode_steps(ranges)
    engine_steps = int((ranges["name"] == STEP).sum())
    if steps.empty:
        return CaptureShares(folder, engine_steps, 0, None, why_no_steps(ranges))
    return CaptureShares(folder, engine_steps, len(steps), shares(steps), None)


def read_shares(path: str | Path) -> CaptureShares:
    folder = analysis_folder(path)
    try:
        ranges = pd.read_parquet(folder / "nsys_ranges.parquet", columns=RANGE_COLUMNS)
    except (OSError, ValueError, KeyError) as exc:
        raise BenchError(f"cannot read {folder / 'nsys_ranges.parquet'} ({exc})") from exc
    return shares_of(ranges, folder)


def shares_report(captures: dict[str, CaptureShares]) -> str:
    """`bench profile shares`: each capture's table (or why it has none), then the captures side by side."""
    parts = []
    for label, c in captures.items():
        parts.append(f"### {label}\n\n")
        if c.table is None:
            parts.append(f"No decode steps: {c.why_none}.\n\n")
        else:
            parts.append(shares_markdown(c.table, c.decode, c.engine_steps) + "\n")
    tables = {label: c.table for label, c in captures.items() if c.table is not None}
    if len(tables) > 1:
        parts.append(comparison_markdown(tables))
    return "".join(parts)
