"""Sweep profiles (profiles/*.toml): typed, validated before anything starts, unknown keys refused.

A profile names the model, the fixed `vllm serve` arguments (vLLM's own names), the fixed speculative config,
the sweep axes, the acceptance mode and the hardware it is meant for. `[when.cpu]` / `[when.gpu]` tables are
merged over the base for the platform the sweep runs (or plans) on.
Just over 400 lines on purpose: the whole profile schema (every table, key and its validation) reads in one place;
the `[run]` table, which grew its own rules, is in bench/config/run_options.py.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from bench.config.axes import AXES, check_values
from bench.config.run_options import Run
from bench.config.slo import Slo
from bench.core.errors import BenchError
from bench.core.schema import Strict
from bench.models.kimi_rank import is_kimi_rank, parse_spec
from bench.workloads.arrival import Arrival
from bench.workloads.point import RANDOM, Sampling
from bench.workloads.spec import parse_source

PROFILES_DIR = Path(__file__).resolve().parents[2] / "profiles"
SHAPE_RE = re.compile(r"^\s*(\d+)\s*x\s*(\d+)\s*x\s*(\d+)\s*$")
# Server arguments the suite owns: set them through the axes or the model table instead.
RESERVED_SERVER_ARGS = {
    "model",
    "port",
    "host",
    "speculative_config",
    "decode_context_parallel_size",
    "served_model_name",
    "load_format",
}


class Shape(Strict):
    concurrency: int = Field(ge=1)
    input_len: int = Field(ge=1)
    output_len: int = Field(ge=2)

    @property
    def label(self) -> str:
        return f"{self.concurrency}x{self.input_len}x{self.output_len}"


class ModelSpec(Strict):
    target: str = "tiny"  # "tiny" = the embedded generated model; else a model id or path (real loading path)
    draft: str = "tiny"
    weights: Literal["dummy", "zero-final-norm", "real"] = "dummy"
    flavor: Literal["auto", "cpu", "gpu"] = "auto"

    @model_validator(mode="after")
    def _tiny_pairs(self):
        if (self.target == "tiny") != (self.draft == "tiny"):
            raise ValueError("target and draft must both be 'tiny' or both be real models")
        if self.target != "tiny" and self.weights == "zero-final-norm":
            raise ValueError("weights = 'zero-final-norm' exists only for the tiny model")
        if is_kimi_rank(self.target) or is_kimi_rank(self.draft):  # one generated pair, dummy weights
            if self.draft != "kimi-rank" or self.weights != "dummy":
                raise ValueError("a kimi-rank target takes draft = 'kimi-rank' and weights = 'dummy'")
            try:
                parse_spec(self.target)
            except BenchError as exc:
                raise ValueError(str(exc)) from None
        return self


class Acceptance(Strict):
    mode: Literal["real", "synthetic"] = "real"
    rates: list[float] | None = None  # per-position acceptance rates, synthetic mode
    mean_length: float | None = Field(default=None, gt=1.0)

    @field_validator("rates")
    @classmethod
    def _rates(cls, v):
        if v is not None and (not v or any(not 0.0 <= r <= 1.0 for r in v)):
            raise ValueError("rates must be a non-empty list of numbers in [0, 1]")
        return v

    @model_validator(mode="after")
    def _one_source(self):
        if self.mode == "synthetic" and (self.rates is None) == (self.mean_length is None):
            raise ValueError("synthetic acceptance needs exactly one of 'rates' or 'mean_length'")
        if self.mode == "real" and (self.rates is not None or self.mean_length is not None):
            raise ValueError("'rates' / 'mean_length' apply only to mode = 'synthetic'")
        return self


class Axes(Strict):
    draft_attention_backend: list[str] = ["auto"]
    draft_kv_cache_dtype: list[str] = ["auto"]
    dcp_size: list[int] = [1]
    num_speculative_tokens: list[int] = [3]
    shapes: list[Shape] = [Shape(concurrency=1, input_len=128, output_len=128)]
    # `vllm serve` flags swept (bench/config/axes.py): the declared ones under [axes] by name, any other under [axes.server]
    server: dict[str, list[Any]] = {}

    @model_validator(mode="before")
    @classmethod
    def _server_axes(cls, data):
        """Declared server axes given under [axes] join [axes.server]; every server axis's values are checked."""
        if not isinstance(data, dict):
            return data
        if "dcp_emulated" in data:
            raise ValueError(
                "dcp_emulated was removed: DCP N now runs vLLM's own DCP code on one GPU as rank 0 of a loopback "
                "group: put N in axes.dcp_size (docs/kimi-rank.md)"
            )
        data = dict(data)
        server = dict(data.pop("server", None) or {})
        for name in [k for k in data if k in AXES]:
            if name in server:
                raise ValueError(f"{name} is given twice (under [axes] and [axes.server])")
            server[name] = data.pop(name)
        data["server"] = {name: check_values(name, values) for name, values in sorted(server.items())}
        return data

    @field_validator("shapes", mode="before")
    @classmethod
    def _parse_shapes(cls, v):
        return parse_shapes(v)

    @field_validator(
        "draft_attention_backend",
        "draft_kv_cache_dtype",
        "dcp_size",
        "num_speculative_tokens",
        "shapes",
    )
    @classmethod
    def _non_empty_unique(cls, v):
        if not v:
            raise ValueError("an axis needs at least one value")
        if len({str(x) for x in v}) != len(v):
            raise ValueError("axis values must be distinct")
        return v

    @field_validator("dcp_size")
    @classmethod
    def _positive(cls, v):
        if any(x < 1 for x in v):
            raise ValueError("values must be >= 1")
        return v

    @field_validator("num_speculative_tokens")
    @classmethod
    def _spec_tokens(cls, v):
        if any(x < 0 for x in v):
            raise ValueError("values must be >= 0 (0 = no draft: the no-speculation baseline)")
        return v

    @field_validator("draft_attention_backend")
    @classmethod
    def _backend_names(cls, v):
        names = [b.upper() if b.lower() != "auto" else "auto" for b in v]
        if len(set(names)) != len(names):  # names are case-insensitive: 'flashmla' and 'FLASHMLA' are one point
            raise ValueError("axis values must be distinct (backend names ignore case)")
        return names


def parse_shapes(v):
    """Shapes as 'CONCURRENCYxINPUT_LENxOUTPUT_LEN' strings (or tables) -> tables for Shape."""
    if not isinstance(v, list):
        raise ValueError("shapes must be a list like ['1x128x128', '8x1024x256']")
    out = []
    for item in v:
        if isinstance(item, str):
            m = SHAPE_RE.match(item)
            if not m:
                raise ValueError(f"shape {item!r} is not 'CONCURRENCYxINPUT_LENxOUTPUT_LEN'")
            item = dict(zip(("concurrency", "input_len", "output_len"), map(int, m.groups())))
        out.append(item)
    return out


def _one_or_list(v):
    return [v] if isinstance(v, dict) else v


class WorkloadTable(Strict):
    """`[workloads.<id>]`: random token ids of exact length (no `dataset`: the batch shapes, greedy, EOS
    ignored, /v1/completions), or a text dataset (`dataset`, a source table of bench.workloads) whose
    conversations go to /v1/chat/completions. `sampling` and `arrival` take a table or a list of them (an axis);
    `concurrency = [C, ...]` is short for fixed-concurrency arrivals."""

    dataset: dict[str, Any] | None = None
    shapes: list[Shape] | None = None  # random only; default: axes.shapes
    sampling: list[Sampling] | None = None  # text only; default: the server's (the model's generation config)
    chat_template_kwargs: dict[str, Any] | None = None  # text only, passed through (e.g. Kimi's thinking)
    concurrency: list[int] | None = None
    arrival: list[Arrival] | None = None
    num_prompts: int | None = Field(default=None, ge=1)  # text: conversations; default run.num_prompts
    warmup_prompts: int | None = Field(default=None, ge=0)

    @field_validator("shapes", mode="before")
    @classmethod
    def _parse_shapes(cls, v):
        return parse_shapes(v)

    @field_validator("sampling", "arrival", mode="before")
    @classmethod
    def _table_or_list(cls, v):
        return _one_or_list(v)

    @field_validator("shapes", "sampling", "concurrency", "arrival")
    @classmethod
    def _distinct(cls, v):
        if v is not None and (not v or len({str(x) for x in v}) != len(v)):
            raise ValueError("needs distinct values (at least one)")
        if v and isinstance(v[0], int) and min(v) < 1:
            raise ValueError("values must be >= 1")
        return v

    @model_validator(mode="after")
    def _kind_keys(self):
        if self.concurrency is not None and self.arrival is not None:
            raise ValueError("give either concurrency or arrival, not both")
        if self.dataset is None:
            if self.sampling is not None or self.chat_template_kwargs is not None:
                raise ValueError(
                    "random token ids are greedy with EOS ignored: sampling and chat_template_kwargs "
                    "apply to text workloads (give a dataset)"
                )
            if self.concurrency is not None:
                raise ValueError("a random workload's concurrency is its shapes' (CONCURRENCYxINPUT_LENxOUTPUT_LEN)")
            if any(a.max_concurrency is not None for a in self.arrival or ()):
                raise ValueError(
                    "a random workload's concurrency cap is its shapes' concurrency: leave arrival.max_concurrency out"
                )
        elif self.shapes is not None:
            raise ValueError(
                "shapes apply to random workloads; a text workload's lengths come from its data "
                "(sampling.max_tokens caps answers)"
            )
        return self


class Hardware(Strict):
    platform: Literal["cpu", "gpu"]
    gpus: int = Field(default=0, ge=0)
    arch: str | None = None  # e.g. "sm90"; constraints use it


class ReportOptions(Strict):
    """`[report]`: how `bench report` reads the results. `slo`: per-request service-level targets (bench.config.slo); with
    them the report names, per shape, the configuration with the highest goodput (`bench report --slo` overrides)."""

    slo: Slo | None = None


class Profile(Strict):
    name: str = Field(pattern=r"\S")  # names results folders and reports: not empty, not only blanks
    description: str = ""
    model: ModelSpec = ModelSpec()
    server: dict[str, Any] = {}
    speculative: dict[str, Any] = {"method": "eagle3"}
    axes: Axes = Axes()
    acceptance: Acceptance = Acceptance()
    run: Run = Run()
    hardware: Hardware | None = None
    report: ReportOptions = ReportOptions()
    workloads: dict[str, WorkloadTable] = {}  # none: the random workload at axes.shapes
    source: str = ""  # the file it came from

    @field_validator("workloads")
    @classmethod
    def _workload_ids(cls, v):
        bad = [k for k in v if not WORKLOAD_ID_RE.match(k)]
        if bad:
            raise ValueError(f"workload ids {bad} must be letters, digits, '.', '_' or '-'")
        return v

    @property
    def workload_tables(self) -> dict[str, WorkloadTable]:
        """The workloads to run: the profile's, else today's random token ids at axes.shapes."""
        return dict(self.workloads) or {RANDOM: WorkloadTable()}

    @model_validator(mode="after")
    def _server_axes_apart(self):
        """A swept flag is not also fixed, and not one the suite sets itself."""
        both = sorted(set(self.axes.server) & set(self.server))
        if both:
            raise ValueError(f"{both}: swept under [axes] and fixed under [server]: keep one")
        owned = sorted(set(self.axes.server) & RESERVED_SERVER_ARGS)
        if owned:
            raise ValueError(f"axes.server keys {owned} are set by the suite (use [model] / [axes] instead)")
        return self

    @field_validator("server")
    @classmethod
    def _server_args(cls, v):
        bad = sorted({k.replace("-", "_") for k in v} & RESERVED_SERVER_ARGS)
        if bad:
            raise ValueError(f"server keys {bad} are set by the suite (use [model] / [axes] instead)")
        spelled = [k.replace("-", "_") for k in v]
        twice = sorted({k for k in spelled if spelled.count(k) > 1})
        if twice:  # max-num-seqs and max_num_seqs are one flag: one value would silently win
            raise ValueError(f"server keys {twice} are given twice (with dashes and with underscores)")
        return {k.replace("-", "_"): val for k, val in v.items()}

    @field_validator("speculative")
    @classmethod
    def _spec_keys(cls, v):
        owned = {
            "model",
            "num_speculative_tokens",
            "draft_attention_backend",
            "draft_kv_cache_dtype",
            "rejection_sample_method",
            "synthetic_acceptance_rates",
            "synthetic_acceptance_length",
            # the draft's backend and KV dtype: the draft axes write them (legacy or upstream names, --draft-keys)
            "attention_backend",
            "kv_cache_dtype",
        }
        bad = sorted(set(v) & owned)
        if bad:
            raise ValueError(
                f"speculative keys {bad} come from [model], [axes] (draft_attention_backend, draft_kv_cache_dtype) "
                "or [acceptance]"
            )
        return v


WORKLOAD_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
PLATFORM_TABLE = "when"
PLATFORMS = ("cpu", "gpu")  # Machine.platform values; every profile has a variant for each


def _merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for key, value in over.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def resolve_profile_path(name_or_path: str | None) -> Path:
    if name_or_path is None:
        return PROFILES_DIR / "tiny.toml"
    path = Path(name_or_path)
    if path.suffix == ".toml" or path.exists():
        if not path.exists():
            raise BenchError(f"profile file {path} does not exist")
        return path
    candidate = PROFILES_DIR / f"{name_or_path}.toml"
    if not candidate.exists():
        known = ", ".join(sorted(p.stem for p in PROFILES_DIR.glob("*.toml")))
        raise BenchError(f"unknown profile {name_or_path!r}; shipped profiles: {known}")
    return candidate


def load_profile(name_or_path: str | None, platform: str) -> Profile:
    return _variant(load_profile_variants(name_or_path), platform)


def load_profile_variants(name_or_path: str | None) -> dict[str, Profile]:
    """The profile for every platform ({"cpu": ..., "gpu": ...}), from one read of the file."""
    path = resolve_profile_path(name_or_path)
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise BenchError(f"{path}: not valid TOML ({exc})") from exc
    return parse_profile_variants(data, str(path))


def parse_profile(data: dict, platform: str, source: str) -> Profile:
    return _variant(parse_profile_variants(data, source), platform)


def parse_profile_variants(data: dict, source: str) -> dict[str, Profile]:
    """Validate the base and every [when.*] variant (so errors show up whatever the machine), one per platform."""
    when = data.get(PLATFORM_TABLE, {})
    if not isinstance(when, dict) or set(when) - set(PLATFORMS):
        raise BenchError(f"{source}: [{PLATFORM_TABLE}] may only hold tables 'cpu' and 'gpu'")
    base = {k: v for k, v in data.items() if k != PLATFORM_TABLE}
    return {
        variant: _validate(_merge(base, when.get(variant, {})), source, variant if variant in when else None)
        for variant in PLATFORMS
    }


def _variant(variants: dict[str, Profile], platform: str) -> Profile:
    if platform not in variants:
        raise BenchError(f"unknown platform {platform!r}; profiles have variants for {', '.join(variants)}")
    return variants[platform]


def _validate(data: dict, source: str, variant: str | None) -> Profile:
    try:
        profile = Profile(**data, source=source)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "(top level)"
        if variant:
            where = f"{where} (with [{PLATFORM_TABLE}.{variant}])"
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = f"unknown key; allowed here: {', '.join(_allowed_keys(err['loc']))}"
        elif err["type"] == "literal_error":
            msg = f"{msg} (got {err.get('input')!r})"
        more = f" (+{exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise BenchError(f"{source}: {where}: {msg}{more}") from None
    except TypeError as exc:
        raise BenchError(f"{source}: {exc}") from None
    for wid, table in profile.workloads.items():
        if table.dataset is not None:  # the source table checked now, with bench.workloads' messages
            parse_source(table.dataset, f"{source}: workloads.{wid}.dataset")
    return profile


def _allowed_keys(loc: tuple) -> list[str]:
    """The keys allowed where an unknown one was found: walk the models along the error's location, stepping
    over list indices and dict keys (a workload's id)."""
    model: type[BaseModel] = Profile
    container = False  # the previous step was a list or dict of models
    for part in loc[:-1]:
        field = model.model_fields.get(str(part))
        if field is None:
            if container:
                continue
            break
        found = _model_in(field.annotation)
        if found is None:
            break
        model, container = found, getattr(field.annotation, "__args__", None) is not None
    return sorted(k for k in model.model_fields if k != "source")


def _model_in(ann) -> type[BaseModel] | None:
    """The pydantic model inside an annotation (itself, or inside list[...], dict[..., ...], X | None)."""
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return ann
    for arg in getattr(ann, "__args__", ()):
        found = _model_in(arg)
        if found is not None:
            return found
    return None
