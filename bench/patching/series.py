"""Patch series: one folder per supported vLLM line under patches/, described by series.toml."""

from __future__ import annotations

import fnmatch
import tomllib
from dataclasses import dataclass
from pathlib import Path

from bench.core.errors import BenchError
from bench.patching.locate import VllmInstall
from bench.patching.unidiff import FileDiff, parse_patch

PATCHES_DIR = Path(__file__).resolve().parents[2] / "patches"


@dataclass(frozen=True)
class FileHashes:
    path: str
    before: str
    after: str


@dataclass(frozen=True)
class Fix:
    id: str
    summary: str
    patch: Path
    files: tuple[FileHashes, ...]

    def diffs(self) -> list[FileDiff]:
        return parse_patch(self.patch.read_text(), self.patch.name)


@dataclass(frozen=True)
class Series:
    name: str
    folder: Path
    vllm_versions: tuple[str, ...]  # globs on the release, e.g. "0.26.*"
    distributions: tuple[str, ...]
    fixes: tuple[Fix, ...]
    upstream: tuple[str, ...]  # fix ids already in this vLLM line's own code
    # fix id -> why this line needs no patch for it (the code it fixes cannot run there)
    not_applicable: tuple[tuple[str, str], ...] = ()

    def not_applicable_reason(self, fix_id: str) -> str | None:
        return dict(self.not_applicable).get(fix_id)

    def supports(self, install: VllmInstall) -> bool:
        return install.distribution in self.distributions and any(
            fnmatch.fnmatch(install.release, glob) for glob in self.vllm_versions
        )

    def label(self) -> str:
        return f"{'/'.join(self.vllm_versions)} ({', '.join(self.distributions)})"


def load_series(folder: Path) -> Series:
    manifest = folder / "series.toml"
    try:
        data = tomllib.loads(manifest.read_text())
        fixes = tuple(
            Fix(
                id=f["id"],
                summary=f["summary"],
                patch=folder / f["patch"],
                files=tuple(FileHashes(x["path"], x["before"], x["after"]) for x in f.get("files", [])),
            )
            for f in data.get("fix", [])
        )
        return Series(
            name=data["series"],
            folder=folder,
            vllm_versions=tuple(data["vllm_versions"]),
            distributions=tuple(data["distributions"]),
            fixes=fixes,
            upstream=tuple(data.get("upstream", [])),
            not_applicable=tuple((str(k), str(v)) for k, v in data.get("not_applicable", {}).items()),
        )
    except (OSError, KeyError, TypeError, AttributeError, tomllib.TOMLDecodeError) as exc:
        raise BenchError(f"{manifest}: unreadable series manifest ({exc!r})") from exc


def all_series(patches_dir: Path = PATCHES_DIR) -> list[Series]:
    return [load_series(p.parent) for p in sorted(patches_dir.glob("*/series.toml"))]


def select_series(install: VllmInstall, name: str | None = None, patches_dir: Path = PATCHES_DIR) -> Series:
    """The series named `name`, or the one that supports `install`; a clear error otherwise."""
    known = all_series(patches_dir)
    if name is not None:
        for series in known:
            if series.name == name:
                return series
        raise BenchError(f"unknown patch series {name!r}; known: {', '.join(s.name for s in known)}")
    for series in known:
        if series.supports(install):
            return series
    raise BenchError(unsupported_message(install, known))


def unsupported_message(install: VllmInstall, known: list[Series]) -> str:
    supported = "; ".join(f"{s.name}: {s.label()}" for s in known)
    return f"vLLM {install.version} ({install.distribution}) at {install.root} is not supported; supported: {supported}"
