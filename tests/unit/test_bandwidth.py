"""bench.engine.bandwidth without a GPU: measure() gives None without torch or CUDA, the cache is per machine key and
keeps only real measurements, the child process's failures become reasons, and a sweep's manifest records the
ceiling on a GPU machine only, never failing because of it. No timing is asserted."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bench.config.plan import make_plan
from bench.config.profile import load_profile
from bench.core.hardware import Machine
from bench.engine import bandwidth as B
from bench.results.store import SweepStore
from tests.helpers.extras import ENGINE, need

H200 = Machine("gpu", 1, "sm90", "NVIDIA H200", 139.8, "570.86.15")


def fake_result(bw: float = 4.1e12) -> dict:
    return {"bytes_per_s": bw, "median_bytes_per_s": bw * 0.99, "method": B.METHOD, "repeats": 10}


class Counting:
    """A stand-in for the measuring function: returns `results` in turn and counts its calls."""

    def __init__(self, *results):
        self.results, self.calls = list(results), 0

    def __call__(self):
        self.calls += 1
        return self.results.pop(0)


# --- measure -------------------------------------------------------------------------------------------------


def test_measure_is_none_when_cuda_is_not_available(monkeypatch):
    torch = need("torch", ENGINE)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert B.measure() is None


def test_measure_is_none_without_torch(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    assert B.measure() is None


def test_measure_refuses_sizes_it_cannot_time():
    with pytest.raises(ValueError, match="positive"):
        B.measure(size_bytes=0)
    with pytest.raises(ValueError, match="positive"):
        B.measure(repeats=0)


def test_main_prints_json_and_exits_nonzero_without_a_measurement(monkeypatch, capsys):
    monkeypatch.setattr(B, "measure", lambda *a, **k: None)
    assert B.main([]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["bytes_per_s"] is None and "no CUDA device" in out["reason"]
    monkeypatch.setattr(B, "measure", lambda *a, **k: fake_result())
    assert B.main(["--size-gib", "1"]) == 0
    assert json.loads(capsys.readouterr().out)["bytes_per_s"] == 4.1e12

    def boom(*a, **k):
        raise RuntimeError("CUDA out of memory")

    monkeypatch.setattr(B, "measure", boom)
    assert B.main([]) == 1
    assert json.loads(capsys.readouterr().out)["reason"] == "RuntimeError: CUDA out of memory"


def test_the_child_process_reports_why_it_measured_nothing(monkeypatch):
    """The real `python -m bench.engine.bandwidth` child with no GPU visible: a reason, not an exception."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    result = B.measure_in_child(timeout_s=120)
    assert result["bytes_per_s"] is None and result["reason"]


def test_child_failures_become_reasons(monkeypatch):
    def timeout(*a, **k):
        raise subprocess.TimeoutExpired(a[0], 5)

    monkeypatch.setattr(B.subprocess, "run", timeout)
    assert B.measure_in_child(5) == {
        "bytes_per_s": None,
        "reason": "python -m bench.engine.bandwidth did not finish in 5 s",
    }
    crashed = subprocess.CompletedProcess([], -11, stdout="", stderr="Traceback...\nSegmentation fault\n")
    monkeypatch.setattr(B.subprocess, "run", lambda *a, **k: crashed)
    assert B.measure_in_child()["reason"] == "python -m bench.engine.bandwidth exited -11: Segmentation fault"


# --- cache ---------------------------------------------------------------------------------------------------


def test_cached_measure_measures_once_per_machine_key(tmp_path, monkeypatch):
    fake = Counting(fake_result(4.1e12), fake_result(3.0e12))
    monkeypatch.setattr(B, "measure_in_child", fake)  # the default measuring function
    first = B.cached_measure(tmp_path, "NVIDIA H200 | driver 570")
    assert first["bytes_per_s"] == 4.1e12 and first["source"].startswith("measured now") and fake.calls == 1
    again = B.cached_measure(tmp_path, "NVIDIA H200 | driver 570")
    assert again["bytes_per_s"] == 4.1e12 and again["source"].startswith("cached in") and fake.calls == 1
    other = B.cached_measure(tmp_path, "NVIDIA H100 | driver 570")
    assert other["bytes_per_s"] == 3.0e12 and fake.calls == 2
    stored = json.loads((tmp_path / B.CACHE_FILE).read_text())
    assert {k: v["bytes_per_s"] for k, v in stored.items()} == {
        "NVIDIA H200 | driver 570": 4.1e12,
        "NVIDIA H100 | driver 570": 3.0e12,
    }
    assert "source" not in stored["NVIDIA H200 | driver 570"]


def test_cached_measure_keeps_only_real_measurements(tmp_path):
    fake = Counting(None, B.not_measured("CUDA error"), fake_result())
    assert B.cached_measure(tmp_path, "k", fake) is None
    assert B.cached_measure(tmp_path, "k", fake) == {"bytes_per_s": None, "reason": "CUDA error"}
    assert not (tmp_path / B.CACHE_FILE).exists()
    assert B.cached_measure(tmp_path, "k", fake)["bytes_per_s"] == 4.1e12 and fake.calls == 3
    assert B.cached_measure(tmp_path, "k", fake)["source"].startswith("cached") and fake.calls == 3


def test_an_entry_of_another_method_or_an_unreadable_cache_is_measured_again(tmp_path):
    path = tmp_path / B.CACHE_FILE
    path.write_text(json.dumps({"k": {**fake_result(1.0e12), "method": "an older method"}}))
    fake = Counting(fake_result(4.1e12), fake_result(4.2e12))
    assert B.cached_measure(tmp_path, "k", fake)["bytes_per_s"] == 4.1e12 and fake.calls == 1
    path.write_text("{not json")
    assert B.cached_measure(tmp_path, "k", fake)["bytes_per_s"] == 4.2e12 and fake.calls == 2
    assert json.loads(path.read_text())["k"]["bytes_per_s"] == 4.2e12


def test_default_cache_dir(monkeypatch, tmp_path):
    from bench.core.files import default_cache_dir

    monkeypatch.delenv("BENCH_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg" / "bench"
    monkeypatch.setenv("BENCH_CACHE_DIR", str(tmp_path / "mine"))
    assert default_cache_dir() == tmp_path / "mine"
    assert B.machine_key(H200) == "NVIDIA H200 | driver 570.86.15"


# --- the manifest --------------------------------------------------------------------------------------------


def test_manifest_entry_runs_on_a_gpu_only_and_never_raises(tmp_path, monkeypatch):
    fake = Counting(fake_result())
    monkeypatch.setattr(B, "measure_in_child", fake)
    assert B.manifest_entry(Machine("cpu"), cache_dir=tmp_path) is None and fake.calls == 0
    cluster = B.manifest_entry(H200, on_cluster=True, cache_dir=tmp_path)
    assert cluster["bytes_per_s"] is None and "Ray" in cluster["reason"] and fake.calls == 0
    planned = B.manifest_entry(Machine("gpu", 1, "sm90"), cache_dir=tmp_path)
    assert planned["bytes_per_s"] is None and "no GPU detected" in planned["reason"] and fake.calls == 0
    assert B.manifest_entry(H200, cache_dir=tmp_path)["bytes_per_s"] == 4.1e12 and fake.calls == 1

    def boom():
        raise RuntimeError("driver mismatch")

    monkeypatch.setattr(B, "measure_in_child", boom)
    other = Machine("gpu", 1, "sm90", "NVIDIA H100", 80.0, "1")
    assert B.manifest_entry(other, cache_dir=tmp_path) == {
        "bytes_per_s": None,
        "reason": "RuntimeError: driver mismatch",
    }
    monkeypatch.setattr(B, "measure_in_child", lambda: None)
    assert "no CUDA device" in B.manifest_entry(other, cache_dir=tmp_path)["reason"]


@pytest.fixture
def sweep_module(monkeypatch, tmp_path):
    """bench.commands.sweep with a bare environment (no vLLM or git lookups) and the cache in tmp_path/cache."""
    from bench.commands import sweep

    monkeypatch.setattr(sweep, "collect_environment", lambda machine: {"machine": machine.to_dict()})
    monkeypatch.setenv("BENCH_CACHE_DIR", str(tmp_path / "cache"))
    return sweep


def _manifest(sweep, root, machine: Machine, **options) -> dict:
    plan = make_plan(load_profile("tiny", machine.platform), machine)
    store = SweepStore(root)
    sweep._write_manifest(store, plan, sweep.SweepOptions(**options), resumed=False)
    return store.manifest()


def test_the_sweep_records_the_ceiling_in_its_manifest_on_a_gpu(sweep_module, tmp_path, monkeypatch):
    fake = Counting(fake_result(), fake_result())
    monkeypatch.setattr(B, "measure_in_child", fake)
    assert "bandwidth" not in _manifest(sweep_module, tmp_path / "cpu", Machine("cpu"))["environment"]
    assert fake.calls == 0
    env = _manifest(sweep_module, tmp_path / "gpu", H200)["environment"]
    assert env["bandwidth"]["bytes_per_s"] == 4.1e12 and fake.calls == 1
    assert (tmp_path / "cache" / B.CACHE_FILE).is_file()
    ray = _manifest(sweep_module, tmp_path / "ray", H200, ray="auto")["environment"]
    assert ray["bandwidth"]["bytes_per_s"] is None and fake.calls == 1


def test_a_failed_measurement_is_recorded_with_its_reason(sweep_module, tmp_path, monkeypatch):
    monkeypatch.setattr(B, "measure_in_child", lambda: B.not_measured("python -m bench.engine.bandwidth exited 1: OOM"))
    env = _manifest(sweep_module, tmp_path, H200)["environment"]
    assert env["bandwidth"] == {"bytes_per_s": None, "reason": "python -m bench.engine.bandwidth exited 1: OOM"}
