"""`bench report --check`: every report under a folder rebuilt into a temporary folder and compared with the committed
files (CI runs it over reports/examples as a step of its own). Here over copies of a small results directory of
tests/data: one whose report is as built, one whose summary.md was edited by hand, a plot that changed, a folder of
starts, and nothing written under the folder checked."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from bench import cli
from bench.core.errors import BenchError, ExitCode
from bench.report.build import build_report
from bench.report.check import check_reports
from bench.report.starts import build_starts_report

DATA = Path(__file__).resolve().parents[1] / "data" / "results"
RESULTS = DATA / "kimi-rank-dcp-h200" / "full-graphs-dcp"  # 4 failed points: a report in 0.3 s, one plot


def built(root: Path) -> Path:
    """A copy of the results directory at `root` with its report built there (report.html names the directory as
    given, so an example is built where it is checked)."""
    shutil.copytree(RESULTS, root)
    build_report(root)
    return root


def listing(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_report_as_built_has_no_difference_and_nothing_is_written(tmp_path, capsys):
    examples = tmp_path / "examples"
    built(examples / "a")
    (examples / "a" / "report" / "report.html").unlink()  # an example may leave a file out: not compared
    (examples / "a" / "report" / "screenshot.png").write_bytes(b"png")  # or keep one the report does not write
    before = listing(examples)
    committed = [p for p in (examples / "a" / "report").rglob("*") if p.is_file() and p.name != "screenshot.png"]
    assert len(committed) == 5  # summary.md, points.csv and .parquet, servers.csv, plots/heatmap.png
    assert cli.main(["report", "--check", str(examples)]) == ExitCode.OK
    assert f"{examples}: 1 report(s), {len(committed)} committed file(s) compared with their rebuild; 0 differ" in (
        capsys.readouterr().out
    )
    assert listing(examples) == before


def test_an_edited_summary_and_a_changed_plot_are_differences(tmp_path, capsys):
    examples = tmp_path / "examples"
    built(examples / "a")
    summary = examples / "a" / "report" / "summary.md"
    summary.write_text(summary.read_text().replace("0 ok, 4 failed, 0 skipped.", "1 ok, 3 failed, 0 skipped."))
    plot = examples / "a" / "report" / "plots" / "heatmap.png"
    import matplotlib.image as mpimg

    mpimg.imsave(plot, 1 - mpimg.imread(plot)[..., :3])  # another plot: every pixel changed
    assert cli.main(["report", "--check", str(examples)]) == ExitCode.REPORT_DIFFERS == 8
    out = capsys.readouterr().out
    assert f"{summary}: the rebuilt file differs" in out
    assert "-1 ok, 3 failed, 0 skipped.\n+0 ok, 4 failed, 0 skipped." in out  # the diff: committed, then rebuilt
    assert f"{plot}: the rebuilt file differs ({plot.stat().st_size} bytes committed" in out
    assert out.rstrip().endswith("; 2 differ")
    # --update rewrites both with their rebuild; the check then finds nothing
    assert cli.main(["report", "--check", "--update", str(examples)]) == ExitCode.OK
    assert capsys.readouterr().out.rstrip().endswith("; 2 differ (rewritten: review the diff)")
    assert "0 ok, 4 failed, 0 skipped." in summary.read_text()
    assert cli.main(["report", "--check", str(examples)]) == ExitCode.OK
    with pytest.raises(BenchError, match="goes with --check"):
        cli.cmd_report(cli.build_parser().parse_args(["report", "--update", str(examples)]))


def test_a_folder_of_starts_is_checked_with_its_starts(tmp_path):
    """The starts' own reports are left out here (a start-k without report/ is not checked): starts.md, .json and
    .png are built from the records."""
    starts = tmp_path / "examples" / "starts"
    for k in (1, 2):
        shutil.copytree(DATA / "tiny-block64-gpu-h200", starts / f"start-{k}")
    written = build_starts_report(starts)
    assert check_reports(starts.parent).differences == []
    (starts / "starts.md").write_text("edited\n")
    checked = check_reports(starts.parent)
    assert (checked.reports, checked.files) == (1, len(written))
    assert [d.splitlines()[0].split(":")[0] for d in checked.differences] == [str(starts / "starts.md")]


def test_nothing_to_check_and_other_options_are_errors(tmp_path):
    with pytest.raises(BenchError, match="no results directory with a report/"):
        cli._check_reports(cli.build_parser().parse_args(["report", "--check", str(tmp_path)]))
    with pytest.raises(BenchError, match="no --out, --slo or --recompute"):
        cli._check_reports(cli.build_parser().parse_args(["report", "--check", str(tmp_path), "--recompute"]))


def test_plots_compare_as_images_and_report_html_without_its_embedded_plots():
    """A plot redrawn with a few edge pixels off (another CPU's floating point) is the same plot; one of other data
    is not; report.html compares its text with the embedded plots cut out, and those plots as plots."""
    import base64
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from bench.report.check import _same_report_file, same_image

    def png(ys, nudge=0):
        fig, ax = plt.subplots(figsize=(4, 3), dpi=100)
        ax.plot(ys)
        buf = io.BytesIO()
        fig.savefig(buf, format="png")
        plt.close(fig)
        data = buf.getvalue()
        if not nudge:
            return data
        img = matplotlib.image.imread(io.BytesIO(data), format="png")
        img[5, 5 : 5 + nudge, :3] = 0.5  # a few pixels off, as anti-aliasing on another machine might leave
        out = io.BytesIO()
        matplotlib.image.imsave(out, img, format="png")
        return out.getvalue()

    a, b, other = png([1, 2, 3], nudge=0), png([1, 2, 3], nudge=3), png([3, 1, 2])
    assert a != b and same_image(a, b)
    assert not same_image(a, other)
    html = b'<p>x</p><img src="data:image/png;base64,%s">'
    page = html % base64.b64encode(a)
    assert _same_report_file(".html", page, html % base64.b64encode(b))
    assert not _same_report_file(".html", page, html % base64.b64encode(other))
    assert not _same_report_file(".html", page, page.replace(b"<p>x</p>", b"<p>y</p>"))
    assert not _same_report_file(".md", b"a", b"b")


def test_parquet_tables_compare_by_content_not_by_the_writers_versions():
    """CI installs the newest pandas, which writes its version into points.parquet's metadata: the same table from
    pandas 3.1.1 and 3.1.2 is the same report file; a changed value, column type or column order is not."""
    import io

    import pandas as pd

    from bench.report.check import _same_report_file

    def parquet(df, pandas_version=None):
        buf = io.BytesIO()
        df.to_parquet(buf, index=False)
        data = buf.getvalue()
        if pandas_version is not None:
            current = f'"pandas_version": "{pd.__version__}"'.encode()
            assert current in data
            data = data.replace(current, f'"pandas_version": "{pandas_version}"'.encode())
        return data

    df = pd.DataFrame({"point_id": ["a", "b"], "tok_s": [728.6, 656.3]})
    written = parquet(df)
    other_pandas = parquet(df, pandas_version="9" * len(pd.__version__))  # same length: the footer stays readable
    assert written != other_pandas and _same_report_file(".parquet", written, other_pandas)
    assert not _same_report_file(".parquet", written, parquet(df.assign(tok_s=[728.6, 656.4])))
    assert not _same_report_file(".parquet", written, parquet(df.assign(tok_s=df.tok_s.astype("float32"))))
    assert not _same_report_file(".parquet", written, parquet(df[["tok_s", "point_id"]]))
