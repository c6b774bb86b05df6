"""The plan of a sweep on a Ray cluster: made for the cluster's platform and accelerators rather than this
machine's (the driver may be a CPU-only head node), and the --dry-run text of where each engine config goes."""

from __future__ import annotations

from bench.config.plan import Plan, make_plan, plan_sweep
from bench.config.profile import load_profile_variants
from bench.core.hardware import detect_machine
from bench.distributed.cluster import cluster_machine
from bench.distributed.placement import Cluster, describe_placements, described_cluster


def cluster_for(address: str, profile: str | None) -> tuple[Cluster, str | None]:
    """The cluster at `address` (joined), or the one `NxG` describes (with the profile's platform); and the GPU
    arch to plan for (the profile's [hardware] for a described cluster, else what Ray reports)."""
    local = detect_machine()
    hardware = load_profile_variants(profile)[local.platform].hardware
    described = described_cluster(address, hardware.platform if hardware else local.platform)
    if described is not None:
        return described, hardware.arch if hardware else local.arch
    from bench.distributed.cluster import accelerator_arch, connect

    cluster = connect(address)
    return cluster, accelerator_arch(cluster) or (hardware.arch if hardware else None)


def ray_plan(
    address: str,
    profile: str | None,
    *,
    repeat: int | None,
    points: list[str] | None,
    dry_run: bool = False,
    prompt_salt: str | None = None,
) -> Plan:
    """The plan for the cluster: its platform and all its accelerators (bench.distributed.placement then says
    which engine configs fit one node, which need several and which none)."""
    cluster, arch = cluster_for(address, profile)
    machine = cluster_machine(cluster, detect_machine(), arch)
    plan = plan_sweep(profile, dry_run=dry_run, repeat=repeat, points=points, detected=machine, prompt_salt=prompt_salt)
    if plan.machine != machine:  # a dry run plans for the profile's [hardware]; this one for the cluster
        plan = make_plan(plan.profile, machine)
        plan = plan.select(points) if points is not None else plan
    return plan


def describe_on_cluster(plan: Plan, address: str) -> str:
    cluster, _ = cluster_for(address, plan.profile.source)
    return describe_placements(plan, cluster)
