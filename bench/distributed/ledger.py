"""The cluster ledger of a results directory (`cluster.json`, written by bench.distributed.driver): which node ran
each engine configuration, with which interpreter, every attempt of every run (a `--resume` is a run). Read here
for `sweep --ray-same-nodes` and for the node table of `ab --ray`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.core.errors import BenchError

LEDGER = "cluster.json"


def read_ledger(path: Path) -> dict[str, Any]:
    try:
        ledger = json.loads(path.read_text())
    except FileNotFoundError:
        return {"runs": []}
    except ValueError as exc:
        raise BenchError(f"{path} is not readable JSON ({exc}); move it away to start a new ledger") from None
    return ledger if isinstance(ledger.get("runs"), list) else {"runs": []}


def engine_node_sets(root: Path) -> dict[str, list[dict[str, str]]]:
    """engine id -> every node that recorded some of its points ({node_id, node, kind, python}), in the order they
    did (a node-lost retry or a resume can put one engine's points on two nodes); engines that never recorded a
    point (lost, skipped) are absent."""
    found: dict[str, list[dict[str, str]]] = {}
    for run in read_ledger(Path(root) / LEDGER)["runs"]:
        kinds = {n.get("node_id"): n.get("kind", "") for n in run.get("nodes", [])}
        for attempt in run.get("attempts", []):
            if attempt.get("points_recorded") and attempt.get("node_id"):
                node = {
                    "node_id": attempt["node_id"],
                    "node": attempt.get("node", "?"),
                    "kind": kinds.get(attempt["node_id"], ""),
                    "python": attempt.get("python", ""),
                }
                nodes = found.setdefault(attempt["engine_id"], [])
                nodes[:] = [n for n in nodes if n["node_id"] != node["node_id"]] + [node]
    return found


def engine_nodes(root: Path) -> dict[str, dict[str, str]]:
    """engine id -> the node that recorded its points last (`engine_node_sets`' last)."""
    return {engine: nodes[-1] for engine, nodes in engine_node_sets(root).items()}


def same_nodes_as(root: Path) -> dict[str, str]:
    """`sweep --ray-same-nodes DIR`: engine id -> the node id that ran it in DIR."""
    if not (Path(root) / LEDGER).exists():
        raise BenchError(f"--ray-same-nodes {root}: no {LEDGER} there (not a sweep run with --ray)")
    return {engine: node["node_id"] for engine, node in engine_nodes(root).items()}


def foreign_pythons(root: Path) -> list[str]:
    """Attempts whose node ran another interpreter than the driver's (the node lacks the driver's path): for an
    A/B side that means the other environment's vLLM, or the nodes' default one, ran instead of the side's."""
    out = []
    for run in read_ledger(Path(root) / LEDGER)["runs"]:
        for attempt in run.get("attempts", []):
            used = attempt.get("python")
            if used and run.get("python") and used != run["python"]:
                out.append(f"engine {attempt['engine_id']} ran with {used} on {attempt['node']}, not {run['python']}")
    return out
