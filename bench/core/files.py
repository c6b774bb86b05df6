"""The suite's one way to write a file: atomically (temp file in the same folder, fsync, rename), so a reader or a
crash sees the old content or the new one, never a part.

Its own module, importing nothing heavier than the standard library, because everything writes files: the patch
manager, the server's log, the model generator, `profile analyze`. Reaching these through `bench.results.store` cost each of
them the results store's imports (pandas, pyarrow, pydantic: 0.1 s of `profile analyze` alone).
"""

from __future__ import annotations

import io
import json
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd


def default_cache_dir() -> Path:
    """The suite's cache folder on this machine: $BENCH_CACHE_DIR, else $XDG_CACHE_HOME/bench, else ~/.cache/bench
    (the bandwidth and calibration measurements, vLLM's model-class inspections: bench.engine.server)."""
    if named := os.environ.get("BENCH_CACHE_DIR"):
        return Path(named)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "bench"


def atomic_write_bytes(path: Path, data: bytes, *, mode: int = 0o644) -> None:
    """Write `data` to `path` through a temp file in the same folder, fsync, rename over `path`; the temp file is
    removed on any failure. `mode`: the new file's permissions (mkstemp's 0600 would hide results from everyone
    else who reads the folder)."""
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
