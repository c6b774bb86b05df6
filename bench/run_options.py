"""A profile's `[run]` table: how every point is measured (prompts, seeds, timeouts, trials) and the three
measures against noise at its source (bench.affinity: CPU affinity; bench.waves: a warm-up until throughput is
steady and a measured window of a least a given length). None of these keys is part of a point's id: they change
how a point is measured, not what it is.

Kept apart from bench/profile.py so that the profile module stays one screenful of models per table.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from bench.affinity import parse_cpu_list


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CpuSets(_Strict):
    """Explicit cores (lists like "2-7" or "0,2-3") for the server's whole process group and for the client
    (the load generator in the driver process); they must not overlap."""

    server: str
    client: str

    @field_validator("server", "client")
    @classmethod
    def _core_list(cls, v: str) -> str:
        parse_cpu_list(v)  # raises ValueError on bad syntax (an empty list is bad syntax)
        return v

    @model_validator(mode="after")
    def _disjoint(self):
        both = set(parse_cpu_list(self.server)) & set(parse_cpu_list(self.client))
        if both:
            raise ValueError(f"server and client cores must not overlap (both: {sorted(both)})")
        return self


class Run(_Strict):
    num_prompts: int = Field(default=16, ge=1)  # measured requests per shape (at least the concurrency)
    warmup_prompts: int = Field(default=2, ge=0)
    seed: int = 0
    startup_timeout_s: float = Field(default=600, gt=0)
    stall_timeout_s: float = Field(default=120, gt=0)  # no streamed token for this long = hang
    request_timeout_s: float = Field(default=600, gt=0)
    repeat: int = Field(default=1, ge=1)  # trials per point on the same server (not part of the point id)
    # "off": as the OS schedules; "split": the client on the first cores (1 per 8), the server on the rest;
    # or a table { server = "2-15", client = "0-1" }
    cpu_affinity: Literal["off", "split"] | CpuSets = "off"
    # Warm-up waves (warmup_prompts each) until the output tok/s of two successive waves agree within this
    # relative tolerance, at most warmup_max_waves; None: one warm-up wave, as before
    warmup_steady: float | None = Field(default=None, gt=0, lt=1)
    warmup_max_waves: int = Field(default=5, ge=2)
    # A trial's measured window lasts at least this long: waves of fresh prompts of the point's size until it
    # does (0: one wave, as before)
    min_window_s: float = Field(default=0, ge=0)

    @field_validator("cpu_affinity", mode="before")
    @classmethod
    def _affinity(cls, v):
        """One message that says what is wrong (a union would report both of its branches' complaints)."""
        if isinstance(v, dict):
            try:
                return CpuSets(**v)
            except ValidationError as exc:
                err = exc.errors()[0]
                raise ValueError(
                    f"{'.'.join(map(str, err['loc'])) or 'table'}: {err['msg'].removeprefix('Value error, ')}"
                ) from None
        if v not in ("off", "split"):
            raise ValueError(
                f"cpu_affinity is 'off', 'split' or a table {{ server = CORES, client = CORES }}, not {v!r}"
            )
        return v

    @property
    def in_waves(self) -> bool:
        """Whether a trial's load goes in waves that depend on what earlier waves measured."""
        return self.warmup_steady is not None or self.min_window_s > 0


def check_random_only(run: Run, text_workloads: list[str], no_warmup: list[str]) -> None:
    """The wave measures apply to random token-id workloads: a text workload's requests differ in length from
    wave to wave, so the throughputs of two waves are not comparable. A steady warm-up needs warm-up prompts."""
    if run.in_waves and text_workloads:
        raise ValueError(
            f"run.warmup_steady / run.min_window_s apply to random token-id workloads, not to the text "
            f"workloads {text_workloads} (their waves would differ in length)"
        )
    if run.warmup_steady is not None and no_warmup:
        raise ValueError(
            f"run.warmup_steady needs warmup_prompts >= 1 (a warm-up wave to measure); workloads {no_warmup} have none"
        )
