"""`bench report SWEEP_DIR`: tables (CSV + Parquet), summary.md, report.html and its plots as PNG files, from the
results directory alone."""

from __future__ import annotations

from pathlib import Path

from bench.config.slo import Slo
from bench.core.errors import BenchError
from bench.core.files import atomic_write_bytes, atomic_write_table
from bench.report import decision
from bench.report.markdown import summary_markdown
from bench.report.roofline import model_configs
from bench.report.servers import server_table
from bench.report.tables import points_table, provenance
from bench.results.store import SweepStore


def build_report(sweep_dir: Path, out_dir: Path | None = None, slo: Slo | None = None) -> dict[str, Path]:
    """`slo`: service-level targets for goodput (`bench report --slo`), over the profile's `[report] slo`."""
    sweep_dir = Path(sweep_dir)
    if not sweep_dir.is_dir():
        raise BenchError(f"{sweep_dir}: no such results directory")
    out = Path(out_dir or sweep_dir / "report")
    points = points_table(sweep_dir)
    paths = {"summary": out / "summary.md", "points_csv": out / "points.csv", "points_parquet": out / "points.parquet"}
    paths["servers_csv"] = out / "servers.csv"
    servers = server_table(sweep_dir, SweepStore(sweep_dir).records())
    view = decision.sweep_view(sweep_dir, points, servers, slo)
    atomic_write_bytes(paths["summary"], summary_text(sweep_dir, points, servers, view).encode())
    atomic_write_bytes(paths["servers_csv"], servers.to_csv(index=False).encode())
    flat = points.drop(columns=["categories"], errors="ignore").assign(  # categories: categories.csv
        per_position_acceptance=points.per_position_acceptance.map(_positions)
    )
    atomic_write_bytes(paths["points_csv"], flat.to_csv(index=False).encode())
    atomic_write_table(paths["points_parquet"], flat)
    paths.update(build_html(sweep_dir, out, points, servers, view))
    return paths


def summary_text(sweep_dir: Path, points=None, servers=None, view: decision.DecisionView | None = None) -> str:
    """summary.md of a results directory (`points`, `servers`, `view`: its tables and decision view when already
    built)."""
    sweep_dir = Path(sweep_dir)
    points = points_table(sweep_dir) if points is None else points
    if servers is None:
        servers = server_table(sweep_dir, SweepStore(sweep_dir).records())
    view = view or decision.sweep_view(sweep_dir, points, servers)
    return summary_markdown(points, provenance(sweep_dir), model_configs(sweep_dir), servers, view)  # models: DCP


def build_html(sweep_dir: Path, out: Path, points=None, servers=None, view=None) -> dict[str, Path]:
    """report.html (self-contained) and plots/<name>.png; a plot with nothing to draw is not written."""
    from bench.report.analysis import collect
    from bench.report.figures import draw_all
    from bench.report.html import render_html

    data = collect(sweep_dir, points, servers, view)
    images = draw_all(data)
    paths = {}
    for name, png in images.items():
        if png is not None:
            paths[f"plot_{name}"] = out / "plots" / f"{name}.png"
            atomic_write_bytes(paths[f"plot_{name}"], png)
    if len(data.categories):  # acceptance per workload and category
        paths["categories_csv"] = out / "categories.csv"
        table = data.categories.assign(per_position_acceptance=data.categories.per_position_acceptance.map(_positions))
        atomic_write_table(paths["categories_csv"], table)
    paths["html"] = out / "report.html"
    atomic_write_bytes(paths["html"], render_html(data, images).encode())
    return paths


def _positions(v) -> str | None:
    return None if not isinstance(v, list) else "/".join("-" if x is None else f"{x:.4f}" for x in v)
