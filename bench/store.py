"""The results directory of one sweep: a manifest, one versioned record per point, raw per-request Parquet, server
logs. Every write is atomic (temp + rename), so killing the sweep at any moment leaves a loadable directory."""

from __future__ import annotations

import io
import json
import os
import tempfile
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from bench.errors import BenchError

SCHEMA_VERSION = 2  # what changed from 1: bench/migrate.py
MANIFEST = "manifest.json"


def atomic_write_bytes(path: Path, data: bytes, *, mode: int = 0o644) -> None:
    """The suite's one file writer: a temp file in the same folder, fsync, rename over `path`; the temp file is
    removed on any failure, so a reader sees the old content or the new one, never a part. `mode`: the new
    file's permissions (mkstemp's 0600 would hide results from everyone else who reads the folder)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_json(path: Path, data: object) -> None:
    atomic_write_bytes(path, (json.dumps(data, indent=2, sort_keys=True, default=str) + "\n").encode())


def atomic_write_table(path: Path, df: pd.DataFrame) -> None:
    """A DataFrame as Parquet or CSV (by the suffix), through the one writer."""
    if path.suffix == ".csv":
        atomic_write_bytes(path, df.to_csv(index=False).encode())
        return
    buf = io.BytesIO()
    df.to_parquet(buf, index=False)
    atomic_write_bytes(path, buf.getvalue())


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

    # writes
    def write_manifest(self, manifest: dict) -> None:
        atomic_write_json(self.root / MANIFEST, {"schema_version": SCHEMA_VERSION, **manifest})

    def save_point(self, record: dict) -> None:
        atomic_write_json(self.point_path(record["point_id"]), {"schema_version": SCHEMA_VERSION, **record})

    def save_raw(self, point_id: str, rows: list[dict]) -> None:
        table = pa.Table.from_pylist(rows, schema=RAW_SCHEMA)
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink)
        atomic_write_bytes(self.raw_path(point_id), sink.getvalue().to_pybytes())

    # reads
    def manifest(self) -> dict:
        path = self.root / MANIFEST
        if not path.exists():
            raise BenchError(f"{self.root}: not a sweep results directory (no {MANIFEST})")
        return check_version(json.loads(path.read_text()), path)

    def points(self) -> dict[str, dict]:
        out = {}
        for path in sorted((self.root / "points").glob("*.json")):
            record = check_version(json.loads(path.read_text()), path)
            out[record["point_id"]] = record
        return out

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
        # workloads (bench.loadgen.RequestRecord): absent from results written before them
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
    ]
)


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
