"""A profile's `[run]` table: how every point is measured (prompts, seeds, timeouts, trials, the warm-up, the
closed-loop window and its precision target; docs/measurement.md). None of these keys is part of a point's id:
they change how a point is measured, not what it is.

Kept apart from bench/config/profile.py so that the profile module stays one screenful of models per table.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator
from pydantic.json_schema import JsonDict

from bench.core.schema import Strict

SALT_PATTERN = r"^[^/\s]+$"  # a prompt's name joins the salt to the point id, trial... with '/' (bench.load.prompts)

# Marks a key that changes what a point's figures measure, not only how long or how precisely: `bench compare`
# refuses to judge two sides measured with different values of one (unless --across-methods), since the difference
# would be the method's, not vLLM's. Keys without it (prompts, windows, seeds, timeouts) change the duration, the
# precision or the exact prompts of a measurement, whose expected value stays the same.
_DEFINES: JsonDict = {"defines_figures": True}


class Run(Strict):
    num_prompts: int = Field(default=16, ge=1)  # measured requests per shape (at least the concurrency)
    warmup_prompts: int = Field(default=2, ge=0)
    seed: int = 0
    startup_timeout_s: float = Field(default=600, gt=0)
    stall_timeout_s: float = Field(default=120, gt=0)  # no streamed token for this long = hang
    request_timeout_s: float = Field(default=600, gt=0)
    # blocks (trials) per point on the same server, each drained and restarted at its own random phase
    # (bench.run.trial.stagger_offsets); from 3 on, a point's precision takes the blocks as its units, so that it holds
    # the loop's phase (bench.measure.window.precision)
    repeat: int = Field(default=3, ge=1)
    # server starts: `bench sweep` measures every point on this many starts of its server (OUT/start-k, the engine
    # order reversed on every second), and starts.md says what they give together (bench.report.starts)
    starts: int = Field(default=1, ge=1)
    # How a point is measured (docs/measurement.md): a warm-up at the point's own shape, then a closed loop at the
    # point's concurrency whose steady window (all C in flight and decoding) gives the headline figures.
    # warm-up waves of C requests each (at least warmup_prompts)
    warmup_waves: int = Field(default=1, ge=0, json_schema_extra=_DEFINES)
    window_s: float = Field(default=0, ge=0)  # the measured closed loop sends for at least this long...
    # ...and at least num_prompts requests; then, with target_precision, until the steady throughput's 95%
    # confidence half-width (relative) is at most this, or max_window_s has passed
    target_precision: float | None = Field(default=None, gt=0, lt=1)
    max_window_s: float = Field(default=300, gt=0)
    # the measured loop's first C requests are sent spread over one request's lifetime (the warm-up's median
    # latency / C apart), not all at once: requests of equal length sent together stay in lockstep without a draft
    # (their prefills batched) and drift apart with one, which changes what the comparison measures
    stagger: bool = Field(default=True, json_schema_extra=_DEFINES)
    remeasure: int = Field(default=1, ge=0)  # a window with a compile, a preemption... inside is measured again
    # true: points of one input length share prompts (bench.load.prompts); else all fresh
    prompt_reuse: bool = Field(default=False, json_schema_extra=_DEFINES)
    # how a random-id prompt's token ids are drawn (bench.load.loadgen.make_prompt): "uniform", each id independently
    # (the suite's own); "consecutive", a run of consecutive allowed ids from a random start, the sequence that
    # `vllm bench serve --dataset-name random` builds before it decodes and re-encodes it (for comparing clients)
    prompt_ids: Literal["uniform", "consecutive"] = Field(default="uniform", json_schema_extra=_DEFINES)
    # reproduce a run's prompts: its manifest's prompt_salt (default: a new one; `sweep --prompt-salt` sets it too)
    prompt_salt: str | None = Field(default=None, pattern=SALT_PATTERN)

    @model_validator(mode="before")
    @classmethod
    def _removed(cls, data):
        """Keys that measured nothing (reports/examples/cpu-noise-sources: none shrank the spread between server
        starts) and were removed: say what replaced them."""
        removed = ("warmup_steady", "warmup_max_waves", "min_window_s", "cpu_affinity")
        gone = [k for k in removed if isinstance(data, dict) and k in data]
        if gone:
            raise ValueError(
                f"{', '.join(gone)}: removed (they did not reduce the noise they were for); the warm-up is "
                "warmup_waves full waves at the point's shape and the headline is the steady span of a closed loop "
                "(window_s, target_precision; docs/measurement.md)"
            )
        return data


def figure_keys() -> list[str]:
    """The `[run]` keys that change what a point's figures measure (marked with _DEFINES above)."""
    return [
        k
        for k, f in Run.model_fields.items()
        if isinstance(f.json_schema_extra, dict) and f.json_schema_extra.get("defines_figures")
    ]
