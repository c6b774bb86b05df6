"""A decode step by path: where its GPU time goes (the target's attention by path, the draft, the loopback DCP
collectives, the rest) and how much of the step the GPU spent idle, per decode step, from an nsys analysis.

Issue 39 item 1: under DCP, FLASHMLA's verify tokens go down the MLA prefill-with-context path instead of the decode
kernel. This separates the two. Needs the attention ranges of `BENCH_NVTX_ATTENTION=1` (docs/nvtx-ranges.md, "MLA
attention paths"); a capture without them gets no table and one sentence saying why (`StepPaths.why_none`), never
zeros.

Each GPU activity (kernel, memcpy, memset) launched inside a decode step (`step_shares.decode_step_positions`: a
`bench.engine.step` holding a decode-only `execute_context` range) gets one category, the first of `CATEGORIES`
that fits the ranges its launch lies in (on the launching thread) and, for a few, its kernel name. GEMMs are never
told apart by name (cuBLAS / CUTLASS names follow the shape, and the same kernels serve every layer): the
up-projection of the context is what `bench.attn.prefill_context` launched that is not gather, attention, reorder,
merge or collective. Per step and category: the GPU busy time (union of the intervals, so overlap across streams
is not counted twice). Per step: its wall time (the engine step's CPU range), the union of all its GPU work, the
part of that union inside the step's window, and the host gap: wall minus that part (time in the step in which the
GPU ran none of the step's work). CPU time in the attention ranges per step is given too (`reorg_kvcache`'s host
loop shows there).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from bench.core.errors import BenchError
from bench.core.fmt import fmt, md_rows
from bench.profiling import step_shares
from bench.profiling import targets as t

# Flags of the ranges an activity's launch lies in.
_FLAGS = {
    t.DRAFT_PROPOSE: 1 << 0,
    t.DRAFT_GRAPH_REPLAY: 1 << 0,
    t.DCP_COLLECTIVE: 1 << 1,
    t.ATTN_DECODE: 1 << 2,
    t.ATTN_DCP_COMBINE: 1 << 3,
    t.ATTN_PREFILL: 1 << 4,
    t.ATTN_PREFILL_CONTEXT: 1 << 5,
    t.ATTN_REORG: 1 << 6,
    t.ATTN_PREFILL_KERNEL: 1 << 7,
    t.ATTN_LAYER: 1 << 8,
}
DRAFT, COLL, DEC, COMB, PRE, CTX, REORG, PATT, LAYER = (
    _FLAGS[n]
    for n in (
        t.DRAFT_PROPOSE,
        t.DCP_COLLECTIVE,
        t.ATTN_DECODE,
        t.ATTN_DCP_COMBINE,
        t.ATTN_PREFILL,
        t.ATTN_PREFILL_CONTEXT,
        t.ATTN_REORG,
        t.ATTN_PREFILL_KERNEL,
        t.ATTN_LAYER,
    )
)
# Kernel names (read from the vLLM 0.26.0 wheel's binaries, docs/nsys-analysis.md): only where a range cannot tell.
GATHER = re.compile(r"gather_and_maybe_dequant_cache|cp_gather_cache|cp_gather_and_upconvert|gather_cache")
MERGE = re.compile(r"merge_attn_states")
KV_WRITE = re.compile(r"concat_and_cache_mla")

# (key, what), in precedence order: an activity takes the first that fits.
CATEGORIES = {
    "draft": "draft: all it launched (bench.draft.propose, its own attention layers included)",
    "collective": "loopback DCP collectives (bench.dcp.collective; local copies, not NVLink)",
    "decode.kernel": "decode path: the decode kernels (bench.attn.decode: FlashMLA split-KV, combine, metadata)",
    "decode.dcp_combine": "decode path: DCP LSE correction (bench.attn.dcp_combine, less its collectives)",
    "prefill.gather": "prefill-with-context: cache gather / dequantisation (by kernel name)",
    "prefill.reorg": "prefill-with-context: reorg_kvcache's copies (bench.attn.reorg_kvcache)",
    "prefill.attention": "prefill-with-context: attention (bench.attn.prefill_attn: new tokens and context chunks)",
    "prefill.merge": "prefill-with-context: merge_attn_states (by kernel name)",
    "prefill.up_proj": "prefill-with-context: kv_b up-projection of the context, with its casts and copies (the "
    "rest of bench.attn.prefill_context)",
    "prefill.other": "prefill-with-context: the rest of bench.attn.prefill (new tokens' kv_b up-projection, casts)",
    "attn.other": "attention layer, either path: the rest of bench.attn.layer (q up-projection W_UK_T, fp8 "
    "concat-quant, DCP query gather's copies, v up-projection)",
    "kv_write": "KV cache writes (concat_and_cache_mla*, by kernel name)",
    "other": "the rest of the step (MoE, linear layers, norms, sampling, ...)",
}
KEYS = list(CATEGORIES)
GROUPS = {  # subtotals shown in the summary (sums of the categories' busy times)
    "decode path": ["decode.kernel", "decode.dcp_combine"],
    "prefill-with-context path": [k for k in KEYS if k.startswith("prefill.")],
    "attention, all (both paths and the layer's rest; collectives apart)": [
        k for k in KEYS if k.startswith(("decode.", "prefill.", "attn."))
    ],
}
CPU_RANGES = (  # CPU time per step inside these ranges (host work: reorg_kvcache's loop shows here)
    t.ATTN_LAYER,
    t.ATTN_DECODE,
    t.ATTN_PREFILL,
    t.ATTN_PREFILL_CONTEXT,
    t.ATTN_REORG,
    t.DCP_COLLECTIVE,
    t.DRAFT_PROPOSE,
)
WHY_NO_ATTENTION = (
    "no bench.attn.* range inside any of the {n} decode steps: the by-path split is unavailable (the server ran "
    "without BENCH_NVTX_ATTENTION=1, or its attention ran inside FULL CUDA graphs, where no range is replayed)"
)


@dataclass
class StepPaths:
    """Per decode step (`steps`, one row each) and its summary (`table`), or why there is none (`why_none`)."""

    steps: pd.DataFrame | None
    table: pd.DataFrame | None
    why_none: str | None
    decode_steps: int = 0  # decode steps in the capture
    without_attention: int = 0  # of those, left out: no attention range inside (e.g. a FULL-graph step)


def by_path(ranges: pd.DataFrame, acts: pd.DataFrame, pairs: tuple[np.ndarray, np.ndarray]) -> StepPaths:
    """`ranges`, `acts` and the (range row, activity row) `pairs` as `nsys_attribution.attribute` returns them."""
    steps = step_shares.decode_step_positions(ranges)
    if not len(steps):
        return StepPaths(None, None, f"no decode steps: {step_shares.why_no_steps(ranges)}")
    names = ranges["name"].astype(str).to_numpy()
    flag_of = np.array([_FLAGS.get(n, 0) for n in names], np.int64)
    step_no = np.full(len(ranges), -1, np.int64)
    step_no[steps] = np.arange(len(steps))
    r_idx, a_idx = pairs
    act_flags = np.zeros(len(acts), np.int64)
    for bit in sorted(set(_FLAGS.values())):
        act_flags[a_idx[(flag_of[r_idx] & bit) != 0]] |= bit
    act_step = np.full(len(acts), -1, np.int64)
    in_step = step_no[r_idx] >= 0
    act_step[a_idx[in_step]] = step_no[r_idx[in_step]]

    # attention ranges per step (their presence decides whether a step can be split)
    cpu = _cpu_per_step(ranges, steps)
    has_attention = (cpu[f"n:{t.ATTN_LAYER}"] + cpu[f"n:{t.ATTN_DECODE}"] + cpu[f"n:{t.ATTN_PREFILL}"]).to_numpy() > 0
    if not has_attention.any():
        return StepPaths(None, None, WHY_NO_ATTENTION.format(n=len(steps)), decode_steps=len(steps))

    mine = act_step >= 0
    cat = _categories(act_flags[mine], acts["name"][mine])
    a_step = act_step[mine]
    a_start, a_end = acts["start_ns"].to_numpy(np.int64)[mine], acts["end_ns"].to_numpy(np.int64)[mine]
    per_cat = _group_union(a_step * len(KEYS) + cat, a_start, a_end)
    busy = np.zeros((len(steps), len(KEYS)), np.int64)
    busy.reshape(-1)[per_cat.index.to_numpy()] = per_cat.to_numpy()
    step_rows = ranges.iloc[steps]
    s0, s1 = step_rows["start_ns"].to_numpy(np.int64), step_rows["end_ns"].to_numpy(np.int64)
    whole = _group_union(a_step, a_start, a_end).reindex(range(len(steps)), fill_value=0).to_numpy()
    clipped_start, clipped_end = np.maximum(a_start, s0[a_step]), np.minimum(a_end, s1[a_step])
    keep = clipped_end > clipped_start
    inside = (
        _group_union(a_step[keep], clipped_start[keep], clipped_end[keep])
        .reindex(range(len(steps)), fill_value=0)
        .to_numpy()
    )
    out = pd.DataFrame(
        {
            "step_start_ns": s0,
            "wall_ns": step_rows["cpu_ns"].to_numpy(np.int64),
            "gpu_busy_ns": whole,
            "gpu_busy_in_step_ns": inside,
            "host_gap_ns": step_rows["cpu_ns"].to_numpy(np.int64) - inside,
            **{f"{k}_ns": busy[:, i] for i, k in enumerate(KEYS)},
        }
    )
    out = pd.concat([out, cpu.reset_index(drop=True)], axis=1)[has_attention].reset_index(drop=True)
    return StepPaths(out, summarize(out), None, len(steps), int((~has_attention).sum()))


def _categories(flags: np.ndarray, names: pd.Series) -> np.ndarray:
    """Index into KEYS of each activity, from its range flags and (for gather, merge, KV write) its name."""
    cats = names.astype("category")
    labels = np.asarray(cats.cat.categories, dtype=str)
    codes = np.asarray(cats.cat.codes, np.int64)

    def named(pattern: re.Pattern[str]) -> np.ndarray:
        hit = np.array([bool(pattern.search(x)) for x in labels], bool)
        return hit[codes] if len(labels) else np.zeros(len(flags), bool)

    def has(bit: int) -> np.ndarray:
        return (flags & bit) != 0

    gather, merge, kv_write = named(GATHER), named(MERGE), named(KV_WRITE)
    conditions = [
        has(DRAFT),
        has(COLL),
        has(DEC),
        has(COMB),
        has(PRE) & gather,
        has(REORG),
        has(PATT),
        has(PRE) & merge,
        has(CTX),
        has(PRE),
        has(LAYER),
        kv_write,
    ]
    return np.select(conditions, list(range(len(conditions))), default=len(KEYS) - 1).astype(np.int64)


def _group_union(group: np.ndarray, start: np.ndarray, end: np.ndarray) -> pd.Series:
    """Per group id, the length of the union of its [start, end) intervals (a Series indexed by group id)."""
    if not len(group):
        return pd.Series(dtype=np.int64)
    order = np.lexsort((start, group))
    g, s, e = group[order], start[order], end[order]
    reach = pd.Series(e).groupby(g).cummax().to_numpy()
    first = np.ones(len(g), bool)
    first[1:] = g[1:] != g[:-1]
    new = first.copy()
    new[1:] |= s[1:] > reach[:-1]
    heads = np.flatnonzero(new)
    seg_end = np.maximum.reduceat(e, heads)
    return pd.Series(seg_end - s[heads]).groupby(g[heads]).sum()


def _cpu_per_step(ranges: pd.DataFrame, steps: np.ndarray) -> pd.DataFrame:
    """Per decode step: the count (`n:RANGE`) and CPU ns (`cpu:RANGE`) of CPU_RANGES inside it, same thread."""
    nested = step_shares.nested_per_step(ranges, steps, list(CPU_RANGES))
    out = pd.DataFrame(index=range(len(steps)))
    for r in CPU_RANGES:
        out[f"n:{r}"] = nested[f"{r}:n"]
        out[f"cpu:{r}"] = nested[f"{r}:cpu"].astype(np.int64)
    return out


def summarize(steps: pd.DataFrame) -> pd.DataFrame:
    """One row per category, group subtotal and step figure: median and mean ms per step, and the mean of each
    step's share of its GPU busy time (`share`, for categories and groups)."""
    gpu = steps["gpu_busy_ns"].to_numpy(float)
    rows = []

    def add(part: str, kind: str, what: str, values: pd.Series, share: bool) -> None:
        v = values.to_numpy(float)
        rows.append(
            {
                "part": part,
                "kind": kind,
                "what": what,
                "median_ms": float(np.median(v)) / 1e6,
                "mean_ms": float(np.mean(v)) / 1e6,
                "share": float(np.mean(np.divide(v, gpu, out=np.zeros(len(v)), where=gpu > 0))) if share else None,
            }
        )

    add("step.wall", "step", "decode step wall time (bench.engine.step)", steps["wall_ns"], False)
    add("step.gpu_busy", "step", "GPU busy with the step's work (union of all it launched)", steps["gpu_busy_ns"], True)
    add("step.host_gap", "step", "host gap: wall minus the GPU busy time inside the step", steps["host_gap_ns"], False)
    for key, what in CATEGORIES.items():
        add(key, "gpu", what, steps[f"{key}_ns"], True)
    for group, keys in GROUPS.items():
        add(group, "group", " + ".join(keys), steps[[f"{k}_ns" for k in keys]].sum(axis=1), True)
    for name in CPU_RANGES:
        add(
            f"cpu:{name}",
            "cpu",
            f"CPU time in {name} ({np.median(steps[f'n:{name}']):g} a step)",
            steps[f"cpu:{name}"],
            False,
        )
    return pd.DataFrame(rows)


def paths_markdown(paths: StepPaths, label: str = "") -> str:
    """The per-step table by path (medians and means over the decode steps), or why there is none."""
    head = f"### {label}\n\n" if label else ""
    if paths.table is None:
        return f"{head}No by-path split: {paths.why_none}.\n"
    n = len(paths.steps) if paths.steps is not None else 0
    left = f" ({paths.without_attention} without attention ranges left out)" if paths.without_attention else ""
    intro = (
        f"{n} of {paths.decode_steps} decode steps{left}; per step, median and mean over the steps; share: mean of "
        "each step's part of its GPU busy time.\n\n"
    )
    table = paths.table
    gpu_rows = [
        [f"`{r.part}`" if r.kind != "group" else f"**{r.part}**", r.what, fmt(r.median_ms, ".3f"),
         fmt(r.mean_ms, ".3f"), fmt(r.share, ".1%") if r.share is not None else ""]
        for r in table[table["kind"] != "cpu"].itertuples()
    ]  # fmt: skip
    cpu_rows = [
        [f"`{r.part[4:]}`", r.what, fmt(r.median_ms, ".3f"), fmt(r.mean_ms, ".3f")]
        for r in table[table["kind"] == "cpu"].itertuples()
    ]
    return (
        head
        + intro
        + "\n".join(md_rows(["part", "what", "median ms", "mean ms", "share of step GPU busy"], gpu_rows))
        + "\n\nHost (CPU) time inside the ranges, per step (nested ranges are inclusive):\n\n"
        + "\n".join(md_rows(["range", "what", "median ms", "mean ms"], cpu_rows))
        + "\n"
    )


def comparison_markdown(captures: dict[str, StepPaths]) -> str:
    """Captures side by side: mean ms per step of each part (categories, groups, the step's own figures)."""
    tables = {label: p.table.set_index("part") for label, p in captures.items() if p.table is not None}
    if len(tables) < 2:
        return ""
    first = next(iter(tables.values()))
    rows = [
        [f"`{part}`" if first.loc[part, "kind"] != "group" else f"**{part}**",
         *(fmt(tb.loc[part, "mean_ms"], ".2f") for tb in tables.values())]
        for part in first.index
    ]  # fmt: skip
    return "\n".join(md_rows(["mean ms per decode step", *tables], rows)) + "\n"


def read_paths(folder: str | Path) -> StepPaths | None:
    """An analysis folder's by-path split (nsys_step_paths.csv, counts from nsys_meta.json), or None for an
    analysis written before the split existed (its meta has no `step_paths`)."""
    folder = Path(folder)
    try:
        meta = json.loads((folder / "nsys_meta.json").read_text()).get("step_paths")
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise BenchError(f"cannot read {folder / 'nsys_meta.json'} ({exc})") from exc
    if not meta:
        return None
    counts = {"decode_steps": int(meta["decode_steps"]), "without_attention": int(meta["without_attention"])}
    if meta.get("why_none"):
        return StepPaths(None, None, str(meta["why_none"]), **counts)
    try:
        steps = pd.read_csv(folder / "nsys_step_paths.csv")
    except (OSError, ValueError) as exc:
        raise BenchError(f"cannot read {folder / 'nsys_step_paths.csv'} ({exc})") from exc
    return StepPaths(steps, summarize(steps), None, **counts)


def paths_report(captures: dict[str, StepPaths]) -> str:
    """`bench profile shares`'s by-path part: each capture's table (or why none), then the captures side by side."""
    if not captures:
        return ""
    body = "".join(paths_markdown(p, label) + "\n" for label, p in captures.items())
    return "## Decode step by path\n\n" + body + comparison_markdown(captures)
