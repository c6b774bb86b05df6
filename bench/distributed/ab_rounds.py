"""`bench ab --ray`: each round's two sweeps run on the cluster through `sweep --ray` (the one scheduler), with
what an A/B needs on top of it:

- the round's second side runs each engine configuration on the node that ran it for the first side
  (`sweep --ray-same-nodes`), so a round's pair differs in its environment, not in its node; rounds are free to
  land elsewhere, so node-to-node differences fall on both sides alike;
- each side must have run its own environment's interpreter on the nodes (the nodes need it at the same path),
  else the comparison would be of the nodes' default vLLM against itself;
- which node ran each side of each round is written under the comparison, differences marked.
"""

from __future__ import annotations

from pathlib import Path

from bench.core.errors import BenchError
from bench.core.fmt import md_rows
from bench.distributed.ledger import engine_node_sets, foreign_pythons

NO_PATCH_SUFFIX = (
    "ab --ray: the :patched / :unpatched suffix sets the patch state of this machine's vLLM only, not the nodes'; "
    "give two environments installed at the same path on every node instead (e.g. two venvs, one patched)"
)


def check_envs(patches: list[str | None]) -> None:
    if any(patches):
        raise BenchError(NO_PATCH_SUFFIX)


def sweep_args(ray: str, out: Path, round_index: int, first_side: str | None) -> list[str]:
    """The `bench sweep` arguments a side of round `round_index` adds; `first_side`: the side that ran before it in
    this round (None for the round's first)."""
    args = ["--ray", ray]
    if first_side is not None:
        args += ["--ray-same-nodes", str(out / first_side / f"round-{round_index}")]
    return args


def check_side(out: Path, side: str, round_index: int) -> None:
    wrong = foreign_pythons(out / side / f"round-{round_index}")
    if wrong:
        raise BenchError(
            f"ab --ray: {side} round {round_index} did not run its environment on the nodes ({'; '.join(wrong)}); "
            "install it at the same path on every node"
        )


def nodes_markdown(out: Path, rounds: int) -> str:
    """Which node ran each engine configuration of each side, per round; a pair on different nodes is marked
    (a different node type more loudly: that is a difference of hardware, not of the environments)."""
    rows = []
    pairs = other_kind = 0
    for r in range(rounds):
        a, b = (engine_node_sets(out / side / f"round-{r}") for side in ("baseline", "candidate"))
        for engine in sorted(set(a) | set(b)):
            na, nb = a.get(engine, []), b.get(engine, [])
            pair = _pair(na, nb)
            pairs += pair == "same node"
            other_kind += "OTHER NODE TYPE" in pair
            rows.append([r, engine, _nodes(na), _nodes(nb), pair])
    lines = [
        "",
        "## Nodes (ab --ray)",
        "",
        *md_rows(["round", "engine", "baseline node", "candidate node", "pair"], rows),
    ]
    lines += ["", f"{pairs} of {len(rows)} round pairs ran on the same node; {other_kind} on another node type."]
    return "\n".join(lines) + "\n"


def _nodes(nodes: list[dict[str, str]]) -> str:
    if not nodes:
        return "-"
    return ", ".join(f"{n['node']} ({n['kind']})" if n["kind"] else n["node"] for n in nodes)


def _pair(a: list[dict[str, str]], b: list[dict[str, str]]) -> str:
    """A side's engine can have run on several nodes (a node-lost retry, a resume): "same node" only when both
    sides ran it on one and the same node."""
    if not a or not b:
        return "one side has no points"
    kinds = list(dict.fromkeys(n["kind"] for n in a + b))  # the baseline's first
    type_note = f"OTHER NODE TYPE ({' vs '.join(kinds)})" if len(kinds) > 1 else ""
    if len(a) > 1 or len(b) > 1:
        return "SPLIT over several nodes" + (f"; {type_note}" if type_note else "")
    if a[0]["node_id"] == b[0]["node_id"]:
        return "same node"
    return type_note or "other node, same type"
