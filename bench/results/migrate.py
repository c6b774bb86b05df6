"""`bench migrate DIR`: upgrade a results directory written by an older bench to the schema this one reads
(bench.results.store.SCHEMA_VERSION), in place, one version step at a time, each step a function here. Measurements are
never recomputed (that is `bench report --recompute`): a step only makes explicit what the older bench left
implicit, or adds a view it did not store, from the directory's own files. Idempotent: a current directory is left
as it is. After the steps every record is read against its model (bench.results.records), so a record no step could make
valid is named with its file and field, here and not later in a report.

Schema 2 (this bench): every measured point record says which window its headline is (`metrics.window`; before
the steady window every headline was the whole window), has the whole window's figures under `metrics.whole`, and
every ok one has `cache`, `contamination` and `flags` (empty when the bench did not look). What the step changed
is listed in the manifest's `migrations`. A report rebuilt from a migrated directory is the one the older bench
built (tests/unit/test_migrate.py).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path

from bench.core.clock import now
from bench.core.errors import BenchError
from bench.core.files import atomic_write_json
from bench.results.store import MANIFEST, SCHEMA_VERSION, SweepStore


def _point_v1_to_v2(record: dict) -> list[str]:
    """What changes in one point record (names of the keys set)."""
    done = []
    metrics = record.get("metrics")
    if isinstance(metrics, dict) and metrics:
        if "window" not in metrics:
            metrics["window"] = "whole"
            done.append("metrics.window")
        if "whole" not in metrics and metrics["window"] == "whole":
            metrics["whole"] = {k: copy.deepcopy(v) for k, v in metrics.items() if k not in ("window", "whole")}
            done.append("metrics.whole")
        for trial in record.get("trials") or []:
            tm = trial.get("metrics")
            if isinstance(tm, dict) and tm and "window" not in tm:
                tm["window"] = "whole"
    for key, empty in (("cache", {}), ("contamination", []), ("flags", [])):
        if record.get("status") == "ok" and key not in record:
            record[key] = empty
            done.append(key)
    return done


def _read_object(path: Path) -> dict:
    """A record file as a JSON object, or a BenchError naming it (a migration reads every file before it writes
    one, so an unreadable record leaves the directory as it was)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BenchError(f"{path}: not a readable record ({exc}); nothing was migrated") from None
    if not isinstance(data, dict):
        raise BenchError(f"{path}: a record is a JSON object, got {type(data).__name__}; nothing was migrated")
    return data


def _v1_to_v2(store: SweepStore) -> dict[str, int]:
    counts: dict[str, int] = {}
    records = [(path, _read_object(path)) for path in sorted((store.root / "points").glob("*.json"))]
    for path, record in records:
        for key in _point_v1_to_v2(record):
            counts[key] = counts.get(key, 0) + 1
        record["schema_version"] = 2
        atomic_write_json(path, record)
    return counts


STEPS: dict[int, Callable[[SweepStore], dict[str, int]]] = {1: _v1_to_v2}  # from version -> the step to the next


def migrate(root: Path) -> list[dict]:
    """Upgrade `root` to SCHEMA_VERSION; returns the steps taken ([] when already current)."""
    root = Path(root)
    path = root / MANIFEST
    if not path.exists():
        raise BenchError(f"{root}: not a results directory (no {MANIFEST})")
    manifest = _read_object(path)
    version = manifest.get("schema_version")
    if not isinstance(version, int) or version > SCHEMA_VERSION or (version < SCHEMA_VERSION and version not in STEPS):
        raise BenchError(f"{root}: schema version {version!r}: this bench migrates 1..{SCHEMA_VERSION}")
    store = SweepStore(root)
    taken = []
    while version < SCHEMA_VERSION:
        changed = STEPS[version](store)
        taken.append({"from": version, "to": version + 1, "at": now(), "changed": changed})
        version += 1
        manifest = {**manifest, "schema_version": version}
        manifest["migrations"] = [*(manifest.get("migrations") or []), taken[-1]]
        atomic_write_json(path, manifest)
    (
        store.manifest(),
        store.records(),
    )  # the upgraded records against their models (bench.results.records): file and field
    return taken
