"""`bench report --check`: every report under a folder (reports/examples: documentation that must stay what the code
makes of its records) rebuilt into a temporary folder and compared, byte for byte, with the committed files. Only
the files a rebuild writes are compared, and only where they are committed (an example may leave report.html out,
or keep a screenshot beside it); nothing under the folder is written. report.html names its results directory as
the report was given it: the examples are built, and checked, from the repository root with relative paths."""

from __future__ import annotations

import difflib
import itertools
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from bench.report.build import build_report
from bench.report.starts import build_starts_report, start_dirs

TEXT_SUFFIXES = {".md", ".csv", ".json", ".html"}
DIFF_LINES = 40  # of a text file's unified diff shown per difference
LINE_CHARS = 200  # report.html has long lines (embedded images)


@dataclass
class Checked:
    reports: int = 0  # results directories and folders of starts
    files: int = 0  # committed files compared with their rebuild
    differences: list[str] = field(default_factory=list)  # one text block per file that differs


def check_reports(root: Path) -> Checked:
    """Rebuild and compare each results directory (a folder with manifest.json and a committed report/) and each
    folder of starts (start-k sweeps and a committed starts.md) at or under `root`."""
    root = Path(root)
    if root.is_absolute() and root.is_relative_to(Path.cwd()):
        root = root.relative_to(Path.cwd())  # report.html names the results directory as given: the examples are
        # built from the repository root with relative paths
    checked = Checked()
    for sweep_dir in _results_dirs(root):
        with tempfile.TemporaryDirectory(prefix="bench-check-") as tmp:
            rebuilt = build_report(sweep_dir, Path(tmp)).values()
            _compare(checked, sweep_dir / "report", Path(tmp), rebuilt)
    for starts_root in _starts_roots(root):
        with tempfile.TemporaryDirectory(prefix="bench-check-") as tmp:
            rebuilt = build_starts_report(starts_root, Path(tmp)).values()
            _compare(checked, starts_root, Path(tmp), rebuilt)
    return checked


def _results_dirs(root: Path) -> list[Path]:
    found = [m.parent for m in root.rglob("manifest.json")]
    return sorted(d for d in found if (d / "report").is_dir())


def _starts_roots(root: Path) -> list[Path]:
    found = [m.parent for m in root.rglob("starts.md")]
    return sorted(d for d in found if start_dirs(d))


def _compare(checked: Checked, committed_dir: Path, rebuilt_dir: Path, rebuilt: Iterable[Path]) -> None:
    checked.reports += 1
    for path in sorted(rebuilt):
        committed = committed_dir / path.relative_to(rebuilt_dir)
        if not committed.is_file():
            continue
        checked.files += 1
        old, new = committed.read_bytes(), path.read_bytes()
        if old != new:
            checked.differences.append(_difference(committed, old, new))


def _difference(committed: Path, old: bytes, new: bytes) -> str:
    head = f"{committed}: the rebuilt file differs ({len(old)} bytes committed, {len(new)} rebuilt)"
    if committed.suffix not in TEXT_SUFFIXES:
        return head
    diff = difflib.unified_diff(
        old.decode(errors="replace").splitlines(),
        new.decode(errors="replace").splitlines(),
        "committed",
        "rebuilt",
        lineterm="",
    )
    lines = [line[:LINE_CHARS] for line in itertools.islice(diff, DIFF_LINES)]
    return "\n".join([head, *lines])
