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
- "baseline not reproducible": the baseline's own runs disagree while every candidate run matched the reference;
- "not compared": no prompt in common (a side without outputs, requests that failed, other prompt lengths).
The reference is the baseline's first run that answered a prompt; a run that shares no answered prompt with it is
left out and named. Runs that asked for different lengths compare their common prefix.
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
    """`run` against `ref` over the prompts both sent (same digest, same index) and answered, each over the first
    min(max_tokens) tokens (runs that asked for different lengths compare their common prefix)."""
    compared = identical = tokens = agreed = 0
    first: tuple[int, int] | None = None
    limit = min(ref.max_tokens, run.max_tokens)
    pairs = zip(ref.prompt_sha256, run.prompt_sha256, ref.outputs, run.outputs, strict=False)
    for i, (ref_digest, run_digest, a, b) in enumerate(pairs):
        if ref_digest != run_digest:
            continue
        a, b = a[:limit], b[:limit]
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


def engine_labels(dirs: Sequence[Path], engine_ids: set[str]) -> dict[str, str]:
    """Each engine id's label, from the point records of the first of `dirs` that have them (read until all found)."""
    labels: dict[str, str] = {}
    for d in dirs:
        if engine_ids <= labels.keys():
            break
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


def _why_not(ref: OutputsRecord, run: OutputsRecord) -> str:
    if run.error and not run.outputs:
        return run.error
    if run.input_len != ref.input_len:
        return f"other prompts ({run.input_len} tokens, the reference's {ref.input_len})"
    return "no prompt in common with the reference"


def compare_outputs(base_dirs: Sequence[Path], cand_dirs: Sequence[Path]) -> list[dict]:
    """One row per engine config with outputs on either side: the verdict and what it rests on. The reference is
    the baseline's first run that answered a prompt; a run that shares no answered prompt with it (its requests
    failed, other prompts) is left out of the verdict and named in the detail."""
    base, cand = side_outputs(base_dirs), side_outputs(cand_dirs)
    if not base and not cand:  # no --check-outputs on either side: no point record read
        return []
    labels = engine_labels([*base_dirs, *cand_dirs], set(base) | set(cand))
    rows = []
    for engine_id in sorted(set(base) | set(cand), key=lambda e: labels.get(e, e)):
        row: dict = {"engine_id": engine_id, "label": labels.get(engine_id, engine_id), "prompts": "-"}
        b_runs, c_runs = base.get(engine_id, []), cand.get(engine_id, [])
        row["runs"] = f"{len(b_runs)} / {len(c_runs)}"
        answered = [(name, r) for name, r in b_runs if r.outputs]
        if not answered or not c_runs:
            why = "no outputs in the candidate" if not c_runs else "no baseline run answered a prompt"
            errors = [f"baseline {name}: {r.error}" for name, r in b_runs if r.error]
            rows.append({**row, "verdict": "not compared", "detail": "; ".join([why, *errors])})
            continue
        ref_name, ref = answered[0]
        runs = [("baseline", name, r) for name, r in b_runs if name != ref_name]
        runs += [("candidate", name, r) for name, r in c_runs]
        found = [(side, name, r, agreement(ref, r)) for side, name, r in runs]
        left_out = [f"{side} {name}: {_why_not(ref, r)}" for side, name, r, a in found if a.compared == 0]
        own = [(name, a) for side, name, _, a in found if side == "baseline" and a.compared]
        other = [(name, a) for side, name, _, a in found if side == "candidate" and a.compared]
        if not other:
            detail = "no candidate run shares an answered prompt with baseline " + ref_name
            rows.append({**row, "verdict": "not compared", "detail": "; ".join([detail, *left_out])})
            continue
        compared = min(a.compared for _, a in own + other)
        row["prompts"] = f"{compared} x {ref.max_tokens} tokens ({ref.input_len}-token prompts)"
        own_worst, other_worst = _worst(own), _worst(other)
        own_said = (
            f"the baseline's {len(own) + 1} runs agree"
            if own
            else "the baseline's own agreement is unknown (one run of it compared)"
        )
        if own_worst is not None:
            detail = f"baseline vs its {ref_name}: " + _said(*own_worst)
            if other_worst is not None:
                verdict = "differs, as the baseline does"
                detail += "; candidate vs baseline " + _said(*other_worst)
            else:
                verdict = "baseline not reproducible"
                detail += f"; every candidate run ({len(other)}) matched baseline {ref_name}"
        elif other_worst is not None:
            verdict = "differs"
            n_diff = sum(1 for _, a in other if a.first_diff is not None)
            detail = (
                f"{n_diff} of {len(other)} candidate runs differ from baseline {ref_name} ({own_said}); worst "
                + _said(*other_worst)
            )
        else:
            verdict = "identical"
            detail = f"every run compared ({len(own) + 1} + {len(other)}) generated the same tokens"
            if not own:
                detail += f" ({own_said})"
        if left_out:
            detail += "; left out: " + "; ".join(left_out)
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
