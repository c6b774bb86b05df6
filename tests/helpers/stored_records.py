"""Point records as their files hold them, for tests that compare whole records or many nested fields: the typed
records the store reads (version-checked, validated), dumped as the store writes them (bench.results.records.dump_point).
bench/ and benchmarks/ read attributes instead (tests/unit/test_record_access.py)."""

from __future__ import annotations

from bench.results.records import dump_point
from bench.results.store import SweepStore


def stored_records(store: SweepStore) -> dict[str, dict]:
    """{point id: record as a dict}."""
    return {pid: dump_point(record) for pid, record in store.records().items()}
