"""The README and docs/: every relative link resolves (file, and heading for a #anchor), docs/index.md lists every
page, and the README stays a page a newcomer reads in two minutes, with the quick-start commands CI runs."""

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]

FENCE = re.compile(r"^```.*?^```", re.S | re.M)
CODE_SPAN = re.compile(r"`+[^`\n]*`+")
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)
INLINE_LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")


def _prose(text: str) -> str:
    """The text links are read from: fenced code blocks dropped, code spans emptied."""
    return CODE_SPAN.sub("``", FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: markup dropped, lower case, punctuation other than - and _ removed, spaces
    to hyphens."""
    text = INLINE_LINK.sub(r"\1", heading).replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    for heading in HEADING.findall(FENCE.sub("", path.read_text())):
        base, n = slug(heading), 0
        name = base
        while name in found:  # GitHub numbers repeated headings: x, x-1, x-2
            n += 1
            name = f"{base}-{n}"
        found.add(name)
    return found


def broken_links(page: Path) -> list[str]:
    """Every relative link of `page` that names no existing file, or a heading its markdown target lacks."""
    out = []
    for target in LINK.findall(_prose(page.read_text())):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto: (not checked offline)
            continue
        path_part, _, anchor = target.partition("#")
        dest = (page.parent / path_part).resolve() if path_part else page
        if not dest.exists():
            out.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            out.append(f"{target}: no heading #{anchor} in {dest.name}")
    return out


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(page):
    assert broken_links(page) == []


def test_the_checker_finds_a_missing_file_and_a_missing_heading(tmp_path):
    (tmp_path / "b.md").write_text("# Real heading\n\n## `bench sweep [PROFILE]`\n")
    page = tmp_path / "a.md"
    page.write_text(
        "[ok](b.md#real-heading) [ok too](b.md#bench-sweep-profile) [gone](c.md) [bad anchor](b.md#nope) "
        "[web](https://example.com/x) `[in code](d.md)`\n\n```\n[fenced](e.md)\n```\n"
    )
    assert broken_links(page) == ["c.md: no such file", "b.md#nope: no heading #nope in b.md"]


def test_slugs_follow_github():
    assert slug("`bench compare BASELINE CANDIDATE` and `bench ab`") == "bench-compare-baseline-candidate-and-bench-ab"
    assert slug("`bench report SWEEP_DIR [--recompute]`") == "bench-report-sweep_dir---recompute"
    assert slug("Benchmarks (not tests)") == "benchmarks-not-tests"


def test_the_docs_index_lists_every_page():
    index = (REPO / "docs" / "index.md").read_text()
    linked = {t.partition("#")[0] for t in LINK.findall(_prose(index))}
    pages = {p.name for p in (REPO / "docs").glob("*.md")} - {"index.md"}
    assert pages - linked == set()


def test_the_readme_is_short_and_keeps_the_quick_start_commands():
    text = (REPO / "README.md").read_text()
    assert len(text.encode()) < 8 * 1024
    # CI (.ci/run) runs the README's test command; the main job is the default sweep
    assert "    bash scripts/setup.sh && .venv/bin/python -m bench sweep\n" in text
    assert "    bash scripts/setup.sh && .venv/bin/python -m pytest -q\n" in text
    assert "bash scripts/setup.sh && .venv/bin/python -m pytest -q" in (REPO / ".ci" / "run").read_text()
