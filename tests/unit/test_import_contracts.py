"""Every module of bench is in a layer contract: each child of bench (a package or a root module) is named by one
layer of the stage contract in pyproject's [tool.importlinter], so lint-imports checks what each may import."""

from __future__ import annotations

import pkgutil
import tomllib
from pathlib import Path

import bench

REPO = Path(__file__).resolve().parents[2]


def stage_layers() -> list[str]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = [c for c in config["contracts"] if c["type"] == "layers" and c.get("containers") == ["bench"]]
    return [name.strip() for layer in contract["layers"] for name in layer.replace(":", "|").split("|")]


def children() -> set[str]:
    return {m.name for m in pkgutil.iter_modules(bench.__path__)}


def test_every_child_of_bench_is_a_layer():
    layers = stage_layers()
    assert len(layers) == len(set(layers)), "a child named in two layers"
    missing = children() - set(layers)
    assert not missing, f"in no layer of the stage contract (pyproject [tool.importlinter]): {sorted(missing)}"
    assert set(layers) <= children(), f"layers that name no module: {sorted(set(layers) - children())}"


def test_only_the_cli_stays_in_the_root():
    # docs/architecture.md justifies each root module; everything else lives in a package by stage
    root = {m.name for m in pkgutil.iter_modules(bench.__path__) if not m.ispkg}
    assert root == {"__main__", "cli", "cli_parser"}
