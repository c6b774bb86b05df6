"""The typed records (bench.results.records) as the one reader and writer of point records and manifests (bench.results.store)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bench.core.errors import BenchError
from bench.report.tables import points_table
from bench.results.records import PointRecord
from bench.results.store import SweepStore

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture
def results(tmp_path) -> Path:
    """A copy of a trimmed real results directory of tests/data (schema 2, ok and failed points)."""
    return Path(shutil.copytree(DATA / "results" / "tiny-gpu-h200", tmp_path / "results"))


def _first(store: SweepStore, status: str = "ok") -> tuple[Path, dict]:
    for pid, record in store.points().items():
        if record["status"] == status:
            return store.point_path(pid), record
    raise AssertionError(f"no {status} point in the fixture")


def test_every_record_of_the_fixture_reads_typed_and_as_stored(results):
    store = SweepStore(results)
    stored, typed = store.points(), store.records()
    assert stored and stored.keys() == typed.keys()
    for pid, record in typed.items():
        assert isinstance(record, PointRecord)
        assert stored[pid] == json.loads(store.point_path(pid).read_text()), "points() hands out the file as it is"
        if record.status == "ok":
            assert (
                record.metrics is not None
                and record.metrics.output_throughput == stored[pid]["metrics"]["output_throughput"]
            )


@pytest.mark.parametrize(
    "change, named",
    [
        (lambda r: r["metrics"].__setitem__("output_throughput", "fast"), "metrics.output_throughput"),
        (lambda r: r.pop("metrics"), "an ok point has metrics"),
        (lambda r: r.__setitem__("status", "done"), "status"),
        (lambda r: r["metrics"].__setitem__("window", "steady-ish"), "metrics.window"),
        (lambda r: r["config"].pop("engine"), "config.engine"),
    ],
)
def test_a_record_that_does_not_match_is_refused_with_file_and_field(results, change, named):
    store = SweepStore(results)
    path, record = _first(store)
    change(record)
    path.write_text(json.dumps(record))
    with pytest.raises(BenchError) as err:
        store.points()
    assert str(path) in str(err.value) and named in str(err.value)
    with pytest.raises(BenchError, match="PointRecord"):
        points_table(results)


def test_save_point_refuses_an_invalid_record_and_writes_nothing(results):
    store = SweepStore(results)
    _, record = _first(store)
    bad = {**record, "point_id": "new-point", "status": "failed", "reason": None}
    with pytest.raises(BenchError, match="a failed point says why"):
        store.save_point(bad)
    assert not store.point_path("new-point").exists()
    store.save_point({**bad, "reason": "engine-dead"})
    assert store.records()["new-point"].reason == "engine-dead"


def test_fields_the_models_do_not_declare_are_kept(results):
    store = SweepStore(results)
    _, record = _first(store)
    record["added_afterwards"] = {"by": "an example's provenance note"}
    store.save_point(record)
    assert store.points()[record["point_id"]]["added_afterwards"] == {"by": "an example's provenance note"}
    assert store.records()[record["point_id"]].model_extra["added_afterwards"]["by"].startswith("an example")


def test_broken_json_is_named(results):
    store = SweepStore(results)
    path, _ = _first(store)
    path.write_text('{"point_id": ')
    with pytest.raises(BenchError, match=r"not JSON .*edited or copied in part"):
        store.records()


def test_one_point_reads_through_the_same_checks_and_none_is_no_record(results):
    """SweepStore.point: the one-record read (the Ray driver's --rerun-failed skip, the benchmark scripts) checks
    the schema version and the model as points() does; a point with no record yet is None."""
    store = SweepStore(results)
    path, record = _first(store, "failed")
    got = store.point(path.stem)
    assert got is not None
    stored, typed = got
    assert stored == record and typed.status == "failed"
    assert store.point("0" * 12) is None
    path.write_text(json.dumps({**record, "schema_version": 1}))
    with pytest.raises(BenchError, match="bench migrate"):
        store.point(path.stem)
