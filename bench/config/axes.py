"""Server axes: sweep axes that land as `vllm serve` flags, declared once here. Everything else derives from the
declaration: the profile accepts the axis under `[axes]` and checks its values, the plan crosses it with the other
axes and hashes it into the engine id (and so the point ids), the launch passes it as a flag, the dry run and the
engine label name it, the report gives it a column and matches speedup baselines on it, `bench compare` keys on it
(through the point id), and `bench load --url` records it (of the server's settings it can read back, it checks
max_model_len, from /v1/models; the others are the user's word).

Any other `vllm serve` flag can be swept without a declaration, under `[axes.server]` (vLLM's own name, with
underscores, values as TOML values): it gets the same treatment; its values are checked for their type here and,
before a sweep starts any server, by the installed vLLM's own argument parser (bench.engine.launch.refused_commands).

The built-in axes (draft attention backend, draft KV dtype, DCP size, k, shapes, emulated DCP) have semantics of
their own (k = 0 is the baseline, DCP is a parallel size, shapes make the load) and live in bench/config/profile.py.

To add one: a `ServerAxis` in AXES, a test (tests/unit/test_axes.py), a line in docs/cli.md's profile section
(docs/architecture.md "How to ...").
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

FLAG_RE = re.compile(r"^[a-z][a-z0-9_]*$")


def _positive(v: Any) -> str | None:
    return None if v >= 1 else "values must be >= 1"


@dataclass(frozen=True)
class ServerAxis:
    """One `vllm serve` flag as a sweep axis.

    name: the [axes] key and the flag (`--name-with-dashes`); kind: the value type (int, float, str or bool);
    short: how the engine label names it (`short=value`); column: the report's column header; check: None when
    a value is fine, else why not."""

    name: str
    kind: type
    short: str
    column: str
    check: Callable[[Any], str | None] | None = None


AXES: dict[str, ServerAxis] = {
    a.name: a
    for a in (
        # tokens one engine step may schedule, prefill chunks and decode together
        ServerAxis("max_num_batched_tokens", int, "mbt", "max batched tokens", _positive),
        # requests one engine step may hold (vLLM's parser takes 0; the engine then fails at start)
        ServerAxis("max_num_seqs", int, "mns", "max num seqs", _positive),
    )
}


def axis(name: str) -> ServerAxis:
    """The declared axis, or an undeclared `[axes.server]` flag (typed by its values, labelled by its name)."""
    return AXES.get(name) or ServerAxis(name, object, name, name)


def check_values(name: str, values: Sequence[Any]) -> list[Any]:
    """The values of a server axis, checked: a non-empty list of distinct values of the declared kind that pass
    its check. Raises ValueError with the reason."""
    if not FLAG_RE.match(name):
        raise ValueError(f"axes.server: {name!r} is not a vllm serve flag name (lower case, underscores)")
    if not isinstance(values, list) or not values:
        raise ValueError(f"axes.{name}: a list of at least one value")
    if len({repr(v) for v in values}) != len(values):
        raise ValueError(f"axes.{name}: values must be distinct")
    spec = axis(name)
    out = []
    for v in values:
        if spec.kind is not object and not (type(v) is spec.kind or (spec.kind is float and type(v) is int)):
            raise ValueError(f"axes.{name}: {v!r} is not {spec.kind.__name__}")
        if spec.kind is object and not isinstance(v, (int, float, str, bool)):
            raise ValueError(f"axes.server.{name}: {v!r} is not a number, string or boolean")
        if spec.check and (why := spec.check(v)):
            raise ValueError(f"axes.{name}: {v!r}: {why}")
        out.append(v)
    return out


def label(values: Sequence[tuple[str, Any]]) -> str:
    """The engine label's part for these (name, value) pairs: `mbt=2048 enable_prefix_caching=False`."""
    return " ".join(f"{axis(k).short}={v}" for k, v in values)


def header(name: str) -> str:
    return axis(name).column
