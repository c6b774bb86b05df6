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

from bench.distributed.ledger import engine_nodes, foreign_pythons
from bench.errors import BenchError
from bench.fmt import md_rows

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
        a, b = (engine_nodes(out / side / f"round-{r}") for side in ("baseline", "candidate"))
        for engine in sorted(set(a) | set(b)):
            na, nb = a.get(engine), b.get(engine)
            pair = _pair(na, nb)
            pairs += pair == "same node"
            other_kind += pair.startswith("OTHER NODE TYPE")
            rows.append([r, engine, _node(na), _node(nb), pair])
    lines = [
        "",
        "## Nodes (ab --ray)",
        "",
        *md_rows(["round", "engine", "baseline node", "candidate node", "pair"], rows),
    ]
    lines += ["", f"{pairs} of {len(rows)} round pairs ran on the same node; {other_kind} on another node type."]
    return "\n".join(lines) + "\n"


def _node(node: dict[str, str] | None) -> str:
    if node is None:
        return "-"
    return f"{node['node']} ({node['kind']})" if node["kind"] else node["node"]


def _pair(a: dict[str, str] | None, b: dict[str, str] | None) -> str:
    if a is None or b is None:
        return "one side has no points"
    if a["node_id"] == b["node_id"]:
        return "same node"
    return "other node, same type" if a["kind"] == b["kind"] else f"OTHER NODE TYPE ({a['kind']} vs {b['kind']})"
