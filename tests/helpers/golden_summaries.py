"""The golden summary.md files of tests/unit/test_report.py: each small results directory of tests/data/results and
the summary.md the report makes of it. After a deliberate change of the report's wording or layout, rewrite them
with `python -m tests.helpers.golden_summaries` and review the diff (reports/examples: `bench report --check`)."""

from __future__ import annotations

from pathlib import Path

from bench.report.build import summary_text

DATA = Path(__file__).resolve().parents[1] / "data"
GOLDEN = DATA / "golden" / "summary"
# golden name -> results directory under tests/data/results: random-id shapes with ok and failed points on an
# H200; text workloads with acceptance per category on CPU; one Kimi K2.6 rank with DCP and its effective configs.
RESULTS = {
    "tiny-gpu-h200": "tiny-gpu-h200",
    "tiny-text-cpu": "tiny-text-cpu",
    "kimi-rank-dcp-h200": "kimi-rank-dcp-h200/sweep",
}


def golden_path(name: str) -> Path:
    return GOLDEN / f"{name}.md"


def rebuild(name: str) -> str:
    return summary_text(DATA / "results" / RESULTS[name])


if __name__ == "__main__":
    for name in RESULTS:
        golden_path(name).write_text(rebuild(name))
        print(golden_path(name))
