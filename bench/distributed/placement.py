"""Where each engine configuration of a sweep can run on a Ray cluster: pure, no Ray import (the dry run and the
unit tests use it with a described cluster).

An engine configuration needs `tensor_parallel_size x pipeline_parallel_size` accelerators. It runs packed on one
node when one node has that many; otherwise it spans the fewest nodes that together have them, served by vLLM's
own Ray executor. GPU clusters count Ray's `GPU` resource; CPU clusters count a custom resource (SLOT_RESOURCE)
that each node is started with, standing for its GPUs: Ray schedules a CPU sweep's servers by it exactly as it
would schedule GPUs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from bench.config.plan import EngineConfig, Plan
from bench.results.records import PointRecord

GPU_RESOURCE = "GPU"
SLOT_RESOURCE = "bench_gpu"  # on CPU clusters: `ray start --resources '{"bench_gpu": N}'`
NODE_LOST = "node-lost"  # the reason of a point whose node was lost or whose worker was killed
NSYS_ON_NODE = "on-node"  # a capture's nsys: the one found on the node that runs the server (not the driver's)
JOB_FILE = "run/job.pkl"  # an engine job for a node runner, under run/: scratch, never sent to the driver
CLUSTER_SKIP = "cluster: "  # skip reasons that are the cluster's, not the plan's (a --resume may run them)
_HYPOTHETICAL = re.compile(r"^(\d+)x(\d+)$")


@dataclass(frozen=True)
class Node:
    node_id: str  # Ray's hex node id ("" for a described node)
    name: str  # Ray's node name (its IP unless `ray start --node-name`)
    slots: int  # accelerators: GPUs, or SLOT_RESOURCE on a CPU cluster
    kind: str = ""  # the accelerator type Ray reports (e.g. H200); "" on CPU nodes

    @property
    def short(self) -> str:
        return f"{self.name}/{self.node_id[:6]}" if self.node_id else self.name


@dataclass(frozen=True)
class Cluster:
    nodes: tuple[Node, ...]  # alive nodes
    resource: str  # GPU_RESOURCE or SLOT_RESOURCE
    platform: str  # "gpu" or "cpu"
    address: str | None = None  # None: described (NxG), not connected

    @property
    def total(self) -> int:
        return sum(n.slots for n in self.nodes)

    @property
    def largest(self) -> int:
        return max((n.slots for n in self.nodes), default=0)

    def without(self, node_id: str) -> Cluster:
        return Cluster(tuple(n for n in self.nodes if n.node_id != node_id), self.resource, self.platform, self.address)

    def describe(self) -> str:
        sizes = ", ".join(f"{n.short} x{n.slots}" for n in self.nodes) or "no nodes"
        return f"{len(self.nodes)} nodes with {self.resource} ({sizes})"


def described_cluster(text: str, platform: str) -> Cluster | None:
    """`NxG` (e.g. 2x8): N nodes of G accelerators each, for a dry run without a cluster; None if not that form."""
    match = _HYPOTHETICAL.match(text.strip())
    if not match:
        return None
    count, slots = int(match[1]), int(match[2])
    nodes = tuple(Node("", f"node{i}", slots) for i in range(count))
    return Cluster(nodes, GPU_RESOURCE if platform == "gpu" else SLOT_RESOURCE, platform)


def engine_gpus(engine: EngineConfig) -> int:
    """Accelerators one server of `engine` holds (DCP splits the TP group; it adds none)."""
    server = engine.serve_args
    return max(1, engine.tensor_parallel_size * int(server.get("pipeline_parallel_size", 1)))


@dataclass(frozen=True)
class Placement:
    gpus: int  # accelerators the server needs
    nodes: int  # 1: a placement group packed on one node; > 1: spans nodes (vLLM's Ray executor)
    problem: str | None = None  # why this cluster cannot run it (the points are skipped with it)

    @property
    def multi_node(self) -> bool:
        return self.problem is None and self.nodes > 1

    def text(self, resource: str) -> str:
        if self.problem:
            return f"cannot run: {self.problem}"
        where = "one node" if self.nodes == 1 else f"{self.nodes} nodes, vLLM's Ray executor"
        return f"{self.gpus} {resource} on {where}"


def place(engine: EngineConfig, cluster: Cluster) -> Placement:
    need = engine_gpus(engine)
    if need <= cluster.largest:
        return Placement(need, 1)
    if cluster.total == 0:
        hint = (
            f"; start nodes with --resources '{{\"{SLOT_RESOURCE}\": N}}'" if cluster.resource == SLOT_RESOURCE else ""
        )
        return Placement(need, 0, f"no node offers {cluster.resource}{hint}")
    if need > cluster.total:
        return Placement(need, 0, f"needs {need} {cluster.resource}, the cluster has {cluster.describe()}")
    if cluster.platform != "gpu":
        return Placement(need, 0, f"needs {need} {cluster.resource} across nodes: vLLM's Ray executor needs GPUs")
    count, have = 0, 0
    for slots in sorted((n.slots for n in cluster.nodes), reverse=True):
        count, have = count + 1, have + slots
        if have >= need:
            break
    return Placement(need, count)


def skip_reason(placement: Placement) -> str:
    return f"{CLUSTER_SKIP}{placement.problem}"


def is_cluster_outcome(record: PointRecord) -> bool:
    """A point the cluster stopped, not its configuration: skipped for want of cluster resources, or failed with
    its node lost. A later --resume runs it again (on a larger cluster, or with the node back)."""
    reason = record.reason or ""
    if record.status == "skipped":
        return reason.startswith(CLUSTER_SKIP)
    return record.status == "failed" and reason == NODE_LOST


def describe_placements(plan: Plan, cluster: Cluster) -> str:
    """The --dry-run --ray text: the cluster, then each engine config's placement; multi-node ones marked."""
    lines = [f"\nray: {cluster.describe()}" + ("" if cluster.address else " (described, not connected)")]
    multi = 0
    for engine, points in plan.groups:
        placement = place(engine, cluster)
        multi += placement.multi_node
        mark = "  MULTI-NODE" if placement.multi_node else ""
        lines.append(
            f"  server {engine.id} [{engine.label()}] {len(points)} points: {placement.text(cluster.resource)}{mark}"
        )
    lines.append(f"  {multi} of {len(plan.groups)} engine configs need more than one node")
    return "\n".join(lines)
