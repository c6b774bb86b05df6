"""The one timestamp of records, manifests and calibrations: UTC, to the second, ISO 8601."""

from __future__ import annotations

import datetime as dt


def now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
