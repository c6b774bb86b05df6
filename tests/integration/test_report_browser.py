"""report.html opened the way a person would: headless Chromium, offline, from a file:// URL.

Checks that every <img> decoded in the browser (the page's inline script writes complete && naturalWidth > 0 per
image into body[data-images-loaded]; each img also gets data-loaded from its onload/onerror), that the tables are
there, and that a screenshot is not blank. A copy with one corrupted image must be reported as broken, so the
check cannot pass vacuously. Set BENCH_REPORT_SCREENSHOT=PATH to keep the screenshot.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from bench.report.build import build_report
from tests.helpers.stored_models import with_stored_models

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "tests" / "data" / "results" / "tiny-gpu-h200"
CHROMIUM = (
    shutil.which("chromium")
    or shutil.which("chromium-browser")
    or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (CI installs it: apt-get install chromium)"),
]


def chromium(tmp: Path, *args: str) -> subprocess.CompletedProcess:
    profile = tmp / f"chromium-profile-{len(list(tmp.glob('chromium-profile-*')))}"
    cmd = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
        *args,
    ]
    env = {**os.environ, "HOME": str(tmp)}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=env, check=False)


class Dom(HTMLParser):
    def __init__(self, text: str):
        super().__init__()
        self.body, self.imgs, self.tables = {}, [], []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "body":
            self.body = a
        elif tag == "img":
            self.imgs.append(a)
        elif tag == "table":
            self.tables.append(a.get("id"))


def dump_dom(tmp: Path, html_path: Path) -> Dom:
    out = chromium(tmp, "--virtual-time-budget=10000", "--dump-dom", html_path.as_uri())
    assert out.returncode == 0, out.stderr[-2000:]
    assert "<body" in out.stdout, out.stderr[-2000:]
    return Dom(out.stdout)


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    """The example's report with its model configs stored (the committed one predates them: no roofline plot)."""
    out = tmp_path_factory.mktemp("report")
    return build_report(with_stored_models(EXAMPLE, out / "sweep"), out)["html"]


def test_every_image_loads_and_the_tables_are_there(report, tmp_path):
    dom = dump_dom(tmp_path, report)
    n = len(dom.imgs)
    assert n == 6
    assert dom.body.get("data-images-loaded") == f"{n}/{n}", dom.body
    assert dom.body.get("data-images-broken") == ""
    assert all(im.get("data-loaded") == "1" for im in dom.imgs), [im.get("data-plot") for im in dom.imgs]
    assert {im["data-plot"] for im in dom.imgs} == {
        "throughput",
        "latency",
        "timeline",
        "acceptance",
        "heatmap",
        "roofline",
    }
    assert {
        "results",
        "latency",
        "pareto",
        "acceptance",
        "heatmap",
        "roofline",
        "roofline-points",
        "roofline-inputs",
        "problems",
        "effective",
    } <= set(dom.tables)


def test_a_broken_image_is_caught(report, tmp_path):
    text = report.read_text()
    broken = re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "data:image/png;base64,AAAAnotapng", text, count=1)
    path = tmp_path / "broken.html"
    path.write_text(broken)
    dom = dump_dom(tmp_path, path)
    assert dom.body.get("data-images-loaded") == "5/6"
    assert dom.body.get("data-images-broken") == "throughput"
    assert [im.get("data-loaded") for im in dom.imgs].count("0") == 1


def test_screenshot_is_not_blank(report, tmp_path):
    png = tmp_path / "screenshot.png"
    out = chromium(tmp_path, f"--screenshot={png}", "--window-size=1400,4000", report.as_uri())
    assert out.returncode == 0 and png.exists(), out.stderr[-2000:]
    import matplotlib.image as mpimg

    im = mpimg.imread(png)
    assert im.shape[:2] == (4000, 1400)
    ink = (im[:, :, :3] < 0.9).any(axis=2)
    assert ink.mean() > 0.03  # text, tables and plots, not an empty page
    assert ink[3000:].mean() > 0.01  # the plots further down rendered too
    if os.environ.get("BENCH_REPORT_SCREENSHOT"):
        shutil.copyfile(png, os.environ["BENCH_REPORT_SCREENSHOT"])


KIMI_EXAMPLE = REPO / "reports" / "examples" / "kimi-rank-h200-one-lease" / "lease-1"
FIRST_SCREEN = (1400, 900)  # px: a laptop's browser window
MEASURE = """<script>
window.addEventListener('load', () => {
  const w = window.innerWidth, h = window.innerHeight, b = document.body;
  const view = document.getElementById('decision');
  const table = document.getElementById('decision-table');
  const wrap = table ? table.parentElement : null;
  const cell = table ? table.querySelector('tbody tr td:nth-child(2)') : null;
  const precision = table ? table.querySelector('tbody tr td:nth-child(3)') : null;
  const onScreen = (el) => { if (!el) return '0'; const r = el.getBoundingClientRect();
    return (r.top >= 0 && r.bottom <= h && r.left >= 0 && r.right <= w) ? '1' : '0'; };
  b.setAttribute('data-page-fits', document.documentElement.scrollWidth <= w ? '1' : '0');
  b.setAttribute('data-table-fits', wrap && wrap.scrollWidth <= wrap.clientWidth ? '1' : '0');
  b.setAttribute('data-view-top', view ? String(Math.round(view.getBoundingClientRect().top)) : '');
  b.setAttribute('data-lead-on-screen', onScreen(view ? view.querySelector('p.lead') : null));
  b.setAttribute('data-best-on-screen', onScreen(cell));
  b.setAttribute('data-best', cell ? cell.textContent : '');
  b.setAttribute('data-precision-on-screen', onScreen(precision));
  b.setAttribute('data-precision', precision ? precision.textContent : '');
});
</script>"""


def test_the_decision_view_is_on_the_first_screen_without_horizontal_scrolling(tmp_path):
    """A Kimi-rank example's report.html at 1400 px: the decision view, its best configuration and that one's
    precision are within the first screen, and neither the page nor the decision table scrolls sideways."""
    html = build_report(KIMI_EXAMPLE, tmp_path / "report")["html"]
    page = tmp_path / "measured.html"
    page.write_text(html.read_text().replace("</body>", MEASURE + "\n</body>"))
    width, height = FIRST_SCREEN
    out = chromium(
        tmp_path, f"--window-size={width},{height}", "--virtual-time-budget=10000", "--dump-dom", page.as_uri()
    )
    assert out.returncode == 0, out.stderr[-2000:]
    body = Dom(out.stdout).body
    assert body.get("data-best") == "FLASHMLA/fp8 draft k=3", body
    assert body.get("data-precision") == "1.26x [1.22, 1.31] within one start", body
    assert body.get("data-page-fits") == "1" and body.get("data-table-fits") == "1", body
    assert int(body.get("data-view-top") or 10**6) < height, body
    assert body.get("data-lead-on-screen") == "1", body
    assert body.get("data-best-on-screen") == "1" and body.get("data-precision-on-screen") == "1", body
