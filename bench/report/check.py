"""`bench report --check`: every report under a folder (reports/examples: documentation that must stay what the code
makes of its records) rebuilt into a temporary folder and compared with the committed files: text byte for byte,
images as images. Only the files a rebuild writes are compared, and only where they are committed (an example may
leave report.html out, or keep a screenshot beside it); nothing under the folder is written, unless `update` (`bench
report --check --update`) rewrites the committed files that differ. report.html names its results directory as the
report was given it: the examples are built, and checked, from the repository root with relative paths.

A plot is compared by its pixels, within IMAGE_TOLERANCE: the same figure drawn by the same matplotlib on another
CPU may differ in a few anti-aliased edge pixels (floating point in the layout), which says nothing about the report.
report.html embeds its plots as base64 PNGs: its text is compared with them cut out, and each image as a plot.
A Parquet table is compared by its columns, types and values: pandas writes its own version into the file's
metadata, so the same table written by pandas 3.1.1 and 3.1.2 differs in bytes (and `pip install` takes the newest)."""

from __future__ import annotations

import base64
import difflib
import io
import itertools
import re
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from bench.core.files import atomic_write_bytes
from bench.report.build import build_report
from bench.report.starts import build_starts_report, start_dirs

TEXT_SUFFIXES = {".md", ".csv", ".json", ".html"}
EMBEDDED_PNG = re.compile(rb"data:image/png;base64,([A-Za-z0-9+/=]+)")
# a plot matches when at most this share of its pixels differ: the figures it draws are checked byte for byte in
# the text files beside it (summary.md, the CSVs), so the image check is there for a plot that changed as a whole
IMAGE_TOLERANCE = 0.002
DIFF_LINES = 40  # of a text file's unified diff shown per difference
LINE_CHARS = 200  # report.html has long lines (embedded images)


@dataclass
class Checked:
    reports: int = 0  # results directories and folders of starts
    files: int = 0  # committed files compared with their rebuild
    differences: list[str] = field(default_factory=list)  # one text block per file that differs


def check_reports(root: Path, update: bool = False) -> Checked:
    """Rebuild and compare each results directory (a folder with manifest.json and a committed report/) and each
    folder of starts (start-k sweeps and a committed starts.md) at or under `root`. `update`: each committed file
    that differs is overwritten with its rebuild (`bench report --check --update`)."""
    root = Path(root)
    if root.is_absolute() and root.is_relative_to(Path.cwd()):
        root = root.relative_to(Path.cwd())  # report.html names the results directory as given: the examples are
        # built from the repository root with relative paths
    checked = Checked()
    for sweep_dir in _results_dirs(root):
        with tempfile.TemporaryDirectory(prefix="bench-check-") as tmp:
            rebuilt = build_report(sweep_dir, Path(tmp)).values()
            _compare(checked, sweep_dir / "report", Path(tmp), rebuilt, update)
    for starts_root in _starts_roots(root):
        with tempfile.TemporaryDirectory(prefix="bench-check-") as tmp:
            rebuilt = build_starts_report(starts_root, Path(tmp)).values()
            _compare(checked, starts_root, Path(tmp), rebuilt, update)
    return checked


def _results_dirs(root: Path) -> list[Path]:
    found = [m.parent for m in root.rglob("manifest.json")]
    return sorted(d for d in found if (d / "report").is_dir())


def _starts_roots(root: Path) -> list[Path]:
    found = [m.parent for m in root.rglob("starts.md")]
    return sorted(d for d in found if start_dirs(d))


def _compare(
    checked: Checked, committed_dir: Path, rebuilt_dir: Path, rebuilt: Iterable[Path], update: bool = False
) -> None:
    checked.reports += 1
    for path in sorted(rebuilt):
        committed = committed_dir / path.relative_to(rebuilt_dir)
        if not committed.is_file():
            continue
        checked.files += 1
        old, new = committed.read_bytes(), path.read_bytes()
        if old != new and not _same_report_file(committed.suffix, old, new):
            checked.differences.append(_difference(committed, old, new))
            if update:
                atomic_write_bytes(committed, new)


def _same_report_file(suffix: str, old: bytes, new: bytes) -> bool:
    """Whether two versions of a report file that differ in bytes are the same report: plots within the image
    tolerance, report.html equal once its embedded plots are cut out and those plots within the tolerance."""
    if suffix == ".png":
        return same_image(old, new)
    if suffix == ".parquet":
        return same_table(old, new)
    if suffix == ".html":
        old_images, new_images = EMBEDDED_PNG.findall(old), EMBEDDED_PNG.findall(new)
        cut = rb"data:image/png;base64,..."
        return (
            EMBEDDED_PNG.sub(cut, old) == EMBEDDED_PNG.sub(cut, new)
            and len(old_images) == len(new_images)
            and all(same_image(base64.b64decode(a), base64.b64decode(b)) for a, b in zip(old_images, new_images))
        )
    return False


def same_table(old: bytes, new: bytes) -> bool:
    """Two Parquet files of one table: the same column names, types and values, in order; the writers' metadata
    (pandas' and pyarrow's versions) aside (Table.equals compares the schema without its metadata)."""
    import pyarrow.parquet as pq

    a, b = (pq.read_table(io.BytesIO(data)) for data in (old, new))
    return a.equals(b)


def same_image(old: bytes, new: bytes) -> bool:
    """Two PNGs of one plot: the same size and at most IMAGE_TOLERANCE of the pixels differing (a plot of other data,
    another layout or another style differs in far more)."""
    import matplotlib.image as mpimg
    import numpy as np

    a, b = (mpimg.imread(io.BytesIO(data), format="png") for data in (old, new))
    if a.shape != b.shape:
        return False
    delta = np.abs(a.astype(float) - b.astype(float))
    per_pixel = delta.max(axis=-1) if delta.ndim == 3 else delta
    return bool((per_pixel > 0).mean() <= IMAGE_TOLERANCE)


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
