"""What share of a decode step the draft's MLA metadata build, the draft forward, the target forward and rejection
sampling take, from the committed nsys analysis files alone (no .sqlite, nothing recomputed from the capture):
the Kimi-rank captures beside this script and, by the same rule, the tiny model's in reports/examples/profile-h200.

A decode step is a `bench.engine.step` range that holds vLLM's own `execute_context_0(0)_generation_N(...)` range
(no prefill token in the batch, N > 0) and launched GPU work (a range that starts after the CUDA trace stopped has
none). Its parts are the bench ranges inside it on the same thread (nested ranges are inclusive: the metadata builds
are inside the draft forward, which is inside `bench.model.sample_tokens` with rejection sampling). Per step, each
part's CPU time over the step's CPU time and its GPU busy time (work it launched, whenever it ran) over the step's;
the tables give the median over decode steps (a few steps stall on the host, the median is not moved by them).
Run from the repository root:

    .venv/bin/python reports/examples/kimi-rank-h200/nsys/shares.py
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
TINY = HERE.parents[1] / "profile-h200"
CAPTURES = {  # label -> results folder of `bench profile`
    "Kimi rank, FLASHMLA/fp8 draft": HERE / "flashmla-fp8",
    "Kimi rank, TRITON_MLA/fp8 draft": HERE / "triton-mla-fp8",
    "tiny, FLASHMLA/auto draft": TINY / "flashmla",
    "tiny, TRITON_MLA/auto draft": TINY / "triton-mla",
}
PARTS = {  # range -> what it is
    "bench.draft.attn_metadata": "draft MLA metadata build (3 per step)",
    "bench.draft.propose": "draft forward (propose, incl. the metadata builds)",
    "bench.target.forward": "target forward",
    "bench.sample.rejection": "rejection sampling",
}
DECODE = re.compile(r"execute_context_0\(0\)_generation_([1-9]\d*)\(")


def analysis_dir(results: Path) -> Path:
    (found,) = (results / "profile").glob("capture-*.analysis")
    return found


def decode_steps(ranges: pd.DataFrame) -> pd.DataFrame:
    """One row per decode step: the step's CPU / GPU busy ns and, per part, the sums of the ranges inside it."""
    rows = []
    for _, thread in ranges.groupby("global_tid"):
        thread = thread.sort_values("start_ns")
        for step in thread[thread.name == "bench.engine.step"].itertuples():
            inside = thread[(thread.start_ns >= step.start_ns) & (thread.end_ns <= step.end_ns)]
            if not inside.name.str.match(DECODE).any() or step.gpu_busy_ns == 0:
                continue
            row = {"step_cpu": step.cpu_ns, "step_gpu": step.gpu_busy_ns}
            for part in PARTS:
                mine = inside[inside.name == part]
                row[f"{part}:n"] = len(mine)
                row[f"{part}:cpu"] = mine.cpu_ns.sum()
                row[f"{part}:gpu"] = mine.gpu_busy_ns.sum()
            rows.append(row)
    return pd.DataFrame(rows)


def shares_table(steps: pd.DataFrame) -> list[list[str]]:
    out = [
        [
            "decode step (`bench.engine.step`)",
            f"{np.median(steps.step_cpu) / 1e6:.3f}",
            "100%",
            f"{np.median(steps.step_gpu) / 1e6:.3f}",
            "100%",
        ]
    ]
    for part, what in PARTS.items():
        cpu, gpu = steps[f"{part}:cpu"], steps[f"{part}:gpu"]
        out.append(
            [
                f"{what} (`{part}`)",
                f"{np.median(cpu) / 1e6:.3f}",
                f"{np.median(cpu / steps.step_cpu):.1%}",
                f"{np.median(gpu) / 1e6:.3f}",
                f"{np.median(gpu / steps.step_gpu):.1%}",
            ]
        )
    return out


def summary_table(analysis: Path) -> list[list[str]]:
    """The bench.* rows of nsys_summary.csv as the analysis wrote them (ms, 3-4 decimals)."""
    s = pd.read_csv(analysis / "nsys_summary.csv")
    s = s[s.domain.eq("bench")].sort_values("cpu_ns_total", ascending=False)
    return [
        [
            r.name,
            str(r["count"]),
            f"{r.cpu_ns_p50 / 1e6:.3f}",
            f"{r.cpu_ns_mean / 1e6:.3f}",
            f"{r.gpu_busy_ns_p50 / 1e6:.4f}",
            f"{r.gpu_busy_ns_mean / 1e6:.4f}",
            f"{r.gpu_span_ns_mean / 1e6:.3f}",
            f"{r.kernels_mean:.1f}",
        ]
        for _, r in s.set_index("name").iterrows()
    ]


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def comparison_table(steps_by_capture: dict[str, pd.DataFrame]) -> str:
    """One row per part: its median share of the step, CPU / GPU busy, in every capture side by side."""
    rows = []
    for part, what in PARTS.items():
        cells = [
            f"{np.median(st[f'{part}:cpu'] / st.step_cpu):.1%} / {np.median(st[f'{part}:gpu'] / st.step_gpu):.1%}"
            for st in steps_by_capture.values()
        ]
        rows.append([what] + cells)
    step = [
        f"{np.median(st.step_cpu) / 1e6:.1f} / {np.median(st.step_gpu) / 1e6:.2f} ms"
        for st in steps_by_capture.values()
    ]
    rows.append(["decode step, CPU / GPU busy (median)"] + step)
    return table(["share of a decode step, CPU / GPU busy"] + list(steps_by_capture), rows)


def main() -> None:
    steps_by_capture = {}
    for label, results in CAPTURES.items():
        analysis = analysis_dir(results)
        ranges = pd.read_parquet(analysis / "nsys_ranges.parquet")
        steps = steps_by_capture[label] = decode_steps(ranges)
        all_steps = int((ranges.name == "bench.engine.step").sum())
        print(f"### {label} ({results.relative_to(HERE.parents[3])})\n")
        if not label.startswith("tiny"):
            head = ["range", "count", "CPU p50 ms", "CPU mean ms", "GPU busy p50 ms", "GPU busy mean ms"]
            print(table(head + ["GPU span mean ms", "kernels/range"], summary_table(analysis)) + "\n")
        print(f"{len(steps)} decode steps of {all_steps} engine steps; medians over the decode steps:\n")
        head = ["part", "CPU ms", "share of step CPU", "GPU busy ms", "share of step GPU busy"]
        print(table(head, shares_table(steps)) + "\n")
    print(comparison_table(steps_by_capture))


if __name__ == "__main__":
    main()
