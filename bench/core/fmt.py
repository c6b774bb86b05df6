"""The one number formatter of the suite's text outputs (summary.md, report.html, compare.md, sweep progress).

The rules (docs/report-format.md): a number shows at most SIGNIFICANT (4) significant digits: a fixed-point or
percent spec's decimals shrink as the integer part grows (",.2f": 185.39 -> "185.4", 1,399.21 -> "1,399"), a
float without a spec prints the same way with trailing zeros dropped, and a number of 10,000 or more prints whole
(thousands separated); never e-notation. Integers print whole. Bytes and bytes per second in decimal units
("4.80 TB/s"). A missing value (None, NaN, pandas NA/NaT) prints as `missing` ("-" by default: each output keeps
its own marker), never as 0 or "nan"; a figure whose record states no precision has NO_PRECISION in its "+-"
cell.
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Iterable, Sequence

import pandas as pd

BYTE_UNITS = ("B", "KB", "MB", "GB", "TB")
SIGNIFICANT = 4  # the most significant digits a formatted number shows
NO_PRECISION = "n/a"  # the "+-" of a figure whose record states no precision (too short a window, or none)
_FIXED = re.compile(r"^(?P<head>[^.]*)\.(?P<decimals>\d+)(?P<kind>[f%])$")


def is_missing(value: object) -> bool:
    if value is None or value is pd.NA or value is pd.NaT:
        return True
    return isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral) and math.isnan(value)


def fmt(value: object, spec: str | None = None, *, missing: str = "-") -> str:
    """One value as text. `spec`: a format spec (",.1f", ".3%", ".4g"; fixed-point and percent capped at SIGNIFICANT
    digits) for numbers, or "bytes" / "bytes/s" (decimal units, human_bytes); without one an integer prints as
    str() does and a float as `plain`. A list or tuple is its items joined by "/", a dict
    its "key=value" pairs; bools and strings print as they are."""
    if isinstance(value, (list, tuple)):
        return "/".join(fmt(x, spec, missing=missing) for x in value) if value else missing
    if isinstance(value, dict):
        return ", ".join(f"{k}={x}" for k, x in value.items()) or missing
    if is_missing(value):
        return missing
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        if spec == "bytes":
            return human_bytes(float(value))
        if spec == "bytes/s":
            return human_bytes(float(value)) + "/s"
        if spec:
            return capped(int(value) if isinstance(value, numbers.Integral) else float(value), spec)
        if not isinstance(value, numbers.Integral):
            return plain(float(value))
    return str(value)


def capped(value: float, spec: str) -> str:
    """`value` formatted with `spec`, a fixed-point or percent spec's decimals reduced so that at most SIGNIFICANT
    digits show (the integer part always whole); other specs as they are."""
    m = _FIXED.match(spec)
    if m is None:
        return format(value, spec)
    head, kind = m["head"], m["kind"]
    for decimals in range(int(m["decimals"]), -1, -1):
        text = format(value, f"{head}.{decimals}{kind}")
        if decimals == 0 or len(re.sub(r"\D", "", text).lstrip("0")) <= SIGNIFICANT:
            return text
    raise AssertionError("unreachable: zero decimals always returns")


def plain(value: float) -> str:
    """A float without a spec: at most SIGNIFICANT significant digits before the point's trailing zeros drop
    ("0.435", "2.305", "1,399", "12,346")."""
    small = value != 0 and abs(value) < 1  # as many decimals as its SIGNIFICANT digits need, up to 12
    decimals = min(12, SIGNIFICANT - 1 - math.floor(math.log10(abs(value)))) if small else SIGNIFICANT
    text = capped(value, f",.{decimals}f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def human_bytes(n: float) -> str:
    """Decimal units (1 KB = 1000 B): bytes whole, larger units with up to two decimals (SIGNIFICANT digits)."""
    for unit in BYTE_UNITS:
        if abs(n) < 1000 or unit == BYTE_UNITS[-1]:
            return f"{n:,.0f} {unit}" if unit == "B" else f"{capped(n, ',.2f')} {unit}"
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
