"""The one number formatter of the suite's text outputs (summary.md, report.html, compare.md, sweep progress).

A missing value (None, NaN, pandas NA/NaT) prints as `missing` ("-" by default: each output keeps its own
marker), never as 0 or "nan".
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Sequence

import pandas as pd

BYTE_UNITS = ("B", "KB", "MB", "GB", "TB")


def is_missing(value: object) -> bool:
    if value is None or value is pd.NA or value is pd.NaT:
        return True
    return isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral) and math.isnan(value)


def fmt(value: object, spec: str | None = None, *, missing: str = "-") -> str:
    """One value as text. `spec`: a format spec (",.1f", ".3%", ".4g") for numbers, or "bytes" (decimal units,
    human_bytes); without one a number prints as str() does. A list or tuple is its items joined by "/", a dict
    its "key=value" pairs; bools and strings print as they are."""
    if isinstance(value, (list, tuple)):
        return "/".join(fmt(x, spec, missing=missing) for x in value) if value else missing
    if isinstance(value, dict):
        return ", ".join(f"{k}={x}" for k, x in value.items()) or missing
    if is_missing(value):
        return missing
    if spec and isinstance(value, numbers.Real) and not isinstance(value, bool):
        return human_bytes(float(value)) if spec == "bytes" else format(value, spec)
    return str(value)


def human_bytes(n: float) -> str:
    """Decimal units (1 KB = 1000 B): bytes whole, larger units with two decimals."""
    for unit in BYTE_UNITS:
        if abs(n) < 1000 or unit == BYTE_UNITS[-1]:
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.2f} {unit}"
        n /= 1000
    raise AssertionError("unreachable: the last unit always returns")


def md_rows(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> list[str]:
    """The suite's one markdown table writer: header, separator and one line per row, cells already text (or
    printed with str()), as lines for the caller to join."""
    return [
        "| " + " | ".join(headers) + " |",
        "|" + "|".join("---" for _ in headers) + "|",
        *("| " + " | ".join(str(c) for c in row) + " |" for row in rows),
    ]
