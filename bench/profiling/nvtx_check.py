"""The plugin's NVTX guard: get the `bench` domain, or say loudly why the ranges would be lost.

With no tool attached nvtx's domain is a no-op `DummyDomain` and the wrappers skip NVTX. When a tool IS attached
(NSYS_PROFILING_SESSION_ID / NVTX_INJECTION64_PATH set) but the domain is still a DummyDomain (nvtx >= 0.2.12
under nsys < 2024: `nvtxDomainIsEnabled` unsupported; docs/facts.md "Nsight Systems") or nvtx is not installed,
the ranges would silently be missing from the capture: that is returned as a problem, which the plugin logs as
an ERROR.

Runs inside vLLM's processes: standard library only (nvtx when installed).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

TOOL_ENV = ("NSYS_PROFILING_SESSION_ID", "NVTX_INJECTION64_PATH", "NVTX_INJECTION32_PATH")


def nvtx_domain(domain_name: str, env: Mapping[str, str] | None = None) -> tuple[Any, str | None]:
    """(domain or None, problem or None). The domain is None when NVTX would do nothing here: nvtx absent,
    or no tool attached. The problem is an error message when a tool is attached but ranges would be lost."""
    env = os.environ if env is None else env
    tool = next((k for k in TOOL_ENV if env.get(k)), None)
    try:
        import nvtx
    except ImportError:
        if tool:
            return None, (
                f"an NVTX tool is attached ({tool} is set) but the Python package 'nvtx' is not "
                f"installed in this environment: the bench.* NVTX ranges will be MISSING from the "
                f"profile. Install it: pip install 'nvtx>=0.2.13' (extra 'profile' of the suite)."
            )
        return None, None
    domain = nvtx.get_domain(domain_name)
    return check_domain(domain, nvtx, tool)


def check_domain(domain: Any, nvtx_mod: Any, tool: str | None) -> tuple[Any, str | None]:
    """The dummy-domain guard: a DummyDomain is right with no tool and wrong with one."""
    dummy_cls = getattr(getattr(nvtx_mod, "_lib", None), "DummyDomain", None)
    is_dummy = dummy_cls is not None and isinstance(domain, dummy_cls)
    if not is_dummy:
        return domain, None
    if tool:
        version = getattr(nvtx_mod, "__version__", None) or dist_version("nvtx") or "?"
        return None, (
            f"an NVTX tool is attached ({tool} is set) but nvtx {version} returned a no-op "
            f"DummyDomain for domain 'bench': the bench.* NVTX ranges will be MISSING from the "
            f"profile. This happens with nvtx >= 0.2.12 under Nsight Systems older than 2024 (no "
            f"nvtxDomainIsEnabled). Use a newer nsys (2025.3 works) or pip install 'nvtx<0.2.12'."
        )
    return None, None


def dist_version(name: str) -> str | None:
    """The installed version of a distribution, or None (never raises: this runs inside vLLM)."""
    try:
        from importlib.metadata import version

        return version(name)
    except Exception:
        return None
