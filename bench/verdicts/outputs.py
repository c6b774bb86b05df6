"""Did two sides generate the same greedy tokens? The outputs that `sweep --check-outputs N` records after each server
start (bench.load.outputs: N fixed prompts, one at a time, greedy) compared between the runs of a comparison.

For each engine config both sides ran, the baseline's first run (its results directories in name order: round-0,
start-1, ...) is the reference. Every other baseline run is compared with it (does the baseline agree with itself?),
and so is every candidate run. Only prompts both runs sent (the same ids: their digests match) and both answered are
compared. Verdicts:
- "identical": every run of both sides generated the same tokens for every prompt compared;
- "differs": a candidate run generated other tokens while every baseline run matched the reference: the change
  changed what the server generates (a bug, or a kernel whose rounding flips a near-tied argmax: the first differing
  token and how many tokens agreed before it tell a divergence late in a long answer from a wrong one at token 0);
- "differs, as the baseline does": the baseline's own runs disagree, so a candidate's difference says nothing;
- "not compared": no prompt in common (a side without outputs, requests that failed, other prompt lengths).
It informs; it gates nothing (compare's exit code is the speed gate's).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.core.fmt import md_rows
from bench.results.records import OutputsRecord
from bench.results.store import SweepStore


@dataclass(frozen=True)
class Agreement:
    """One run's outputs against the reference's."""

    compared: int  # prompts both sent and answered
    identical: int  # of those, generated the same tokens
    first_diff: tuple[int, int] | None  # (prompt, token index) of the earliest differing token; None: identical
    tokens: int  # tokens compared (the reference's, over the prompts compared)
    agreed: int  # tokens before each prompt's first difference, summed


def agreement(ref: OutputsRecord, run: OutputsRecord) -> Agreement:
    compared = identical = tokens = agreed = 0
    first: tuple[int, int] | None = None
    pairs = zip(ref.prompt_sha256, run.prompt_sha256, ref.outputs, run.outputs, strict=False)
    for i, (ref_digest, run_digest, a, b) in enumerate(pairs):
        if ref_digest != run_digest:
            continue
        compared += 1
        tokens += len(a)
        same = next((j for j, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
        agreed += same
        if a == b:
            identical += 1
        elif first is None or same < first[1]:
            first = (i, same)
    return Agreement(compared, identical, first, tokens, agreed)


def side_outputs(dirs: Sequence[Path]) -> dict[str, list[tuple[str, OutputsRecord]]]:
    """{engine id: [(results directory's name, its outputs)]} over one side's results directories, in name order."""
    found: dict[str, list[tuple[str, OutputsRecord]]] = {}
    for d in sorted(dirs, key=lambda p: p.name):
        for engine_id, record in SweepStore(d).outputs().items():
            found.setdefault(engine_id, []).append((d.name, record))
    return found


def engine_labels(dirs: Sequence[Path]) -> dict[str, str]:
    labels: dict[str, str] = {}
    for d in dirs:
        for rec in SweepStore(d).records().values():
            labels.setdefault(rec.engine_id, str(rec.label.get("engine", rec.engine_id)))
    return labels


def _worst(ags: list[tuple[str, Agreement]]) -> tuple[str, Agreement] | None:
    """The run that agrees least (fewest identical prompts, then earliest first difference)."""
    differing = [(name, a) for name, a in ags if a.first_diff is not None]
    if not differing:
        return None
    return min(differing, key=lambda x: (x[1].identical - x[1].compared, x[1].first_diff or (0, 0)))


def _said(name: str, a: Agreement) -> str:
    assert a.first_diff is not None
    prompt, token = a.first_diff
    share = a.agreed / a.tokens if a.tokens else 0.0
    return (
        f"{name}: {a.identical}/{a.compared} prompts identical, first difference at prompt {prompt} token {token} "
        f"({share:.0%} of tokens before each prompt's first difference)"
    )


def compare_outputs(base_dirs: Sequence[Path], cand_dirs: Sequence[Path]) -> list[dict]:
    """One row per engine config with outputs on either side: the verdict and what it rests on."""
    base, cand = side_outputs(base_dirs), side_outputs(cand_dirs)
    labels = engine_labels([*base_dirs, *cand_dirs])
    rows = []
    for engine_id in sorted(set(base) | set(cand), key=lambda e: labels.get(e, e)):
        row: dict = {"engine_id": engine_id, "label": labels.get(engine_id, engine_id)}
        b_runs, c_runs = base.get(engine_id, []), cand.get(engine_id, [])
        row["runs"] = f"{len(b_runs)} / {len(c_runs)}"
        if not b_runs or not c_runs:
            missing = "baseline" if not b_runs else "candidate"
            rows.append({**row, "verdict": "not compared", "detail": f"no outputs in the {missing}", "prompts": "-"})
            continue
        ref_name, ref = b_runs[0]
        own = [(name, agreement(ref, r)) for name, r in b_runs[1:]]
        other = [(name, agreement(ref, r)) for name, r in c_runs]
        compared = min((a.compared for _, a in own + other), default=0)
        row["prompts"] = f"{compared} x {ref.max_tokens} tokens ({ref.input_len}-token prompts)"
        errors = [
            f"{side} {name}: {r.error}"
            for side, runs in (("baseline", b_runs), ("candidate", c_runs))
            for name, r in runs
            if r.error
        ]
        if compared == 0:
            detail = "; ".join(errors) or "no prompt sent and answered by both"
            rows.append({**row, "verdict": "not compared", "detail": detail})
            continue
        own_worst, other_worst = _worst(own), _worst(other)
        if own_worst is not None:
            verdict = "differs, as the baseline does"
            detail = f"baseline vs its {ref_name}: " + _said(*own_worst)
            if other_worst is not None:
                detail += "; candidate vs baseline " + _said(*other_worst)
        elif other_worst is not None:
            verdict = "differs"
            n_diff = sum(1 for _, a in other if a.first_diff is not None)
            detail = (
                f"{n_diff} of {len(other)} candidate runs differ from baseline {ref_name} (the baseline's "
                f"{len(b_runs)} run(s) agree); worst " + _said(*other_worst)
            )
        else:
            verdict = "identical"
            detail = f"every run of both sides ({len(b_runs)} + {len(c_runs)}) generated the same tokens"
        if errors:
            detail += "; stopped early: " + "; ".join(errors)
        rows.append({**row, "verdict": verdict, "detail": detail})
    return rows


def headline(rows: list[dict]) -> str | None:
    """One line for a comparison's first screen; None when neither side recorded outputs."""
    if not rows:
        return None
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
    said = ", ".join(f"{v} {n}" for v, n in counts.items())
    return f"Greedy outputs (`--check-outputs`, not gated), engine configs: {said}."


def outputs_markdown(rows: list[dict]) -> list[str]:
    if not rows:
        return []
    lines = [
        "### Greedy outputs (not gated)",
        "",
        "Each server start's generated tokens on the same fixed prompts, sent one at a time, greedy "
        "(`--check-outputs`); the reference is the baseline's first run (bench/verdicts/outputs.py).",
        "",
    ]
    cells = ([r["label"], r["runs"], r["prompts"], r["verdict"], r["detail"]] for r in rows)
    return [*lines, *md_rows(["engine", "runs (baseline / candidate)", "prompts", "outputs", "detail"], cells), ""]
