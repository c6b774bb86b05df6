"""Apply, revert and report patch series, all-or-nothing, with hashes checked before and after."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import py_compile
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.core.errors import BenchError
from bench.core.files import atomic_write_bytes
from bench.patching.locate import VllmInstall
from bench.patching.probes import PROBES
from bench.patching.series import Series, select_series, unsupported_message
from bench.patching.unidiff import apply_file_diff

STATE_FILE = ".bench-patch-state.json"  # inside the vllm/ folder: travels with the install it describes

APPLIED, NOT_APPLIED, UPSTREAM, CANNOT_APPLY = "applied", "not applied", "already upstream", "cannot apply"
NOT_APPLICABLE = "not applicable"  # the series says this vLLM line cannot run the code the fix changes


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _current(install: VllmInstall, rel: str) -> str | None:
    try:
        return (install.base / rel).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None


@dataclass(frozen=True)
class FixStatus:
    fix: str
    state: str  # one of APPLIED, NOT_APPLIED, UPSTREAM, CANNOT_APPLY, NOT_APPLICABLE
    detail: str
    in_code: bool | None  # what the code probe says: the fix's code is present (None: no such code path)


def fix_statuses(install: VllmInstall, series: Series | None) -> list[FixStatus]:
    out = []
    for fix_id, probe in PROBES.items():
        fix = next((f for f in series.fixes if f.id == fix_id), None) if series else None
        in_code = probe(install.base, [f.path for f in fix.files] if fix else None)
        if series is None:
            out.append(FixStatus(fix_id, CANNOT_APPLY, f"vLLM {install.version} is not supported", in_code))
        elif (reason := series.not_applicable_reason(fix_id)) is not None:
            out.append(FixStatus(fix_id, NOT_APPLICABLE, reason, in_code))
        elif fix_id in series.upstream:
            state = UPSTREAM if in_code else CANNOT_APPLY
            out.append(FixStatus(fix_id, state, "" if in_code else "expected upstream, but the code lacks it", in_code))
        else:
            out.append(_series_fix_status(install, series, fix_id, in_code))
    return out


def _series_fix_status(install: VllmInstall, series: Series, fix_id: str, in_code: bool | None) -> FixStatus:
    fix = next((f for f in series.fixes if f.id == fix_id), None)
    if fix is None:
        return FixStatus(fix_id, CANNOT_APPLY, f"series {series.name} has no patch for it", in_code)
    hashes = {f.path: (sha256_text(t) if (t := _current(install, f.path)) is not None else None) for f in fix.files}
    if all(hashes[f.path] == f.after for f in fix.files):
        return FixStatus(fix_id, APPLIED, "", in_code)
    if all(hashes[f.path] == f.before for f in fix.files):
        return FixStatus(fix_id, NOT_APPLIED, "", in_code)
    changed = [f.path for f in fix.files if hashes[f.path] not in (f.before, f.after)]
    detail = "modified locally (hash mismatch): " + ", ".join(changed)
    return FixStatus(fix_id, APPLIED if in_code else CANNOT_APPLY, detail, in_code)


def patch_report(install: VllmInstall, series_name: str | None = None) -> dict:
    """Everything a result needs to state its patch state: install, series, per-fix status, last record."""
    try:
        series = select_series(install, series_name)
        problem = None
    except BenchError as exc:
        if series_name is not None:
            raise
        series, problem = None, str(exc)
    return {
        "vllm_version": install.version,
        "distribution": install.distribution,
        "vllm_root": str(install.root),
        "series": series.name if series else None,
        "problem": problem,
        "fixes": [asdict(s) for s in fix_statuses(install, series)],
        "record": read_record(install),
    }


def format_status(report: dict) -> str:
    """A patch_report as the lines `bench patch status` prints."""
    lines = [
        f"vLLM {report['vllm_version']} ({report['distribution']}) at {report['vllm_root']}",
        f"series: {report['series'] or '-'}" + (f"  ({report['problem']})" if report["problem"] else ""),
    ]
    for fix in report["fixes"]:
        probe = {True: "code has it", False: "code lacks it", None: "no such code path"}[fix["in_code"]]
        detail = f"; {fix['detail']}" if fix["detail"] else ""
        lines.append(f"  {fix['fix']:<20} {fix['state']:<17} ({probe}{detail})")
    if report["record"]:
        last = report["record"][-1]
        without = f" without {', '.join(last['left_out'])}" if last.get("left_out") else ""
        lines.append(
            f"last recorded action: {last.get('action')} series {last.get('series')}{without} at {last.get('time')}"
        )
    return "\n".join(lines)


def check_verified(report: dict) -> list[str]:
    """Raise BenchError unless every fix of a patch_report is applied or upstream AND its code probe finds it, or
    is not applicable to the installed line (series.toml says why); return the ids of the not-applicable fixes."""
    bad = [
        f["fix"]
        for f in report["fixes"]
        if f["state"] != NOT_APPLICABLE and (f["state"] not in (APPLIED, UPSTREAM) or not f["in_code"])
    ]
    if bad:
        raise BenchError(f"not verified: {', '.join(bad)} missing in vLLM {report['vllm_version']}")
    return [f["fix"] for f in report["fixes"] if f["state"] == NOT_APPLICABLE]


def select_fixes(series: Series, only: list[str] | None = None, exclude: list[str] | None = None) -> tuple[str, ...]:
    """The ids of the series' patch fixes that `apply` leaves applied: all of them, only `only`, or all but
    `exclude` (in the series' order). Every id named must be one of the series' patches: a fix that is upstream or
    not applicable on this line cannot be left out or chosen, and an unknown id is named with the known ones."""
    if only is not None and exclude is not None:
        raise BenchError("give --only or --except, not both")
    patches = [f.id for f in series.fixes]
    named = only if only is not None else exclude
    if named is None:
        return tuple(patches)
    if not named:
        raise BenchError(f"--{'only' if only is not None else 'except'} names no fix")
    for fix_id in named:
        if fix_id in patches:
            continue
        if fix_id in series.upstream:
            why = "already upstream in this vLLM line's code (nothing to leave out or apply)"
        elif (reason := series.not_applicable_reason(fix_id)) is not None:
            why = f"not applicable to this vLLM line ({reason})"
        else:
            why = "not a fix of the series"
        raise BenchError(f"fix {fix_id!r}: {why}; series {series.name} patches: {', '.join(patches)}")
    return tuple(f for f in patches if (f in named) == (only is not None))


def left_out_fixes(
    install: VllmInstall, series_name: str | None, only: list[str] | None, exclude: list[str] | None
) -> tuple[str, ...]:
    """The patch fixes of the install's series that `--only` / `--except` leave out (() without either)."""
    if only is None and exclude is None:
        return ()
    series = select_series(install, series_name)
    kept = select_fixes(series, only, exclude)
    return tuple(f.id for f in series.fixes if f.id not in kept)


def check_selection(report: dict, left_out: tuple[str, ...]) -> list[str]:
    """`verify --only/--except`: check_verified for every fix but those `left_out`, which must be not applied and
    absent from the code (the subset `apply --only/--except` makes); BenchError naming each fix that is not so.
    Returns the ids of the not-applicable fixes."""
    kept = {**report, "fixes": [f for f in report["fixes"] if f["fix"] not in left_out]}
    stray = [f["fix"] for f in report["fixes"] if f["fix"] in left_out and (f["state"] != NOT_APPLIED or f["in_code"])]
    try:
        skipped = check_verified(kept)
    except BenchError as exc:
        if stray:
            raise BenchError(f"{exc}; not left out: {', '.join(stray)} present") from exc
        raise
    if stray:
        raise BenchError(f"not left out: {', '.join(stray)} present in vLLM {report['vllm_version']}")
    return skipped


def read_record(install: VllmInstall) -> list[dict]:
    path = install.root / STATE_FILE
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return []
    except (OSError, ValueError):
        return [{"error": f"unreadable {path}"}]


def _plan(install: VllmInstall, series: Series, applied: tuple[str, ...]) -> tuple[dict[str, tuple[str, str]], bool]:
    """{path: (old text, new text)} that brings every file of the series to its fix's target (the after image for
    the fixes in `applied`, the before image for the others), and whether all already are.

    Raises BenchError naming every file whose hash is neither its before nor after image.
    """
    entries = [(fix.id, fh, diff) for fix in series.fixes for fh, diff in zip(fix.files, _ordered_diffs(fix))]
    owners: dict[str, list[str]] = {}
    for fix_id, fh, _ in entries:
        owners.setdefault(fh.path, []).append(fix_id)
    shared = {p: ids for p, ids in owners.items() if len(ids) > 1}
    if shared and 0 < len(applied) < len(series.fixes):
        raise BenchError(
            f"series {series.name}: fixes share files, so they cannot be applied apart: "
            + "; ".join(f"{p} ({', '.join(ids)})" for p, ids in shared.items())
        )
    found = {fh.path: _current(install, fh.path) for _, fh, _ in entries}
    missing = [p for p, t in found.items() if t is None]
    if missing:
        raise BenchError(f"series {series.name}: target file missing in {install.base}: {', '.join(missing)}")
    texts = {p: t for p, t in found.items() if t is not None}
    hashes = {p: sha256_text(t) for p, t in texts.items()}
    bad = [fh.path for _, fh, _ in entries if hashes[fh.path] not in (fh.before, fh.after)]
    if bad:
        raise BenchError(
            f"series {series.name}: file modified locally (hash mismatch), nothing changed: {', '.join(bad)}"
        )
    plan = {}
    for fix_id, fh, diff in entries:
        forward = fix_id in applied
        target = fh.after if forward else fh.before
        if hashes[fh.path] == target:
            continue
        new = apply_file_diff(texts[fh.path], diff if forward else diff.reversed())
        if sha256_text(new) != target:
            raise BenchError(
                f"series {series.name}: {fh.path} does not reach the manifest's {'after' if forward else 'before'} hash"
            )
        compile(new, str(install.base / fh.path), "exec")
        plan[fh.path] = (texts[fh.path], new)
    return plan, not plan


def _ordered_diffs(fix):
    by_path = {d.path: d for d in fix.diffs()}
    if set(by_path) != {f.path for f in fix.files}:
        raise BenchError(f"{fix.patch}: files in the patch and in series.toml differ")
    return [by_path[f.path] for f in fix.files]


def _writable(path: Path) -> bool:
    # Write bits count even for root (who passes access()): an install made read-only stays untouched.
    return os.access(path, os.W_OK) and bool(path.stat().st_mode & 0o222)


def _check_writable(install: VllmInstall, paths: list[str]) -> None:
    blocked = [p for p in paths if not _writable(install.base / p) or not _writable((install.base / p).parent)]
    if not _writable(install.root):
        blocked.append(str(install.root) + "/ (for the state record)")
    if blocked:
        raise BenchError(f"read-only vLLM install, nothing changed: {', '.join(blocked)}")


def _write_all(install: VllmInstall, plan: dict[str, tuple[str, str]]) -> None:
    """Write every file (temp + rename); on any failure put every original back."""
    written: list[str] = []
    try:
        for rel, (_, new) in plan.items():
            _atomic_write(install.base / rel, new)
            written.append(rel)
        for rel, (_, new) in plan.items():
            if sha256_text((install.base / rel).read_text(encoding="utf-8")) != sha256_text(new):
                raise BenchError(f"{rel}: content differs after writing")
            py_compile.compile(str(install.base / rel), doraise=True)
    except BaseException as exc:
        for rel in written:
            _atomic_write(install.base / rel, plan[rel][0])
        if isinstance(exc, BenchError):
            raise
        raise BenchError(f"writing the series failed, every file restored: {exc}") from exc


def _atomic_write(path: Path, text: str) -> None:
    """Replace one of vLLM's source files, keeping its permissions."""
    atomic_write_bytes(path, text.encode("utf-8"), mode=path.stat().st_mode & 0o7777)


def _record(
    install: VllmInstall, series: Series, action: str, plan: dict[str, tuple[str, str]], applied: tuple[str, ...]
) -> None:
    entries = read_record(install)
    entry = {
        "action": action,
        "series": series.name,
        "vllm_version": install.version,
        "time": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "fixes": [f.id for f in series.fixes],
        "files": {rel: {"before": sha256_text(old), "after": sha256_text(new)} for rel, (old, new) in plan.items()},
    }
    if action == "apply" and len(applied) < len(series.fixes):  # `apply --only/--except`: a subset
        entry["left_out"] = [f.id for f in series.fixes if f.id not in applied]
    entries.append(entry)
    atomic_write_bytes(install.root / STATE_FILE, (json.dumps(entries, indent=2) + "\n").encode("utf-8"))


@dataclass(frozen=True)
class Outcome:
    changed: bool
    message: str
    diff: str = ""


def _run(
    install: VllmInstall,
    series_name: str | None,
    reverse: bool,
    dry_run: bool,
    only: list[str] | None = None,
    exclude: list[str] | None = None,
) -> Outcome:
    series = select_series(install, series_name)
    if not series.supports(install) and series_name is not None:
        raise BenchError(unsupported_message(install, [series]))
    if not series.fixes:
        return Outcome(False, f"series {series.name} has nothing to apply")
    applied = () if reverse else select_fixes(series, only, exclude)
    subset = not reverse and len(applied) < len(series.fixes)
    left_out = [f.id for f in series.fixes if f.id not in applied]
    what = f"series {series.name}" + (f" without {', '.join(left_out)}" if subset else "")
    plan, done = _plan(install, series, applied)
    verb = "reverted" if reverse else "applied"
    if done:
        return Outcome(False, f"{what} already {verb}: nothing to do")
    changed = [f for f in series.fixes if any(fh.path in plan for fh in f.files)]
    diff = "".join(f.patch.read_text() for f in changed if f.id in applied)
    parts = ", ".join(f"{f.id} {'applied' if f.id in applied else 'reverted'}" for f in changed)
    if dry_run:
        how = f"set ({parts})" if subset else verb
        return Outcome(False, f"dry run: {what} would be {how} to {len(plan)} files", diff)
    summary = f"{what} set ({parts})" if subset else f"{what} {verb}"
    _check_writable(install, list(plan))
    _write_all(install, plan)
    _record(install, series, "revert" if reverse else "apply", plan, applied)
    return Outcome(True, f"{summary}: {', '.join(plan)}")


def apply_series(
    install: VllmInstall,
    series_name: str | None = None,
    dry_run: bool = False,
    only: list[str] | None = None,
    exclude: list[str] | None = None,
) -> Outcome:
    """Apply the series, or with `only` / `exclude` a subset of its fixes: the install ends with exactly those
    applied, the series' other patches reverted (a fix applied earlier and now left out is taken back)."""
    return _run(install, series_name, reverse=False, dry_run=dry_run, only=only, exclude=exclude)


def revert_series(install: VllmInstall, series_name: str | None = None, dry_run: bool = False) -> Outcome:
    return _run(install, series_name, reverse=True, dry_run=dry_run)


def build_manifest_hashes(series_folder: Path, pristine_base: Path) -> str:
    """Maintainer helper: series.toml [[fix]] files tables computed from a pristine tree and the patches."""
    from bench.patching.series import load_series

    series = load_series(series_folder)
    lines = []
    for fix in series.fixes:
        lines.append(f"# {fix.id}")
        for diff in fix.diffs():
            old = (pristine_base / diff.path).read_text()
            new = apply_file_diff(old, diff)
            lines.append(f'{{ path = "{diff.path}", before = "{sha256_text(old)}", after = "{sha256_text(new)}" }},')
    return "\n".join(lines)


__all__ = [
    "apply_series",
    "build_manifest_hashes",
    "check_selection",
    "check_verified",
    "fix_statuses",
    "format_status",
    "left_out_fixes",
    "patch_report",
    "revert_series",
    "select_fixes",
]
