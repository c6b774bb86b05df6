"""Recompute the figures of a results directory from its raw records with the installed bench's metric code
(`bench report DIR --recompute`): each measured point's headline `metrics` and every trial's, from the point's
raw rows (bench.results.store), nothing else. What a record says about how the load ran (trials[].load), its counters,
cache, contamination and flags are measurements, not figures derived from the rows, and stay as they are. The
effective configuration is read again from the kept server log and engine records (a field the reader learned
since is filled in), and a failed point's reason is classified again from its kept server log (the recorded
one stays in `reason_recorded`).

Used when the method of deriving a figure changes (e.g. the precision's sub-windows), so that a committed example
and a new run are computed alike; the record says when and by which bench it was recomputed (`recomputed`).
"""

from __future__ import annotations

from pathlib import Path

from bench.core.clock import now
from bench.measure import metrics as M
from bench.measure.effective import load_records, mismatches, read_effective
from bench.measure.failures import classify_log
from bench.results.environment import suite_git
from bench.results.records import Effective, Metrics, PointRecord
from bench.results.store import SweepStore


def _concurrency(record: PointRecord) -> int | None:
    """C of a closed-loop point (from how its load ran), None for an open loop or a text workload without one."""
    for trial in record.trials:
        load = trial.load
        if load is not None and load.kind in ("closed-loop", "conversations") and load.concurrency:
            return int(load.concurrency)
    return None


def recompute(root: Path) -> list[str]:
    """Recompute every ok point that has raw rows; returns the ids of the points rewritten."""
    store = SweepStore(root)
    done = []
    for point_id, record in store.records().items():
        if record.status == "failed" and _reclassify(root, record):
            record.recomputed = {"at": now(), "suite_git": suite_git()}
            store.save_point(record)
            done.append(point_id)
            continue
        rows = store.raw(point_id)
        if record.status != "ok" or not rows:
            continue
        concurrency = _concurrency(record)
        record.metrics = Metrics.model_validate(M.summarize(rows, concurrency))
        for trial in record.trials:
            mine = [r for r in rows if r.get("trial") == trial.trial and r["phase"] == "measure"]
            trial.metrics = Metrics.model_validate(M.summarize(mine, concurrency))
        _reread_effective(root, record)
        record.recomputed = {"at": now(), "suite_git": suite_git()}
        store.save_point(record)
        done.append(point_id)
    return done


def _reread_effective(root: Path, record: PointRecord) -> None:
    """The effective configuration read again from the server log and engine records the results directory keeps
    (a reader that learned a field, e.g. the KV cache size, fills it in); left as it is without a log."""
    log = record.server.log
    if not log or not (Path(root) / log).is_file():
        return
    effective = read_effective((Path(root) / log).read_text(errors="replace"), [], load_records(root, record.engine_id))
    # what the record held and the log does not say (metrics-only fields): kept. bench.measure.effective's readers
    # take the effective configuration and the engine as the dicts the executor builds
    old = record.effective.model_dump(mode="json", exclude_unset=True) if record.effective else {}
    effective.update({k: v for k, v in old.items() if effective.get(k) is None and v is not None})
    # the executor's own flags (queueing, prefix-cache hits...) share `mismatch` with the effective configuration's
    # differences: keep those, and derive only the configuration's again (they were dropped before 2026-12-07)
    engine = record.config.engine.model_dump(mode="json", exclude_unset=True)
    before = mismatches(engine, old) if old else []
    flags = [m for m in record.mismatch if m not in before]
    derived = mismatches(engine, effective)
    record.effective = Effective.model_validate(effective)
    record.mismatch = derived + [m for m in flags if m not in derived]


def _reclassify(root: Path, record: PointRecord) -> bool:
    """A failed point's reason read again from its kept server log with the current signatures (bench.measure.failures);
    the reason it was recorded with stays in `reason_recorded`. True when the reason changed."""
    log = record.server.log
    if not log or not (Path(root) / log).is_file():
        return False
    found = classify_log((Path(root) / log).read_text(errors="replace"))
    if found is None or found[0] == record.reason:
        return False
    if "reason_recorded" not in record.model_fields_set:
        record.reason_recorded = record.reason
    record.reason, record.detail = found[0], found[1]
    return True
