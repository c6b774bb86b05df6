"""The Ray side of a distributed sweep that is not the per-engine work: connecting, reading the nodes, the
machine a sweep on that cluster plans for, and the placement groups that reserve each engine's accelerators."""

from __future__ import annotations

import logging
import os
import socket
from typing import TYPE_CHECKING, Any

from bench.core.errors import BenchError
from bench.core.hardware import Machine
from bench.distributed.placement import GPU_RESOURCE, SLOT_RESOURCE, Cluster, Node, Placement

if TYPE_CHECKING:
    from ray.util.placement_group import PlacementGroup

log = logging.getLogger(__name__)

# Ray's accelerator_type resource -> the arch the plan's backend rules use (bench.config.plan.MLA_BACKEND_ARCHS).
ACCELERATOR_ARCHS = {"H100": "sm90", "H200": "sm90", "H20": "sm90", "GH200": "sm90", "A100": "sm80", "L40S": "sm89"}
ACCELERATOR_ARCHS |= {"B200": "sm100", "GB200": "sm100", "B300": "sm103", "GB300": "sm103"}


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise BenchError("--ray needs Ray: pip install -e '.[ray]'") from None
    return ray


def connect(address: str) -> Cluster:
    """Join the cluster at `address` ("auto": RAY_ADDRESS or the cluster this machine is part of) as a driver."""
    ray = import_ray()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    _check_reachable(address)
    if not ray.is_initialized():
        try:
            ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise BenchError(f"--ray {address}: cannot join the Ray cluster: {exc}") from None
    return read_cluster(address)


def _check_reachable(address: str, timeout_s: float = 10.0) -> None:
    """Fail fast on a HOST:PORT that nothing answers (ray.init would retry for minutes)."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or "://" in address:
        return  # "auto", or a ray:// client address: Ray resolves those itself
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise BenchError(
            f"--ray {address}: no Ray head answers there ({exc}); is `ray start --head` running?"
        ) from None


def read_cluster(address: str | None = None) -> Cluster:
    """The alive nodes and what they offer. GPU when any node has GPUs, else the CPU slot resource."""
    ray = import_ray()
    alive = [n for n in ray.nodes() if n.get("Alive")]
    gpus = sum(n["Resources"].get(GPU_RESOURCE, 0) for n in alive)
    resource, platform = (GPU_RESOURCE, "gpu") if gpus else (SLOT_RESOURCE, "cpu")
    nodes = tuple(
        Node(
            n["NodeID"],
            n.get("NodeName") or n.get("NodeManagerAddress", "?"),
            int(n["Resources"].get(resource, 0)),
            _accelerator(n["Resources"]),
        )
        for n in sorted(alive, key=lambda n: (not n["Resources"].get("node:__internal_head__"), n["NodeID"]))
    )
    return Cluster(nodes, resource, platform, address)


def _accelerator(resources: dict[str, float]) -> str:
    return next((k.split(":", 1)[1] for k in sorted(resources) if k.startswith("accelerator_type:")), "")


def accelerator_arch(cluster: Cluster) -> str | None:
    """The GPU arch Ray reports (accelerator_type:NAME), when every node that reports one reports the same known one."""
    archs = {ACCELERATOR_ARCHS.get(n.kind) for n in cluster.nodes if n.kind}
    return archs.pop() if len(archs) == 1 else None


def cluster_machine(cluster: Cluster, local: Machine, arch: str | None) -> Machine:
    """The machine the plan is made for: the cluster's platform and all its accelerators (the placement, not the
    plan, says which engine configs fit a node or need several)."""
    if cluster.platform == "gpu":
        return Machine("gpu", cluster.total, arch or local.arch, cpu=f"(ray: {cluster.describe()})")
    return Machine("cpu", cpu=local.cpu, cpu_count=local.cpu_count, extra={"ray": cluster.describe()})


def reserve(
    placement: Placement, resource: str, avoid_node: str | None = None, on_node: str | None = None
) -> PlacementGroup:
    """A placement group for one engine: one bundle of all its accelerators, packed on one node (the engine's task
    runs in it, and Ray gives the server exactly those devices); or one bundle per accelerator, packed on the fewest
    nodes, for a multi-node engine. `avoid_node`: a re-run goes to another node than the one it was lost on.
    `on_node`: only that node (an A/B round's second side on the node that ran its first)."""
    ray = import_ray()
    from ray.util.placement_group import NODE_ID_LABEL_KEY, placement_group

    if placement.nodes == 1:
        bundles: list[dict[str, float]] = [{resource: float(placement.gpus)}]
        strategy = "STRICT_PACK"
    else:
        bundles, strategy = [{resource: 1.0} for _ in range(placement.gpus)], "PACK"
    selector = None
    if avoid_node or on_node:
        selector = [{NODE_ID_LABEL_KEY: on_node or f"!{avoid_node}"} for _ in bundles]
    log.debug("placement group %s %s (%s) via ray %s", bundles, strategy, selector, ray.__version__)
    return placement_group(bundles, strategy=strategy, bundle_label_selector=selector)


def in_group(pg: PlacementGroup) -> Any:
    """The scheduling strategy that runs a task in the (only) bundle of an engine's placement group."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    return PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=0)


def bundle_nodes(pg: PlacementGroup) -> list[str]:
    """The node id of each bundle of a ready placement group."""
    from ray.util import placement_group_table

    table = placement_group_table(pg)
    return [table["bundles_to_node_id"][i] for i in sorted(table["bundles_to_node_id"])]


def release(pg: PlacementGroup | None) -> None:
    if pg is None:
        return
    from ray.util.placement_group import remove_placement_group

    try:
        remove_placement_group(pg)
    except Exception as exc:  # the cluster may be gone already; nothing is left to free then
        log.debug("removing placement group: %s", exc)


def is_lost(exc: BaseException) -> bool:
    """The error a lost node or a killed worker gives (not an exception raised by the suite's own code)."""
    ray = import_ray()
    return isinstance(exc, ray.exceptions.RayError) and not isinstance(exc, ray.exceptions.RayTaskError)
