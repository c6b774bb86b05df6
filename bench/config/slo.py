"""Service-level targets for goodput: the profile's `[report] slo` table (`slo = {ttft = "2s", tpot = "50ms"}`) or
`bench report --slo ttft=2s,tpot=50ms`, the CLI's overriding the profile's.

The targets are per request, with the meaning of `vllm bench serve --goodput`: a request is good when every target
given holds for it (TTFT, TPOT, end-to-end latency at most the target). A duration is written with a unit (`2s`,
`50ms`) or as a bare number of milliseconds (vLLM's `--goodput ttft:2000`). bench.report.goodput counts the good
requests of a point; this module only declares and parses the targets (configuration: it imports nothing of
running or reporting).
"""

from __future__ import annotations

import re

from pydantic import field_validator, model_validator

from bench.core.errors import BenchError
from bench.core.schema import Strict

#: target -> what it bounds (per request, as bench.measure.metrics.request_latencies measures it)
TARGETS = {
    "ttft": "time to first token",
    "tpot": "time per output token after the first",
    "e2el": "end-to-end latency",
}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s)?\s*$")


def duration_ms(value: object) -> float:
    """ "2s" -> 2000.0, "50ms" -> 50.0, 50 -> 50.0 (a bare number is milliseconds); ValueError otherwise."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a duration")
    if isinstance(value, (int, float)):
        ms = float(value)
    else:
        found = _DURATION.match(str(value))
        if not found:
            raise ValueError(f"{value!r} is not a duration (write e.g. '2s', '50ms' or a number of milliseconds)")
        ms = float(found.group(1)) * (1000.0 if found.group(2) == "s" else 1.0)
    if not ms > 0:
        raise ValueError(f"{value!r}: a target is a positive duration")
    return ms


class Slo(Strict):
    """Per-request targets in milliseconds; None: no target on that figure. At least one is given."""

    ttft: float | None = None
    tpot: float | None = None
    e2el: float | None = None

    @field_validator("ttft", "tpot", "e2el", mode="before")
    @classmethod
    def _duration(cls, v):
        return None if v is None else duration_ms(v)

    @model_validator(mode="after")
    def _some_target(self) -> Slo:
        if not self.targets():
            raise ValueError(f"an SLO names at least one target of {', '.join(TARGETS)}")
        return self

    def targets(self) -> dict[str, float]:
        """{target: milliseconds} of the targets given, in TARGETS order."""
        return {k: getattr(self, k) for k in TARGETS if getattr(self, k) is not None}

    @property
    def label(self) -> str:
        """ "TTFT <= 2 s, TPOT <= 50 ms"."""
        return ", ".join(f"{k.upper()} <= {_show(ms)}" for k, ms in self.targets().items())


def _show(ms: float) -> str:
    return f"{ms / 1000:g} s" if ms >= 1000 else f"{ms:g} ms"


def parse_slo(text: str) -> Slo:
    """`ttft=2s,tpot=50ms` (`:` also separates, as in vLLM's `--goodput ttft:2000`) -> Slo; BenchError naming the
    bad part otherwise."""
    values: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.replace(":", "=", 1).partition("=")
        key = key.strip().lower()
        if not sep or key not in TARGETS:
            raise BenchError(f"--slo {text!r}: {part!r} is not TARGET=DURATION with TARGET one of {', '.join(TARGETS)}")
        if key in values:
            raise BenchError(f"--slo {text!r}: {key} is given twice")
        values[key] = value.strip()
    try:
        return Slo(**values)  # type: ignore[arg-type]  # the validator turns each text into milliseconds
    except ValueError as exc:
        raise BenchError(f"--slo {text!r}: {_first_error(exc)}") from None


def _first_error(exc: ValueError) -> str:
    errors = getattr(exc, "errors", None)
    if callable(errors):
        first = errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        return f"{where}: {first['msg']}" if where else first["msg"]
    return str(exc)
