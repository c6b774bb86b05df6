"""Decode-step shares (bench.profiling.step_shares): which engine steps are decode steps, which ranges belong to
which step, the medians, why a capture has none, and `bench profile shares` on analysis folders."""

from __future__ import annotations

import pandas as pd
import pytest

from bench.cli import main
from bench.profiling import step_shares as ss

DECODE = "execute_context_0(0)_generation_8(8)"
PREFILL = "execute_context_1(512)_generation_7(7)"


def _r(tid, name, start, end, cpu=None, gpu=0):
    return {"global_tid": tid, "name": name, "start_ns": start, "end_ns": end, "cpu_ns": cpu or end - start,
            "gpu_busy_ns": gpu, "domain": "bench" if name.startswith("bench.") else "vllm"}  # fmt: skip


def _step(tid, t0, cpu, gpu, marker, parts):
    """An engine step at t0 (ns) holding vLLM's marker and the parts [(name, cpu, gpu)], laid out in order."""
    rows = [_r(tid, ss.STEP, t0, t0 + cpu, cpu, gpu), _r(tid, marker, t0 + 1, t0 + 2)]
    t = t0 + 10
    for name, pcpu, pgpu in parts:
        rows.append(_r(tid, name, t, t + pcpu, pcpu, pgpu))
        t += pcpu + 1
    return rows


PARTS = [("bench.draft.attn_metadata", 100, 0)] * 3 + [
    ("bench.draft.propose", 2_000, 300),
    ("bench.target.forward", 3_000, 6_000),
    ("bench.sample.rejection", 500, 100),
]


def ranges() -> pd.DataFrame:
    rows = [_r(1, "bench.draft.propose", 0, 50, 50, 10)]  # before any step: belongs to none
    rows += _step(1, 1_000, 10_000, 8_000, PREFILL, PARTS)  # prefill in the batch: not a decode step
    rows += _step(1, 20_000, 10_000, 8_000, DECODE, PARTS)
    rows += _step(1, 40_000, 20_000, 8_000, DECODE, [(n, 2 * c, g) for n, c, g in PARTS])
    rows += _step(1, 70_000, 10_000, 0, DECODE, PARTS)  # after the CUDA trace stopped: no GPU work
    rows += _step(2, 25_000, 7_000, 4_000, DECODE, PARTS[3:])  # another thread, no metadata build
    return pd.DataFrame(rows)


def test_decode_steps_keep_decode_batches_with_gpu_work_and_sum_their_parts():
    steps = ss.decode_steps(ranges())
    assert len(steps) == 3  # not the prefill step, not the one without GPU work
    assert steps["step_cpu"].tolist() == [10_000, 20_000, 7_000]
    assert steps["bench.draft.attn_metadata:n"].tolist() == [3, 3, 0]
    assert steps["bench.draft.attn_metadata:cpu"].tolist() == [300, 600, 0]
    assert steps["bench.draft.propose:cpu"].tolist() == [2_000, 4_000, 2_000]  # the stray range is in no step
    assert steps["bench.target.forward:gpu"].tolist() == [6_000, 6_000, 6_000]


def test_shares_are_medians_over_decode_steps():
    table = ss.shares(ss.decode_steps(ranges())).set_index("part")
    assert table.loc[ss.STEP, "cpu_ms"] == pytest.approx(0.010)  # median of 10, 20, 7 us
    meta = table.loc["bench.draft.attn_metadata"]
    assert meta["per_step"] == 3 and meta["cpu_share"] == pytest.approx(0.03)  # 300/10k, 600/20k, 0/7k
    fwd = table.loc["bench.target.forward"]
    assert fwd["gpu_share"] == pytest.approx(0.75) and fwd["gpu_busy_ms"] == pytest.approx(0.006)
    assert table.loc["bench.draft.propose", "cpu_share"] == pytest.approx(0.2)  # 0.2, 0.2, 0.29


@pytest.mark.parametrize(
    ("drop", "why"),
    [
        (lambda r: r[r.name != ss.STEP], "no bench.engine.step range"),
        (lambda r: r[~r.name.str.startswith("execute_context")], "no vLLM execute_context range"),
        (lambda r: r[r.name != DECODE], "every engine step held prefill tokens"),
        (lambda r: r.assign(gpu_busy_ns=0), "no decode step launched GPU work"),
    ],
)
def test_a_capture_without_decode_steps_says_why(drop, why):
    r = drop(ranges())
    assert ss.decode_steps(r).empty
    assert why in ss.why_no_steps(r)


def test_profile_shares_prints_each_capture_and_the_comparison(tmp_path, capsys):
    a, b, c = tmp_path / "a", tmp_path / "run" / "profile" / "capture-e1.analysis", tmp_path / "none"
    for folder, df in ((a, ranges()), (b, ranges()), (c, ranges().query("name != @ss.STEP"))):
        folder.mkdir(parents=True)
        df.to_parquet(folder / "nsys_ranges.parquet")
    assert main(["profile", "shares", str(a), str(tmp_path / "run"), str(c), "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.count("3 decode steps of 5 engine steps") == 2 and "No decode steps: no bench.engine.step" in out
    assert "| draft MLA metadata build | 3.0% / 0.0% | 3.0% / 0.0% |" in out  # side by side, c left out
    assert (tmp_path / "step-shares.md").read_text() == out
    assert main(["profile", "shares", str(tmp_path / "nothing")]) == 1
    assert "no nsys_ranges.parquet" in capsys.readouterr().err
