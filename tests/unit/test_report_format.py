"""One number formatter (bench.core.fmt): reports built from committed examples show no unformatted float (more than
SIGNIFICANT significant digits, or e-notation) in summary.md or in report.html's visible text, write a missing
precision one way (NO_PRECISION), link only to sections they have, and collapse the model-input dump."""

import re
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from bench.cli import main
from bench.core.fmt import NO_PRECISION, SIGNIFICANT, fmt, human_bytes, plain

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "reports" / "examples"
# A few committed examples that between them hold every table: results with and without precision, speedups,
# servers (vLLM's log figures), roofline, NVTX ranges, the DCP view, text workloads and categories.
BUILT = (
    "kimi-rank-h200-staggered/sweep",
    "kimi-rank-h200/nsys/flashmla-fp8",
    "kimi-rank-h200-dcp/sweep",
    "tiny-text-cpu",
)

DECIMAL = re.compile(r"(?<![\w.])(\d[\d,]*\.\d+)(?!\d|\.\d)")  # not inside a version (0.32.0) or a word
E_NOTATION = re.compile(r"(?<![\w.])\d+(?:\.\d+)?e[+-]?\d+\b", re.I)


def unformatted(text: str) -> list[str]:
    """Every decimal number with more than SIGNIFICANT significant digits, and every e-notation number."""
    long = [m for m in DECIMAL.findall(text) if len(re.sub(r"\D", "", m).lstrip("0")) > SIGNIFICANT]
    return long + E_NOTATION.findall(text)


class _Visible(HTMLParser):
    """A page's visible text: no script or style, no attribute (the base64 images live there); a tab between
    cells and a new line between rows and blocks, so that adjacent cells never read as one number."""

    def __init__(self) -> None:
        super().__init__()
        self.hidden, self.parts = 0, []

    def handle_starttag(self, tag, attrs):
        self.hidden += tag in ("script", "style")
        if tag in ("td", "th"):
            self.parts.append("\t")
        elif tag in ("tr", "p", "div", "br", "li", "h1", "h2", "h3", "pre", "table", "summary", "figcaption"):
            self.parts.append("\n")

    def handle_endtag(self, tag):
        self.hidden -= tag in ("script", "style")

    def handle_data(self, data):
        if not self.hidden:
            self.parts.append(data)


def visible(html: str) -> str:
    parser = _Visible()
    parser.feed(html)
    return "".join(parser.parts)


def test_the_check_finds_what_the_issue_found_and_passes_what_is_fine():
    found = "load s 5.105391 | 9.824195/6.282417 | 4.8e+12 B/s | 3.41e+03 | 28.4080 | 1,399.2"
    assert unformatted(found) == ["5.105391", "9.824195", "6.282417", "28.4080", "1,399.2", "4.8e+12", "3.41e+03"]
    fine = "vLLM 0.32.0, python 3.11.7, 1.40x +-6.3%, 1,292,864 tokens, 8.3%, 2026-12-04T08:45:24, 0.435, 12,346"
    assert unformatted(fine) == []
    cells = visible("<table><tr><td>1.5</td><td>2.25</td></tr></table><img src='data:image/png;base64,1.23456'>")
    assert unformatted(cells) == [] and "1.5\t2.25" in cells


@pytest.mark.parametrize(
    ("value", "spec", "text"),
    [
        (185.39, ",.2f", "185.4"),
        (1399.21, ",.1f", "1,399"),
        (999.96, ",.1f", "1,000"),  # rounding up to a fifth digit drops the decimal
        (12.345, ",.2f", "12.35"),
        (28.4080, ",.4f", "28.41"),
        (0.08294, ".1%", "8.3%"),
        (0.86, ".1%", "86.0%"),
        (4.8e12, "bytes/s", "4.80 TB/s"),
        (323.81e6, "bytes", "323.8 MB"),
        (0.000123456, ".3g", "0.000123"),  # a non-fixed spec is used as given
        (5, ".2f", "5.00"),
    ],
)
def test_fixed_point_specs_show_at_most_four_significant_digits(value, spec, text):
    assert fmt(value, spec) == text


def test_a_float_without_a_spec_has_four_significant_digits_and_no_e_notation():
    assert [plain(v) for v in (0.435, 2.305, 3.0, 12345.6, 1e-6, 6.184323, 4.8e12)] == [
        "0.435",
        "2.305",
        "3",
        "12,346",
        "0.000001",
        "6.184",
        "4,800,000,000,000",
    ]
    rng = np.random.default_rng(0)
    values = rng.lognormal(0, 8, 2000) * rng.choice([-1, 1], 2000)
    for v in values:
        for text in (plain(float(v)), fmt(float(v), ",.2f"), fmt(float(v), ".1%"), human_bytes(abs(float(v)))):
            assert unformatted(text) == [], (v, text)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, tuple[str, str]]:
    """{example: (summary.md, report.html's visible text)} of reports built into a temporary folder."""
    out = {}
    for name in BUILT:
        dest = tmp_path_factory.mktemp("report")
        assert main(["report", str(EXAMPLES / name), "--out", str(dest)]) == 0
        out[name] = ((dest / "summary.md").read_text(), (dest / "report.html").read_text())
    return out


@pytest.mark.parametrize("name", BUILT)
def test_built_reports_show_no_unformatted_float(built, name):
    summary, html = built[name]
    assert unformatted(summary) == []
    assert unformatted(visible(html)) == []


def _precision_cells(summary: str) -> list[str]:
    """The cells of every summary.md table column headed "+-" (alone or after a figure's name)."""
    cells = []
    for block in re.findall(r"(?:^\|.*\|\n)+", summary, re.M):
        rows = [[c.strip() for c in line.strip("|").split("|")] for line in block.strip().split("\n")]
        at = [i for i, h in enumerate(rows[0]) if h == "+-" or h.endswith(" +-")]
        cells += [row[i] for row in rows[2:] for i in at]
    return cells


@pytest.mark.parametrize("name", BUILT)
def test_a_missing_precision_is_written_one_way(built, name):
    summary, html = built[name]
    cells = _precision_cells(summary)
    written = (r"\d+\.\d%", re.escape(NO_PRECISION), re.escape(NO_PRECISION) + r" \(short: \d+ cycles\)")
    assert cells and all(any(re.fullmatch(w, c) for w in written) for c in cells), cells
    assert "+-n/a" not in summary + html and "+- " not in visible(html)


def test_the_tiny_text_sweep_states_no_precision_where_its_windows_have_none(built):
    assert NO_PRECISION in _precision_cells(built["tiny-text-cpu"][0])  # whole-window (open-loop) points


def test_the_dcp_link_is_there_only_with_its_section(built):
    for name, (_, html) in built.items():
        assert ('href="#dcp"' in html) == ('<section id="dcp">' in html), name
    assert '<section id="dcp">' in built["kimi-rank-h200-dcp/sweep"][1]


def test_the_model_inputs_are_collapsed(built):
    html = built["kimi-rank-h200-staggered/sweep"][1]
    details = re.search(r"<details><summary>Model inputs \((\d+) rows.*?</details>", html, re.S)
    assert details and int(details.group(1)) > 20 and 'id="roofline-inputs"' in details.group(0)


COMMITTED = sorted((EXAMPLES).glob("**/report/summary.md"))


@pytest.mark.parametrize("summary", COMMITTED, ids=lambda p: str(p.parent.parent.relative_to(EXAMPLES)))
def test_no_committed_summary_shows_an_unformatted_float(summary):
    """Every committed summary.md (tests/unit/test_report.py holds them to what the code builds)."""
    assert unformatted(summary.read_text()) == []
