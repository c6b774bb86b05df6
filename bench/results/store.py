"""The results directory of one sweep: a manifest, one versioned record per point, raw per-request Parquet, server
logs. Every write is atomic (temp + rename), so killing the sweep at any moment leaves a loadable directory."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from bench.core.errors import BenchError
from bench.core.files import atomic_write_bytes, atomic_write_json
from bench.results.records import SCHEMA_VERSION, Manifest, OutputsRecord, PointRecord, dump_point, parse

__all__ = ["MANIFEST", "RAW_SCHEMA", "SCHEMA_VERSION", "SweepStore", "check_version"]

MANIFEST = "manifest.json"


class SweepStore:
    def __init__(self, root: Path):
        self.root = Path(root)

    # layout
    def point_path(self, point_id: str) -> Path:
        return self.root / "points" / f"{point_id}.json"

    def raw_path(self, point_id: str) -> Path:
        return self.root / "raw" / f"{point_id}.parquet"

    def log_path(self, engine_id: str) -> Path:
        return self.root / "logs" / f"server-{engine_id}.log"

    def outputs_path(self, engine_id: str) -> Path:
        return self.root / "outputs" / f"{engine_id}.json"

    # writes: a record that does not match its model (bench.results.records) is a bug here, refused before it is written
    def write_manifest(self, manifest: dict) -> None:
        data = {"schema_version": SCHEMA_VERSION, **manifest}
        parse(Manifest, data, self.root / MANIFEST)
        atomic_write_json(self.root / MANIFEST, data)

    def save_point(self, record: PointRecord) -> None:
        """Write `record` (bench.results.records.new_point makes one from a dict) as dump_point gives it. Checked
        again first: an attribute assigned after the record was made (bench.measure.recompute) is not validated."""
        if not isinstance(record, PointRecord):
            raise TypeError(
                f"save_point takes a PointRecord (bench.results.records.new_point), not {type(record).__name__}"
            )
        path = self.point_path(record.point_id)
        if record.schema_version != SCHEMA_VERSION:
            raise BenchError(f"{path}: this bench writes schema version {SCHEMA_VERSION}, not {record.schema_version}")
        data = dump_point(record)
        parse(PointRecord, data, path)
        atomic_write_json(path, data)

    def save_outputs(self, record: OutputsRecord) -> None:
        """The greedy outputs of an engine's latest server start (sweep --check-outputs; a later start replaces them),
        one prompt's token ids a line."""
        data = record.model_dump(mode="json")
        outputs = data.pop("outputs")
        head = json.dumps(data, indent=2, sort_keys=True)[: -len("\n}")]
        lines = ",\n".join("    " + json.dumps(ids, separators=(",", ":")) for ids in outputs)
        text = f'{head},\n  "outputs": [\n{lines}\n  ]\n}}\n' if outputs else f'{head},\n  "outputs": []\n}}\n'
        atomic_write_bytes(self.outputs_path(record.engine_id), text.encode())

    def save_raw(self, point_id: str, rows: list[dict]) -> None:
        table = pa.Table.from_pylist(rows, schema=RAW_SCHEMA)
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink)
        atomic_write_bytes(self.raw_path(point_id), sink.getvalue().to_pybytes())

    # reads: the one reader of point records and manifests; each is checked against its model (bench.results.records)
    def manifest(self) -> dict:
        path = self.root / MANIFEST
        if not path.exists():
            raise BenchError(f"{self.root}: not a sweep results directory (no {MANIFEST})")
        data = check_version(_read_json(path), path)
        parse(Manifest, data, path)
        return data

    @staticmethod
    def _read_point(path: Path) -> PointRecord:
        return parse(PointRecord, check_version(_read_json(path), path), path)

    def point(self, point_id: str) -> PointRecord | None:
        """One point's record (version-checked, validated); None when it has none yet."""
        path = self.point_path(point_id)
        return self._read_point(path) if path.exists() else None

    def records(self) -> dict[str, PointRecord]:
        """{point id: record} (version-checked, validated), in point-id order: the one reader of point records."""
        records = [self._read_point(path) for path in sorted((self.root / "points").glob("*.json"))]
        return {record.point_id: record for record in records}

    def outputs(self) -> dict[str, OutputsRecord]:
        """{engine id: the greedy outputs of its latest server start}; {} when the sweep ran without --check-outputs."""
        found = sorted((self.root / "outputs").glob("*.json"))
        return {r.engine_id: r for r in (parse(OutputsRecord, _read_json(p), p) for p in found)}

    def raw(self, point_id: str) -> list[dict]:
        path = self.raw_path(point_id)
        return pq.read_table(path).to_pylist() if path.exists() else []


RAW_SCHEMA = pa.schema(
    [
        ("index", pa.int64()),
        ("phase", pa.string()),
        ("prompt_len", pa.int64()),
        ("max_tokens", pa.int64()),
        ("send_time", pa.float64()),
        ("end_time", pa.float64()),
        ("chunk_times", pa.list_(pa.float64())),
        ("chunk_tokens", pa.list_(pa.int64())),
        ("prompt_tokens", pa.int64()),
        ("output_tokens", pa.int64()),
        ("status", pa.string()),
        ("error", pa.string()),
        ("trial", pa.int64()),
        # workloads (bench.load.loadgen.RequestRecord): absent from results written before them
        ("workload", pa.string()),
        ("category", pa.string()),
        ("conversation", pa.string()),
        ("turn", pa.int64()),
        ("window", pa.string()),
        ("due_s", pa.float64()),
        ("arrival_time", pa.float64()),
        ("start_time", pa.float64()),
        ("finish_reason", pa.string()),
        ("spec_steps", pa.int64()),
        ("spec_draft_tokens", pa.int64()),
        ("spec_accepted_tokens", pa.int64()),
        ("spec_histogram", pa.list_(pa.int64())),
        ("slot", pa.int64()),  # the closed loop's worker (from 2026-12-05)
    ]
)


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except ValueError as exc:
        raise BenchError(
            f"{path}: not JSON ({exc}); a record is written atomically, so this file was edited or copied in part"
        ) from None
    if not isinstance(data, dict):
        raise BenchError(f"{path}: not a record (a JSON object)")
    return data


def check_version(data: dict, path: Path) -> dict:
    version = data.get("schema_version")
    if isinstance(version, int) and version < SCHEMA_VERSION:
        raise BenchError(
            f"{path}: results schema version {version}, this bench reads {SCHEMA_VERSION}: upgrade the directory with "
            "`bench migrate DIR` (in place; measurements are kept as they are)"
        )
    if version != SCHEMA_VERSION:
        raise BenchError(
            f"{path}: results schema version {version!r}, this bench reads {SCHEMA_VERSION}; "
            f"use the bench version that wrote it, or re-run the sweep"
        )
    return data
