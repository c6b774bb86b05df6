"""Charts of the NVTX range analysis.

Drawn on a bare matplotlib Figure (Agg canvas) rather than through pyplot: no display needed on servers or in
CI, and drawing does not switch the backend of a notebook or program that also uses pyplot.

The chart is made in two steps: `range_bars` picks the bars from the summary table (pandas, in the caller) and
`draw_range_breakdown` draws them (matplotlib, imported only there). `ChartInChild` runs the second step in a child
process started before `profile analyze` reads its export: matplotlib's import (about 0.3 s) then overlaps the
read instead of following it (docs/nsys-analysis.md "Performance"). The child (`_child_main`) imports matplotlib,
then reads the bars as JSON on stdin.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from bench.core.errors import BenchError
from bench.core.files import atomic_write_bytes

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes

MAX_BARS = 30
CHILD_TIMEOUT_S = 300
# The child: the folder that holds this bench goes first on its path unless it is there already (a checkout run
# with PYTHONPATH or from its root; an installed bench's site-packages stays where it is, after the standard library)
_CHILD = (
    "import sys; root = sys.argv[1]; root in sys.path or sys.path.insert(0, root); "
    "from bench.profiling.plot import _child_main; sys.exit(_child_main(sys.argv[2:]))"
)


def plot_range_breakdown(summary_df: pd.DataFrame, path_png: str | Path, *, max_bars: int = MAX_BARS) -> Path:
    """Horizontal bars per range name (summary table rows): mean CPU time vs mean GPU busy time, in ms.

    Why both: a range whose GPU busy time is far below its CPU time is launch/host bound, one far above
    (work queued asynchronously) is GPU bound. The `max_bars` names with the largest total CPU time are shown;
    a log axis is used when the values span more than three decades, so microsecond ranges stay visible next
    to second-long ones.
    """
    return draw_range_breakdown(range_bars(summary_df, max_bars=max_bars), path_png)


def range_bars(summary_df: pd.DataFrame, *, max_bars: int = MAX_BARS) -> dict[str, list]:
    """The chart's bars, bottom to top, as plain lists (JSON for the child): label, mean CPU ms, mean GPU-busy ms,
    count per range name; the `max_bars` names with the largest total CPU time."""
    from bench.profiling.nsys_readers import range_label

    df = summary_df.sort_values("cpu_ns_total", ascending=False, kind="stable").head(max_bars).iloc[::-1]
    return {
        "label": [range_label(d, n) for d, n in zip(df["domain"], df["name"])],
        "cpu_ms": [float(v) / 1e6 for v in df["cpu_ns_mean"]],
        "gpu_ms": [float(v) / 1e6 for v in df["gpu_busy_ns_mean"]],
        "count": [int(v) for v in df["count"]],
    }


def draw_range_breakdown(bars: dict[str, list], path_png: str | Path) -> Path:
    """Draw `range_bars`' bars into `path_png` (written atomically)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    path_png = Path(path_png)
    n = len(bars["label"])
    fig = Figure(figsize=(9, 1.2 + 0.45 * max(n, 1)))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    if n:
        _draw_bars(ax, bars)
    else:
        ax.text(0.5, 0.5, "no NVTX ranges", ha="center", va="center", transform=ax.transAxes)
        ax.set_yticks([])
    ax.set_xlabel("time per range (ms)")
    ax.set_title("NVTX ranges: CPU time vs GPU busy time (mean per range)")
    # margins from the label lengths instead of tight_layout: one draw (savefig's) instead of two, which halves
    # the plot's cost on a large export's analysis (docs/nsys-analysis.md "Performance")
    width_in = fig.get_figwidth()
    longest = max((len(label) for label in bars["label"]), default=10)
    fig.subplots_adjust(
        left=min(0.6, (0.2 + 0.075 * longest) / width_in),
        right=0.97,
        top=1 - 0.5 / fig.get_figheight(),
        bottom=0.6 / fig.get_figheight(),
    )
    try:
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=110)
        atomic_write_bytes(path_png, buf.getvalue())
    except OSError as exc:
        raise BenchError(f"cannot write the plot {path_png} ({exc})") from exc
    return path_png


def _draw_bars(ax: Axes, bars: dict[str, list]) -> None:
    import numpy as np
    from matplotlib.ticker import FuncFormatter, NullLocator

    cpu = np.asarray(bars["cpu_ms"], dtype=float)
    gpu = np.asarray(bars["gpu_ms"], dtype=float)
    y = np.arange(len(cpu))
    ax.barh(y + 0.2, cpu, height=0.4, label="CPU time", color="#4c72b0")
    ax.barh(y - 0.2, gpu, height=0.4, label="GPU busy (union of kernels/copies)", color="#dd8452")
    ax.set_yticks(y, bars["label"])
    positive = np.concatenate([cpu[cpu > 0], gpu[gpu > 0]])
    if len(positive) and positive.max() / positive.min() > 1e3:
        ax.set_xscale("log")
        # plain numbers ("0.01", "100") instead of $10^{n}$, and no minor ticks: matplotlib's mathtext parser and
        # the ~90 minor tick objects took 0.27-0.32 s of the chart's draw in a fresh process, 0.17 s without them
        # (CPU machine, the 65 MB benchmark export's summary, 3 runs each), and `bench profile analyze` always is one
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_locator(NullLocator())
    ax.legend(loc="lower right", fontsize=8)  # "best" searches every artist: slow
    for yi, c, g, n in zip(range(len(cpu)), cpu, gpu, bars["count"]):
        ax.text(max(c, g), yi, f"  n={n}", va="center", fontsize=8)


class ChartInChild:
    """The range-breakdown chart drawn by a child process that starts now and imports matplotlib while the caller
    works; `send(summary)` gives it the bars, `wait()` returns the PNG's path. Use it as a context manager: a child
    not waited for (the analysis failed) is killed on exit."""

    def __init__(self, path_png: str | Path):
        self.path_png = Path(path_png)
        package_root = str(Path(__file__).resolve().parents[2])  # the child imports this same bench
        try:
            self.proc: subprocess.Popen | None = subprocess.Popen(
                [sys.executable, "-c", _CHILD, package_root, str(self.path_png)],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
        except OSError as exc:
            raise BenchError(f"cannot start the chart's process ({exc}); --no-plot analyzes without it") from exc

    def send(self, summary_df: pd.DataFrame) -> None:
        """Hand the child its bars; it draws while the caller goes on (`wait` collects the PNG)."""
        if self.proc is None or self.proc.stdin is None:
            raise BenchError("the chart's process was already given its bars, or closed")
        stdin, self.proc.stdin = self.proc.stdin, None  # communicate() in wait() must not touch it again
        try:
            stdin.write(json.dumps(range_bars(summary_df)).encode())
            stdin.close()
        except OSError:  # the child died first (BrokenPipeError): wait() reports why
            pass

    def wait(self) -> Path:
        """The PNG's path once the child wrote it; a BenchError with the child's last line when it did not."""
        proc, self.proc = self.proc, None
        if proc is None:
            raise BenchError("the chart's process was already waited for, or closed")
        try:
            _, err = proc.communicate(timeout=CHILD_TIMEOUT_S)
        except subprocess.TimeoutExpired as exc:
            proc.kill()
            proc.communicate()
            msg = f"the chart's process drew nothing in {CHILD_TIMEOUT_S} s; --no-plot skips the chart"
            raise BenchError(msg) from exc
        if proc.returncode != 0:
            tail = err.decode(errors="replace").strip().splitlines()[-1:] or [f"exit {proc.returncode}"]
            raise BenchError(f"the chart's process failed: {tail[0]} (--no-plot skips the chart)")
        return self.path_png

    def close(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.communicate()

    def __enter__(self) -> ChartInChild:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _child_main(argv: list[str]) -> int:
    # matplotlib first, before the bars can arrive: this import is what runs beside the parent's read
    import matplotlib.backends.backend_agg
    import matplotlib.figure
    import matplotlib.ticker  # noqa: F401

    if len(argv) != 1:
        print("usage: _child_main OUT.png  (bars as JSON on stdin)", file=sys.stderr)
        return 2
    try:
        draw_range_breakdown(json.load(sys.stdin), argv[0])
    except BenchError as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0
