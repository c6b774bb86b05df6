"""benchmarks/run_telemetry.py: each cross-check run joined with the GPU's and the host's once-a-second telemetry,
on lines in the formats scripts/gpu/issue18-steady.sh writes (the GPU line as nvidia-smi printed it in
reports/examples/kimi-rank-h100-crosscheck/gpu-telemetry.csv)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from tests.helpers.benchmark_module import load_benchmark

T0 = datetime(2026, 12, 6, 19, 30, tzinfo=UTC).timestamp()


@pytest.fixture(scope="module")
def rt():
    return load_benchmark("run_telemetry")


def _gpu_line(t: float, util: int, power: float, throttle: str = "0x0000000000000000") -> str:
    stamp = datetime.fromtimestamp(t, UTC).strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]
    return f"{stamp}, 40000 MiB, {util} %, 1980 MHz, 2619 MHz, {power} W, 50, {throttle}"


def _write(tmp_path, steal_in_second_run: int):
    """Two runs of 10 s, 10 s apart: the GPU busier and hotter in the first; the host's steal only in the second."""
    cc = tmp_path / "crosscheck-call-1"
    cc.mkdir()
    run = lambda start, tok, step: {  # noqa: E731
        "output_tok_s": tok,
        "step_p50_ms": step,
        "started_unix": T0 + start,
        "ended_unix": T0 + start + 10,
    }
    data = {
        "rounds": [{"round": 1, "order": ["bench", "vllm"], "bench": run(0, 1300, 7.7), "vllm": run(20, 1060, 10.1)}]
    }
    (cc / "crosscheck.json").write_text(json.dumps(data))
    gpu = [_gpu_line(T0 + s, 90 if s <= 10 else 60, 500.0 if s <= 10 else 400.0) for s in range(0, 31)]
    gpu[25] = _gpu_line(T0 + 25, 60, 400.0, "0x0000000000000004")
    (tmp_path / "gpu-telemetry.csv").write_text("\n".join(gpu) + "\n")
    host, jiffies = [], [0] * 8
    for s in range(0, 31):
        # 16 CPUs at 100 jiffies/s: 1600 a second; 400 busy (user), the rest idle, or some of it stolen
        steal = steal_in_second_run if s > 20 else 0
        jiffies = [jiffies[0] + 400, 0, 0, jiffies[3] + 1200 - steal, 0, 0, 0, jiffies[7] + steal]
        host.append(f"{T0 + s:.3f},{' '.join(map(str, jiffies))} 0 0,{2600 if s <= 10 else 2000}")
    (tmp_path / "host-telemetry.csv").write_text("\n".join(host) + "\n")
    return cc


def test_each_run_gets_the_telemetry_of_its_own_span(rt, tmp_path, capsys):
    cc = _write(tmp_path, steal_in_second_run=320)
    data = json.loads((cc / "crosscheck.json").read_text())
    rows = rt.table(data, rt.read_gpu(tmp_path / "gpu-telemetry.csv"), rt.read_host(tmp_path / "host-telemetry.csv"))
    first, second = rows
    assert (first["client"], second["client"]) == ("bench", "vllm")
    assert (
        first["gpu samples"] == 11 and first["util %"] == 90 and first["power W"] == 500 and first["throttle"] == "none"
    )
    assert second["util %"] == 60 and second["throttle"] == "0x0000000000000004"
    assert first["busy %"] == pytest.approx(25) and first["steal %"] == 0 and first["CPU MHz"] == 2600
    assert second["steal %"] == pytest.approx(20) and second["busy %"] == pytest.approx(25)
    assert rt.main([str(cc)]) == 0
    out = capsys.readouterr().out
    assert "| 1 | vllm | 1060 | 10.10 | 60.0 | 1980 | 2619 | 400.0 | 50.0 | 0x0000000000000004 | 25.0 | 20.00 |" in out
    assert "too few runs (4 needed)" in out


def test_correlations_need_four_runs_and_a_moving_column(rt):
    rows = [{"step p50 ms": s, "steal %": st, "util %": 90.0} for s, st in ((7.7, 0), (7.9, 1), (10.1, 20), (10.0, 18))]
    corr = rt.correlations(rows)
    assert corr["steal %"] > 0.99 and corr["util %"] is None and corr["CPU MHz"] is None


def test_a_crosscheck_without_wall_times_is_refused(rt, tmp_path):
    cc = tmp_path / "old"
    cc.mkdir()
    (cc / "crosscheck.json").write_text(json.dumps({"rounds": [{"round": 1, "order": ["bench"], "bench": {}}]}))
    (tmp_path / "host-telemetry.csv").write_text("")
    (tmp_path / "gpu-telemetry.csv").write_text(_gpu_line(T0, 0, 70.0) + "\n")
    with pytest.raises(SystemExit, match="no started_unix"):
        rt.main([str(cc)])
