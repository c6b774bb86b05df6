"""The records of a results directory, typed: a point record (`points/<id>.json`), the manifest (`manifest.json`)
and an engine record (`effective/<engine id>/effective-rank*.json`, written inside vLLM's workers by
bench.profiling.effective_record). bench.results.store reads and writes every point record and manifest through these
models, so a record that does not match its schema is refused with the file and the field named, at write time
(a bug in the bench) and at read time (a hand-edited or foreign file), never deep inside a report.

Point records are objects end to end: a writer that builds one as a dict (the executor, a skipped or failed point)
turns it into a PointRecord once, with `new_point`; SweepStore.save_point takes a PointRecord and SweepStore.point /
.records return them, and code outside bench.results reads attributes, never a record's keys (tests/unit/
test_record_access.py enforces it). A record is written as `dump_point` gives it: the fields it was built or read
with, extra ones included, so reading and saving it again keeps what it held.

Versioned: a point record and a manifest carry SCHEMA_VERSION (what changed from one version to the
next, and the step that upgrades an older directory: bench/results/migrate.py); an engine record carries its own
`record_version`. The fields the bench reads are typed; a record may hold more (a marker a migration or an
example's provenance note added, a section a later minor change wrote): those are kept as they are and read by
name, so the models never drop what a record holds.

To add a record field: write it where the record is built (bench/run/executor.py for a measured point), declare it
here with its type (optional, with a default, when older records lack it), and read it as an attribute.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from bench.core.errors import BenchError
from bench.core.ids import stable_id

SCHEMA_VERSION = 2  # what changed from 1: bench/results/migrate.py


class Open(BaseModel):
    """Known fields typed and checked; fields not declared are kept (extra="allow")."""

    model_config = ConfigDict(extra="allow", ser_json_inf_nan="constants")  # NaN / inf kept as json.dumps writes them


class Summary(Open):
    """A distribution summary (bench.measure.metrics.distribution)."""

    mean: float | None = None
    n: int = 0
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None


class Precision(Open):
    """bench.measure.window.precision: relative 95% half-widths over sub-windows of the steady span."""

    confidence: float | None = None
    unit: Literal["block", "sub-window"] | None = None  # None: a record from before the whole-cycle headline
    sub_windows: int | None = None  # the units the interval is computed over (blocks or sub-windows)
    output_throughput_cv: float | None = None
    output_throughput_halfwidth: float | None = None
    tpot_cv: float | None = None
    tpot_halfwidth: float | None = None
    within_block_cv: float | None = None  # sub-windows about their own block's rate
    between_block_cv: float | None = None  # blocks (trials, each at its own phase) about the headline


class Stalls(Open):
    """bench.measure.window: gaps of no token for any request, longer than a multiple of the step p50."""

    share: float | None = None
    p50_ms: float | None = None


class Steady(Open):
    """bench.measure.window.steady_span: the span in which all C requests were in flight."""

    fraction_of_window: float | None = None
    span_s: float | None = None
    output_tokens: int | None = None
    requests_sent: int | None = None
    requests_finished: int | None = None
    spans: list[list[float]] = []
    # The headline's whole cycles (bench.measure.window): how many, their windows (one per block), seconds and tokens; the
    # spans' own rate beside it. `short`: fewer than 3 whole cycles, no precision stated, never a report's best.
    cycles: int | None = None
    short: bool = False
    cycle_windows: list[list[float]] = []
    cycle_s: float | None = None
    cycle_tokens: int | None = None
    span_throughput: float | None = None
    stalls: Stalls | None = None
    ttft_window: str | None = None  # where the TTFT's window is not the headline's (no request sent into the span)


class WindowFigures(Open):
    """Throughput and latency over one window."""

    duration_s: float | None = None
    output_throughput: float | None = None
    per_user_output_throughput: float | None = None
    request_throughput: float | None = None
    total_token_throughput: float | None = None
    ttft_ms: Summary | None = None
    tpot_ms: Summary | None = None
    itl_ms: Summary | None = None
    e2e_ms: Summary | None = None


class Metrics(WindowFigures):
    """A measured point's figures: the headline over `window` ("steady", or "whole" for records written before the
    steady window), the whole window's beside it under `whole`."""

    window: Literal["whole", "steady"] = "whole"
    whole: WindowFigures | None = None
    requests: int | None = None
    completed: int | None = None
    errors: int | None = None
    output_tokens: int | None = None
    error_samples: list[str] = []
    precision: Precision | None = None
    steady: Steady | None = None
    step_ms: Summary | None = None

    def whole_window(self) -> WindowFigures:
        """The whole window's figures (the headline itself when the headline is the whole window)."""
        return self.whole if self.whole is not None else self


class SpecDecode(Open):
    """vLLM's speculative-decoding counters over the window (bench.measure.metrics)."""

    acceptance_rate: float | None = None
    mean_acceptance_length: float | None = None
    per_position_acceptance: list[float | None] | None = None
    num_drafts: float | None = None
    num_draft_tokens: float | None = None
    num_accepted_tokens: float | None = None


class Cache(Open):
    """vLLM's prefix-cache and preemption counters over the window."""

    prefix_cache_hit_rate: float | None = None
    prefix_cache_hits: float | None = None
    prefix_cache_queries: float | None = None
    preemptions: float | None = None


class Served(Open):
    """vLLM's own counts and mean latencies over the measured windows beside the client's (bench.measure.metrics.served_check;
    the sums and counts behind the means are kept too)."""

    server_generation_tokens: float | None = None
    server_finished_requests: float | None = None
    client_output_tokens: int | None = None
    client_requests: int | None = None
    token_ratio: float | None = None
    ttft_ms_vllm: float | None = None  # means over the windows' requests, each side's own clock
    ttft_ms_client: float | None = None
    tpot_ms_vllm: float | None = None
    tpot_ms_client: float | None = None


class EffectiveModel(Open):
    """What one model's attention layers ran with, summarised over its layers (bench.measure.effective.summarize_record;
    "A | B" where layers differ)."""

    layers: int | None = None
    backend: str | None = None
    backend_class: str | None = None
    impl_class: str | None = None
    block_size: int | str | None = None
    kv_cache_dtype: str | None = None
    kv_spec_dtype: str | None = None

    def kv_ran(self) -> str | None:
        """The KV dtype as "configured (storage)", e.g. "auto (bfloat16)"; the storage only where it differs."""
        if self.kv_cache_dtype is None:
            return None
        storage = self.kv_spec_dtype
        return (
            f"{self.kv_cache_dtype} ({storage})" if storage and storage != self.kv_cache_dtype else self.kv_cache_dtype
        )


class Effective(Open):
    """What the server really ran with (bench.measure.effective.read_effective): the flat fields from its log and metrics,
    overridden by the engine records where they know (`source` "engine record"; then `target` / `draft` hold each
    model's layers)."""

    source: str | None = None  # "server log" / "engine record"; records before 2026-12 have none (the log)
    target_attention_backend: str | None = None
    draft_attention_backend: str | None = None
    kv_cache_dtype: str | None = None
    block_size: int | None = None
    cudagraph_mode: str | None = None
    dcp_size: int | None = None
    kv_cache_tokens: int | None = None
    runner: str | None = None
    runner_class: str | None = None
    vllm_version: str | None = None
    target: EffectiveModel | None = None
    draft: EffectiveModel | None = None


class Event(Open):
    """A server-log event inside a window (bench.measure.contamination)."""

    kind: str


class TrialLoad(Open):
    """How a trial's load ran (bench.run.trial): its kind ("closed-loop", "conversations", ...) and, for a closed
    loop, the requests in flight."""

    kind: str | None = None
    concurrency: int | None = None


class Trial(Open):
    trial: int | None = None
    metrics: Metrics
    spec_decode: SpecDecode | None = None
    load: TrialLoad | None = None


class EngineSettings(Open):
    """The engine's configuration as planned (bench.config.plan.EngineConfig.to_dict)."""

    draft_attention_backend: str | None = None
    draft_kv_cache_dtype: str | None = None
    dcp_size: int = 1
    num_speculative_tokens: int = 0
    acceptance: dict[str, Any] = {}
    server: dict[str, Any] = {}
    axes: dict[str, Any] = {}
    target: str | None = None
    weights: str | None = None

    def base_id(self) -> str:
        """What a speculative point's no-speculation baseline must share beyond the axes: the target, its weights
        and the profile's [server] settings, hashed (a results directory resumed with a changed profile can hold
        two; bench.report.speedup)."""
        return stable_id({"target": self.target, "weights": self.weights, "server": self.server})

    def tensor_parallel_size(self) -> int:
        return int({**self.server, **self.axes}.get("tensor_parallel_size", 1))


class ShapeConfig(Open):
    """bench.config.profile.Shape: a batch shape of random prompts."""

    concurrency: int
    input_len: int
    output_len: int


class ArrivalConfig(Open):
    """bench.workloads.arrival.Arrival as a point's config holds it."""

    request_rate: float | None = None
    burstiness: float | None = None
    ramp_up: dict[str, Any] | None = None
    max_concurrency: int | None = None


class SamplingConfig(Open):
    """bench.workloads.point.Sampling as a point's config holds it."""

    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    max_tokens: int | None = None
    ignore_eos: bool = False


class WorkloadConfig(Open):
    """bench.workloads.point.Workload.to_dict (absent for the default workload): the arrival, and for a text
    workload its dataset's source table, sampling and chat template arguments."""

    arrival: ArrivalConfig | None = None
    dataset: dict[str, Any] | None = None
    sampling: SamplingConfig | None = None
    chat_template_kwargs: dict[str, Any] | None = None


class EmulationConfig(Open):
    """An emulated DCP rank's config (records from before the emulation was removed, bench.models.dcp_emulation):
    the deployment's DCP size and its full shape."""

    dcp_size: int | None = None
    full_shape: ShapeConfig | None = None


class PointConfig(Open):
    """bench.config.plan.Point.to_dict: the engine, and the shape (random prompts) or the workload (text)."""

    engine: EngineSettings
    shape: ShapeConfig | None = None
    workload: WorkloadConfig | None = None
    emulation: EmulationConfig | None = None
    num_prompts: int | None = None
    warmup_prompts: int | None = None
    seed: int | None = None


class WorkloadArrival(Open):
    label: str | None = None
    vllm_bench_serve_args: list[str] | None = None


class WorkloadRecord(Open):
    """What a measured point's workload asked for (bench.run.executor._workload_record: bench.workloads.point.Workload.
    describe, its label, and the dataset's provenance for a text workload)."""

    id: str | None = None
    kind: str | None = None
    label: str | None = None
    arrival: WorkloadArrival | None = None
    sampling_label: str | None = None


class Warmup(Open):
    """The warm-up before the first trial: its requests and their whole-window tok/s."""

    requests: int | None = None
    concurrency: int | None = None
    output_throughput: float | None = None


class ServerInfo(Open):
    log: str | None = None
    ready_s: float | None = None
    started: str | None = None
    argv: list[str] = []
    pids: list[int] = []


class PointRecord(Open):
    """One point's record. `ok`: measured (metrics present); `failed`: the server or the requests failed (reason and
    detail say how, bench.measure.failures); `skipped`: the plan did not run it (reason says why)."""

    schema_version: int
    point_id: str
    engine_id: str
    status: Literal["ok", "failed", "skipped"]
    reason: str | None = None
    detail: str | None = None
    config: PointConfig
    label: dict[str, Any] = {}
    server: ServerInfo = ServerInfo()
    started: str | None = None
    finished: str | None = None
    metrics: Metrics | None = None
    spec_decode: SpecDecode | None = None
    trials: list[Trial] = []
    cache: Cache | None = None
    served: Served | None = None  # records from before 2026-12-04 have none
    contamination: list[Event] = []
    contamination_checked: list[str] | None = None  # where it was looked for; None: a record from before
    flags: list[Any] = []
    effective: Effective | None = None
    mismatch: list[str] = []
    workload: WorkloadRecord | None = None
    categories: list[dict[str, Any]] | None = None  # bench.measure.metrics.category_metrics
    phase: str | None = None
    raw: str | None = None
    warmup: Warmup | None = None
    recomputed: dict[str, Any] | None = None  # when and by which bench (bench report --recompute)
    reason_recorded: str | None = None  # a failed point's reason before --recompute classified it again

    @model_validator(mode="after")
    def _measured(self) -> PointRecord:
        if self.status == "ok" and self.metrics is None:
            raise ValueError("an ok point has metrics")
        if self.status != "ok" and not self.reason:
            raise ValueError(f"a {self.status} point says why (reason)")
        return self


def new_point(data: Mapping[str, Any]) -> PointRecord:
    """A point record built as a dict (the executor's measured point, a failed or skipped one) as its model, with
    SCHEMA_VERSION: the one way from a dict to a record outside bench.results. A BenchError naming the point and the
    fields when it does not match (a bug in the bench)."""
    return parse(PointRecord, {"schema_version": SCHEMA_VERSION, **data}, f"point {data.get('point_id')}")


def dump_point(record: PointRecord) -> dict[str, Any]:
    """What a point record's file holds: the fields it was built or read with (a default it never had is not
    added), extra ones included. A float field read as an int is written as a float."""
    return record.model_dump(mode="json", exclude_unset=True, fallback=str)


class Environment(Open):
    """What a session ran on (bench.results.environment.collect_environment: the suite's commit, Python, machine, vLLM and
    its patch states, read by name). Typed here: `variables`, the BENCH_* and VLLM_* environment variables the sweep
    ran with (a step delay, say); manifests before 2026-12-07 have none."""

    variables: dict[str, str] | None = None
    host: dict[str, str | None] | None = None  # name and boot_id (from 2026-12-07): which machine


class Manifest(Open):
    """What a sweep planned and on what (bench.commands.sweep._write_manifest; `bench load --url` adds `server_url`)."""

    schema_version: int
    created: str | None = None
    environment: Environment = Environment()
    plan: list[dict[str, Any]] = []
    profile: dict[str, Any] = {}
    counts: dict[str, int] = {}
    migrations: list[dict[str, Any]] = []
    sessions: list[dict[str, Any]] = []  # every session's environment, the first included (bench.commands.sweep)


class EngineRecord(Open):
    """What one vLLM worker selected, written by bench.profiling.effective_record inside the worker."""

    record_version: int
    rank: int
    pid: int
    vllm_version: str | None = None
    runner: str | None = None
    layers: list[dict[str, Any]] = []
    dcp_world_size: int | None = None
    tensor_parallel_size: int | None = None


class OutputsRecord(Open):
    """Greedy outputs of one server start on fixed prompts (bench.load.outputs; OUT/outputs/<engine id>.json, written
    by bench.run.executor when a sweep runs with --check-outputs; compared by bench.verdicts.outputs)."""

    record_version: int = 1
    engine_id: str
    started: str  # when that server start began (its points' server.started)
    input_len: int
    max_tokens: int
    prompt_sha256: list[str]  # one per prompt sent (bench.load.outputs.prompt_digest)
    outputs: list[list[int]]  # generated token ids per prompt answered, in order
    error: str | None = None  # why the requests stopped early (the outputs hold those answered before)
    seconds: float | None = None  # how long the requests took


M = TypeVar("M", bound=BaseModel)


def parse(model: type[M], data: object, path: Path | str) -> M:
    """`data` as `model`, or a BenchError naming the file and every field that does not match."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '(record)'}: {err['msg']}" for err in exc.errors()[:5]
        )
        more = f" (and {exc.error_count() - 5} more)" if exc.error_count() > 5 else ""
        raise BenchError(f"{path}: not a valid {model.__name__}: {problems}{more}") from None
