"""What changed between the two sides of a comparison (`bench compare`, `bench ab`): the configuration and the
environment each side's results directories recorded, diffed. A side is a results directory or a folder of them
(the rounds of `bench ab`); per fact, a side's value is every value its directories recorded.

Read from the manifests (bench.results.environment: vLLM version and fixes, the suite's commit, Python, machine, the
BENCH_* / VLLM_* environment variables; the profile's [server] and [run] tables), the point records (the CUDA
graph mode and runner the engines ran with, bench.measure.effective) and, for `bench ab`, what it set for each side
(`ab-side.json`: interpreter, patch state, variables). A fact an older bench did not record reads "not recorded",
never as a difference it cannot show. Paths print relative, never absolute (`shown_paths`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from pydantic import Field

from bench.core.files import atomic_write_bytes
from bench.core.fmt import md_rows
from bench.results.records import Open
from bench.results.store import SweepStore

NOT_RECORDED = "not recorded"
UNSET = "unset"
AB_SIDE = "ab-side.json"  # written by `bench ab` into each side's folder
PATH_FACTS = ("Python interpreter", "ab: interpreter")  # values that are paths (printed relative)
# The facts the "same on both sides" line names, when equal.
HEADLINE = ("vLLM", "vLLM fixes", "bench commit", "CUDA graph mode", "machine")


class AbSide(Open):
    """What `bench ab` set for one side: its interpreter, the patch state it set before each run, the variables."""

    python: str
    patch: str | None = None  # an ENV suffix: patched, unpatched, patched-except=FIX,..., patched-only=FIX,...
    variables: dict[str, str] = Field(default_factory=dict)


def write_ab_side(folder: Path, side: AbSide) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(folder / AB_SIDE, json.dumps(side.model_dump(mode="json"), indent=1).encode())


def results_dirs(path: Path) -> list[Path]:
    """The results directories of one side: the folder itself, or its children holding a manifest."""
    path = Path(path)
    return [path] if (path / "manifest.json").exists() else sorted(p.parent for p in path.glob("*/manifest.json"))


def _flat(prefix: str, table: dict) -> dict[str, str]:
    return {f"{prefix}.{k}": _text(v) for k, v in sorted(table.items())}


def _text(v) -> str:
    """A profile value as shown: a table or list as JSON, a bool in TOML's spelling, anything else as written (a
    backend's or a path's case is kept)."""
    if isinstance(v, (dict, list)):
        return json.dumps(v, sort_keys=True)
    return str(v).lower() if isinstance(v, bool) else str(v)


def _machine(m: dict) -> str | None:
    if not m:
        return None
    if m.get("platform") == "gpu":
        return f"{m.get('gpus')} x {m.get('gpu_name')}"
    return f"CPU {m.get('cpu')} ({m.get('cpu_count')} cores)"


def directory_facts(root: Path) -> tuple[dict[str, str], dict[str, str] | None]:
    """(fact -> value, the environment variables or None when not recorded) of one results directory."""
    store = SweepStore(root)
    manifest = store.manifest()
    env = manifest.get("environment") or {}
    vllm, git, profile = env.get("vllm") or {}, env.get("suite_git") or {}, manifest.get("profile") or {}
    facts: dict[str, str | None] = {
        "vLLM": (
            f"{vllm.get('distribution') or 'vllm'} {vllm['vllm_version']}"
            if vllm.get("vllm_version")
            else vllm.get("problem")
        ),
        "vLLM fixes": ", ".join(f"{f.get('fix')}: {f.get('state')}" for f in vllm.get("fixes") or []) or None,
        "bench commit": (
            f"{git['sha'][:10]}{' (with uncommitted changes)' if git.get('dirty') else ''}" if git.get("sha") else None
        ),
        "bench version": env.get("bench_version"),
        "Python": env.get("python"),
        "Python interpreter": env.get("python_executable"),
        "machine": _machine(env.get("machine") or {}),
        "draft keys": manifest.get("draft_keys"),
        "profile": profile.get("name"),
    }
    facts |= _flat("profile [server]", profile.get("server") or {})
    facts |= _flat("profile [run]", profile.get("run") or {})
    ran: dict[str, set[str]] = {"CUDA graph mode": set(), "runner": set()}
    for rec in store.records().values():
        if rec.status == "ok" and rec.effective is not None:
            for key, value in (("CUDA graph mode", rec.effective.cudagraph_mode), ("runner", rec.effective.runner)):
                if value:
                    ran[key].add(str(value))
    facts |= {k: " / ".join(sorted(v)) for k, v in ran.items() if v}
    return {k: v for k, v in facts.items() if v is not None}, env.get("variables")


Facts = list[tuple[dict[str, str], dict[str, str] | None]]


def side_directory_facts(path: Path) -> Facts:
    """directory_facts of each of one side's results directories."""
    return [directory_facts(d) for d in results_dirs(path)]


def side_facts(path: Path, names: Iterable[str] = (), found: Facts | None = None) -> dict[str, set[str]]:
    """Per fact, the distinct values one side's results directories recorded (NOT_RECORDED where one did not).
    Environment variables by name: those of `names` (the other side's) and its own, UNSET where a directory
    recorded its variables without that one. `found`: side_directory_facts(path) when already read."""
    found = side_directory_facts(path) if found is None else found
    names = set(names) | {v for _, variables in found for v in variables or {}}
    values: dict[str, set[str]] = {}
    keys = list(dict.fromkeys(k for facts, _ in found for k in facts))
    for facts, variables in found:
        for key in keys:
            values.setdefault(key, set()).add(facts.get(key, NOT_RECORDED))
        for name in sorted(names):
            shown = NOT_RECORDED if variables is None else variables.get(name, UNSET)
            values.setdefault(f"environment {name}", set()).add(shown)
        values.setdefault("environment variables", set()).add(NOT_RECORDED if variables is None else "recorded")
    ab_file = Path(path) / AB_SIDE
    if ab_file.exists():
        ab = AbSide.model_validate_json(ab_file.read_text())
        values["ab: interpreter"] = {ab.python}
        values["ab: patch state set"] = {patch_state_text(ab.patch)}
        values["ab: variables set"] = {", ".join(f"{k}={v}" for k, v in sorted(ab.variables.items())) or "none"}
    return values


def patch_state_text(patch: str | None) -> str:
    """An ab side's patch state as compare.md shows it: "patched", "unpatched", "patched except FIX, ...",
    "patched with only FIX, ..." (`bench patch apply --except/--only`), or "left as is"."""
    if not patch:
        return "left as is"
    kind, _, ids = patch.partition("=")
    names = ", ".join(i for i in ids.split(",") if i)
    return {"patched-except": f"patched except {names}", "patched-only": f"patched with only {names}"}.get(kind, patch)


def _variable_names(found: Facts) -> set[str]:
    return {n for _, variables in found for n in variables or {}}


def _common_parent(paths: list[str]) -> str | None:
    absolute = [p for p in paths if os.path.isabs(p)]
    if not absolute:
        return None
    common = os.path.commonpath(absolute)
    return common if len(absolute) > 1 else os.path.dirname(common)


def shown_paths(paths: list[str], base: Path | str | None = None) -> list[str]:
    """The paths as printed: relative to `base` (the folder a report is written in; default the working directory)
    where they lie inside it, else relative to their common parent; never absolute."""
    here = os.path.abspath(base or os.getcwd())
    full = [os.path.abspath(p) for p in paths]
    if all(os.path.commonpath([here, p]) == here for p in full):
        return [os.path.relpath(p, here) for p in full]
    parent = _common_parent(full) or here
    return [os.path.relpath(p, parent) if p != parent else os.path.basename(p) for p in full]


@dataclass
class Change:
    fact: str
    baseline: str
    candidate: str


@dataclass
class WhatChanged:
    changes: list[Change]
    same: dict[str, str]  # the headline facts equal on both sides
    variables_recorded: bool  # both sides recorded their environment variables


def what_changed(baseline: Path, candidate: Path) -> WhatChanged:
    """Every fact whose values differ between the sides (a side whose rounds differ among themselves lists all of
    its values), paths shown relative to each other."""
    base_found, cand_found = side_directory_facts(baseline), side_directory_facts(candidate)  # each read once
    base = side_facts(baseline, _variable_names(cand_found), base_found)
    cand = side_facts(candidate, _variable_names(base_found), cand_found)
    changes, same = [], {}
    for key in dict.fromkeys([*base, *cand]):
        b, c = sorted(base.get(key, {NOT_RECORDED})), sorted(cand.get(key, {NOT_RECORDED}))
        if b == c:
            if key in HEADLINE and len(b) == 1:
                same[key] = b[0]
            continue
        if key in PATH_FACTS:
            recorded = [p for p in [*b, *c] if p != NOT_RECORDED]
            shown = dict(zip(recorded, shown_paths(recorded, _common_parent(recorded))))
            b, c = [shown.get(p, p) for p in b], [shown.get(p, p) for p in c]
        changes.append(Change(key, " / ".join(b), " / ".join(c)))
    kept = base.get("environment variables", set()) | cand.get("environment variables", set())
    return WhatChanged(changes, same, NOT_RECORDED not in kept)


def changed_markdown(found: WhatChanged | None) -> list[str]:
    """The "What changed" section of compare.md, as lines."""
    if found is None:
        return []
    lines = ["### What changed", ""]
    if found.changes:
        rows = ([c.fact, c.baseline, c.candidate] for c in found.changes)
        lines += [*md_rows(["recorded", "baseline", "candidate"], rows), ""]
    else:
        lines += [
            "No recorded difference in configuration or environment (vLLM version and fixes, bench commit, Python, "
            "machine, profile [server] and [run], CUDA graph mode, BENCH_* / VLLM_* variables, what `bench ab` "
            "set): the change under test is not in what these results record.",
            "",
        ]
    if found.same:
        lines += ["Same on both sides: " + "; ".join(f"{k} {v}" for k, v in found.same.items()) + ".", ""]
    if not found.variables_recorded:
        lines += [
            "Environment variables are not recorded in these results (a bench from before 2026-12-07): a variable "
            "set for one side only (a step delay, say) cannot be shown here.",
            "",
        ]
    return lines
