"""A decode step by path (bench.profiling.step_paths), on synthetic captures written into a copy of the real nsys
export tests/data/nsys/h200-nvtx-matmul.sqlite (its schema, process and thread; its own ranges, API calls and kernels
removed): every category, nesting and precedence, a step with both attention paths, overlap counted once, the
host gap, and captures without the attention ranges or without decode steps (no table, a reason, never zeros).

The expected numbers are written out by hand from the layout below, not computed by the code under test."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pandas as pd
import pytest

from bench.profiling import step_paths as sp
from bench.profiling.nsys_analysis import analyze, analyze_file

MATMUL = Path(__file__).resolve().parents[1] / "data" / "nsys" / "h200-nvtx-matmul.sqlite"
TID, PID = 281535911562800, 281535911559168  # the fixture's thread and process (domain 1 = "bench" there)
DECODE = "execute_context_0(0)_generation_8(32)"
PREFILL = "execute_context_1(512)_generation_7(7)"


class Capture:
    """Writes ranges, and kernels with the API call that launched each, into a copy of the matmul export."""

    def __init__(self, path: Path):
        shutil.copy(MATMUL, path)
        self.path = path
        self.con = sqlite3.connect(path)
        self.con.execute("DELETE FROM NVTX_EVENTS WHERE eventType != 75")  # keep the domain registration
        self.con.execute("DELETE FROM CUPTI_ACTIVITY_KIND_RUNTIME")
        self.con.execute("DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL")
        self.corr = 10_000
        self.next_id = self.con.execute("SELECT MAX(id) FROM StringIds").fetchone()[0] + 1

    def range(self, name: str, start: int, end: int) -> None:
        domain = 1 if name.startswith("bench.") else 0
        self.con.execute(
            "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId) VALUES (?, ?, 59, ?, ?, ?)",
            (start, end, name, TID, domain),
        )

    def kernel(self, name: str, launch: int, gpu_start: int, gpu_end: int) -> None:
        self.corr += 1
        sid = self.next_id
        self.next_id += 1
        self.con.execute("INSERT INTO StringIds VALUES (?, ?)", (sid, name))
        self.con.execute(
            "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, 1, ?, ?, 28, 0, NULL)",
            (launch, launch + 1, TID, self.corr),
        )
        self.con.execute(
            "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, contextId, greenContextId, streamId, "
            "correlationId, globalPid, demangledName, shortName, mangledName, launchType, cacheConfig, "
            "registersPerThread, gridX, gridY, gridZ, blockX, blockY, blockZ, staticSharedMemory, "
            "dynamicSharedMemory, localMemoryPerThread, localMemoryTotal, gridId, sharedMemoryExecuted, "
            "sharedMemoryLimitConfig) VALUES (?, ?, 0, 1, 0, 7, ?, ?, ?, ?, ?, 1, 1, 32, 1, 1, 1, 128, 1, 1, 0, 0, "
            "0, 0, ?, 0, 0)",
            (gpu_start, gpu_end, self.corr, PID, sid, sid, sid, self.corr),
        )

    def close(self) -> Path:
        self.con.commit()
        self.con.close()
        return self.path


def decode_step_with_both_paths(c: Capture, attention: bool = True) -> None:
    """One decode step [1000, 100000] with both paths and the draft (ns; each kernel's category and busy time in its
    comment). Without `attention`, the same step with no bench.attn.* range."""
    r = c.range if attention else (lambda name, s, e: None if name.startswith("bench.attn.") else c.range(name, s, e))
    c.range("bench.engine.step", 1_000, 100_000)
    c.range(DECODE, 1_001, 1_002)
    c.range("bench.target.forward", 2_000, 60_000)
    r("bench.attn.layer", 3_000, 40_000)
    r("bench.attn.prefill", 4_000, 30_000)
    c.kernel("new_tokens_gemm", 4_100, 10_000, 10_100)  # prefill.other: 100
    r("bench.attn.prefill_attn", 4_200, 4_300)
    c.kernel("flash_fwd_kernel", 4_250, 10_100, 10_300)  # prefill.attention: 200
    r("bench.attn.prefill_context", 5_000, 25_000)
    c.kernel("gather_and_maybe_dequant_cache", 5_100, 10_300, 10_700)  # prefill.gather: 400
    c.range("bench.dcp.collective", 5_200, 5_300)
    c.kernel("CatArrayBatchedCopy", 5_250, 10_700, 10_800)  # collective: 100
    r("bench.attn.reorg_kvcache", 6_000, 20_000)
    c.kernel("elementwise_kernel", 6_100, 10_800, 10_850)  # prefill.reorg: 50
    c.kernel("sm90_xmma_gemm_bf16bf16_bf16f32", 21_000, 10_850, 11_850)  # prefill.up_proj: 1000 (by range)
    r("bench.attn.prefill_attn", 22_000, 22_100)
    c.kernel("flash_fwd_splitkv_kernel", 22_050, 11_850, 12_150)  # prefill.attention: 300
    c.kernel("merge_attn_states_kernel", 23_000, 12_150, 12_200)  # prefill.merge (name beats the range): 50
    c.kernel("merge_attn_states_kernel", 26_000, 12_200, 12_260)  # prefill.merge: 60
    r("bench.attn.decode", 31_000, 32_000)
    c.kernel("flash_fwd_splitkv_mla_kernel", 31_100, 12_300, 12_800)  # decode.kernel: 500
    c.kernel("flash_fwd_mla_combine_kernel", 31_200, 12_800, 12_900)  # decode.kernel: 100
    r("bench.attn.dcp_combine", 33_000, 34_000)
    c.range("bench.dcp.collective", 33_100, 33_200)
    c.kernel("CatArrayBatchedCopy", 33_150, 12_900, 12_950)  # collective: 50
    c.kernel("_correct_attn_cp_out_kernel", 33_500, 12_950, 13_000)  # decode.dcp_combine: 50
    c.kernel("bmm_W_UK_T", 35_000, 13_000, 13_200)  # attn.other: 200
    c.kernel("concat_and_cache_mla_kernel", 41_000, 13_200, 13_230)  # kv_write: 30
    c.kernel("fused_moe_kernel", 42_000, 13_300, 15_300)  # other
    c.kernel("fused_moe_kernel", 43_000, 14_300, 15_800)  # other, overlapping the last by 1000: union 2500
    c.range("bench.model.sample_tokens", 61_000, 90_000)
    c.range("bench.draft.propose", 62_000, 80_000)
    r("bench.attn.layer", 63_000, 64_000)  # the draft's own attention layer: draft, not the target's paths
    r("bench.attn.decode", 63_100, 63_900)
    c.kernel("flash_fwd_splitkv_mla_kernel", 63_200, 70_000, 70_400)  # draft: 400
    c.kernel("draft_gemm", 65_000, 70_400, 70_500)  # draft: 100


EXPECTED_NS = {
    "draft": 500,
    "collective": 150,
    "decode.kernel": 600,
    "decode.dcp_combine": 50,
    "prefill.gather": 400,
    "prefill.reorg": 50,
    "prefill.attention": 500,
    "prefill.merge": 110,
    "prefill.up_proj": 1_000,
    "prefill.other": 100,
    "attn.other": 200,
    "kv_write": 30,
    "other": 2_500,
}
# union: 10000-12260, 12300-13230, 13300-15800, 70000-70500
STEP_BUSY = 2_260 + 930 + 2_500 + 500


def other_steps(c: Capture) -> None:
    """A prefill step (not a decode step), and a decode step whose attention has no range (as in a FULL graph)."""
    c.range("bench.engine.step", 200_000, 300_000)
    c.range(PREFILL, 200_001, 200_002)
    c.kernel("gather_and_maybe_dequant_cache", 200_100, 200_100, 200_500)
    c.range("bench.engine.step", 400_000, 500_000)
    c.range(DECODE, 400_001, 400_002)
    c.kernel("flash_fwd_splitkv_mla_kernel", 400_100, 400_100, 400_700)
    c.kernel("fused_moe_kernel", 1_000_000, 1_000_000, 1_000_100)  # outside every step


@pytest.fixture
def capture(tmp_path) -> Path:
    c = Capture(tmp_path / "paths.sqlite")
    decode_step_with_both_paths(c)
    other_steps(c)
    return c.close()


def test_every_category_of_a_step_with_both_paths(capture):
    paths = analyze_file(capture).paths
    assert paths is not None and paths.why_none is None
    assert (paths.decode_steps, paths.without_attention) == (2, 1)  # the FULL-graph-like step is left out
    (step,) = paths.steps.to_dict("records")
    assert {k: step[f"{k}_ns"] for k in sp.KEYS} == EXPECTED_NS
    assert sum(EXPECTED_NS.values()) == STEP_BUSY  # no two categories overlap; "other" is a union (2000 + 1500 - 1000)
    assert (step["wall_ns"], step["gpu_busy_ns"], step["gpu_busy_in_step_ns"]) == (99_000, STEP_BUSY, STEP_BUSY)
    assert step["host_gap_ns"] == 99_000 - STEP_BUSY


def test_host_time_in_the_attention_ranges_per_step(capture):
    (step,) = analyze_file(capture).paths.steps.to_dict("records")
    assert step[f"cpu:{sp.t.ATTN_REORG}"] == 14_000 and step[f"n:{sp.t.ATTN_REORG}"] == 1
    assert step[f"n:{sp.t.ATTN_LAYER}"] == 2  # the target's and the draft's
    assert step[f"cpu:{sp.t.ATTN_LAYER}"] == 37_000 + 1_000
    assert step[f"cpu:{sp.t.DCP_COLLECTIVE}"] == 200 and step[f"cpu:{sp.t.DRAFT_PROPOSE}"] == 18_000


def test_gpu_work_running_past_the_step_counts_in_its_busy_time_not_in_its_window(tmp_path):
    c = Capture(tmp_path / "late.sqlite")
    decode_step_with_both_paths(c)
    c.kernel("fused_moe_kernel", 50_000, 99_500, 101_500)  # launched in the step, ends 1500 ns after it
    paths = analyze_file(c.close()).paths
    (step,) = paths.steps.to_dict("records")
    assert step["other_ns"] == 2_500 + 2_000
    assert (step["gpu_busy_ns"], step["gpu_busy_in_step_ns"]) == (STEP_BUSY + 2_000, STEP_BUSY + 500)
    assert step["host_gap_ns"] == 99_000 - STEP_BUSY - 500


def test_summary_groups_and_markdown(capture):
    paths = analyze_file(capture).paths
    table = paths.table.set_index("part")
    assert table.loc["decode path", "mean_ms"] == pytest.approx(650 / 1e6)
    assert table.loc["prefill-with-context path", "mean_ms"] == pytest.approx(2_160 / 1e6)
    assert table.loc["prefill.up_proj", "share"] == pytest.approx(1_000 / STEP_BUSY)
    assert table.loc["step.host_gap", "median_ms"] == pytest.approx((99_000 - STEP_BUSY) / 1e6)
    md = sp.paths_markdown(paths, "DCP 2")
    assert md.startswith("### DCP 2\n\n1 of 2 decode steps (1 without attention ranges left out)")
    assert "| `prefill.up_proj` |" in md and "| **decode path** |" in md and "`bench.attn.reorg_kvcache`" in md


def test_without_the_attention_ranges_the_split_is_unavailable_not_zero(tmp_path):
    c = Capture(tmp_path / "plain.sqlite")
    decode_step_with_both_paths(c, attention=False)
    out = analyze(c.close(), tmp_path / "out", plot=False)
    assert out["headline"]["decode_steps"] == 1  # the step shares still work
    assert out["headline"]["step_paths"] is None
    why = out["headline"]["step_paths_missing"]
    assert "by-path split is unavailable" in why and "BENCH_NVTX_ATTENTION=1" in why and "1 decode steps" in why
    assert "step_paths_csv" not in out["paths"]
    assert (tmp_path / "out" / "nsys_step_paths.md").read_text() == f"No by-path split: {why}.\n"


def test_without_decode_steps_it_says_why(tmp_path):
    c = Capture(tmp_path / "prefill.sqlite")
    decode_step_with_both_paths(c)
    c.con.execute("UPDATE NVTX_EVENTS SET text = ? WHERE text = ?", (PREFILL, DECODE))
    paths = analyze_file(c.close()).paths
    assert paths.table is None and paths.steps is None
    assert paths.why_none == "no decode steps: every engine step held prefill tokens"


def test_profile_analyze_writes_the_table_and_the_headline(capture, tmp_path, capsys):
    from bench.cli import main

    assert main(["profile", "analyze", str(capture), "--out", str(tmp_path / "a"), "--no-plot"]) == 0
    folder = tmp_path / "a"
    steps = pd.read_csv(folder / "nsys_step_paths.csv")
    assert len(steps) == 1 and steps.loc[0, "prefill.gather_ns"] == 400
    assert "| `decode.kernel` |" in (folder / "nsys_step_paths.md").read_text()
    meta = json.loads((folder / "nsys_meta.json").read_text())
    assert "warnings" in meta
    assert "step_paths_md" in capsys.readouterr().out


def test_profile_shares_adds_the_split_of_each_capture_and_compares_them(capture, tmp_path, capsys):
    from bench.cli import main

    late = Capture(tmp_path / "late.sqlite")
    decode_step_with_both_paths(late)
    late.kernel("fused_moe_kernel", 50_000, 99_500, 101_500)
    plain = Capture(tmp_path / "plain.sqlite")
    decode_step_with_both_paths(plain, attention=False)
    folders = []
    for name, export in (("a", capture), ("b", late.close()), ("c", plain.close())):
        analyze(export, tmp_path / name, plot=False)
        folders.append(str(tmp_path / name))
    (tmp_path / "old").mkdir()  # an analysis from before the split: its meta has no step_paths
    for f in ("nsys_ranges.parquet", "nsys_meta.json"):
        (tmp_path / "old" / f).write_bytes((tmp_path / "c" / f).read_bytes())
    meta = json.loads((tmp_path / "old" / "nsys_meta.json").read_text())
    del meta["step_paths"]
    (tmp_path / "old" / "nsys_meta.json").write_text(json.dumps(meta))
    assert main(["profile", "shares", *folders, str(tmp_path / "old"), "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    by_path = out[out.index("## Decode step by path") :]
    assert by_path.count("1 of 2 decode steps") == 1 and by_path.count("1 of 1 decode steps") == 1
    assert f"### {folders[2]}\n\nNo by-path split: no bench.attn.* range" in by_path
    assert str(tmp_path / "old") not in by_path
    assert f"| mean ms per decode step | {folders[0]} | {folders[1]} |" in by_path
    assert "| `other` | 0.00 | 0.00 |" in by_path  # 2.5 and 4.5 us
    assert "| `step.gpu_busy` | 0.01 | 0.01 |" in by_path
    assert (tmp_path / "step-shares.md").read_text() == out
