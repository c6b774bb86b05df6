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
        "pareto",
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
