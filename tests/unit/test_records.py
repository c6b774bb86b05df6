"""The typed records (bench.results.records) as the one reader and writer of point records and manifests (bench.results.store)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bench.core.errors import BenchError
from bench.report.tables import points_table
from bench.results.records import PointRecord, dump_point, new_point
from bench.results.store import SweepStore

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data"


@pytest.fixture
def results(tmp_path) -> Path:
    """A copy of a trimmed real results directory of tests/data (schema 2, ok and failed points)."""
    return Path(shutil.copytree(DATA / "results" / "tiny-gpu-h200", tmp_path / "results"))


def _first(store: SweepStore, status: str = "ok") -> tuple[Path, dict]:
    """A point's file and what it holds, as JSON (the tests below edit the file itself)."""
    for pid, record in store.records().items():
        if record.status == status:
            path = store.point_path(pid)
            return path, json.loads(path.read_text())
    raise AssertionError(f"no {status} point in the fixture")


def test_every_record_of_the_fixture_reads_typed_and_as_stored(results):
    store = SweepStore(results)
    typed = store.records()
    assert typed and all(isinstance(record, PointRecord) for record in typed.values())
    for pid, record in typed.items():
        stored = json.loads(store.point_path(pid).read_text())
        assert dump_point(record) == stored, "the record holds what the file holds, no more, no less"
        if record.status == "ok":
            assert (
                record.metrics is not None
                and record.metrics.output_throughput == stored["metrics"]["output_throughput"]
            )


def _committed_results() -> list[Path]:
    found = {p.parent.parent for base in (REPO / "reports" / "examples", DATA) for p in base.rglob("points/*.json")}
    return sorted(d for d in found if json.loads((d / "manifest.json").read_text()).get("schema_version") == 2)


def test_every_committed_record_survives_a_read_and_a_save(tmp_path):
    """Every point record under reports/examples and tests/data, read and saved again, holds the same data (extra
    fields included; a float field stored as an int, e.g. 17, is written back as 17.0, which compares equal)."""
    dirs = _committed_results()
    assert len(dirs) >= 30
    saved = 0
    for i, root in enumerate(dirs):
        out = SweepStore(tmp_path / str(i))
        for pid, record in SweepStore(root).records().items():
            out.save_point(record)
            before = json.loads(SweepStore(root).point_path(pid).read_text())
            assert json.loads(out.point_path(pid).read_text()) == before, f"{root}: {pid}"
            saved += 1
    assert saved >= 300


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
        store.records()
    assert str(path) in str(err.value) and named in str(err.value)
    with pytest.raises(BenchError, match="PointRecord"):
        points_table(results)


def test_new_point_refuses_an_invalid_record_and_save_point_checks_again(results):
    store = SweepStore(results)
    _, record = _first(store)
    del record["schema_version"]  # new_point adds it
    bad = {**record, "point_id": "new-point", "status": "failed", "reason": None}
    with pytest.raises(BenchError, match="point new-point: .*a failed point says why"):
        new_point(bad)
    made = new_point({**bad, "reason": "engine-dead"})
    made.reason = None  # an assignment is not validated: save_point checks the record again, and writes nothing
    with pytest.raises(BenchError, match="a failed point says why"):
        store.save_point(made)
    assert not store.point_path("new-point").exists()
    made.reason = "engine-dead"
    store.save_point(made)
    assert store.records()["new-point"].reason == "engine-dead"
    with pytest.raises(TypeError, match="PointRecord"):
        store.save_point({**record, "point_id": "new-point"})  # type: ignore[arg-type]


def test_fields_the_models_do_not_declare_are_kept(results):
    store = SweepStore(results)
    path, stored = _first(store)
    record = store.records()[path.stem]
    record.added_afterwards = {"by": "an example's provenance note"}  # type: ignore[attr-defined]
    store.save_point(record)
    assert json.loads(path.read_text()) == {**stored, "added_afterwards": {"by": "an example's provenance note"}}
    assert store.records()[path.stem].model_extra["added_afterwards"]["by"].startswith("an example")


def test_broken_json_is_named(results):
    store = SweepStore(results)
    path, _ = _first(store)
    path.write_text('{"point_id": ')
    with pytest.raises(BenchError, match=r"not JSON .*edited or copied in part"):
        store.records()


def test_one_point_reads_through_the_same_checks_and_none_is_no_record(results):
    """SweepStore.point: the one-record read (the Ray driver's --rerun-failed skip) checks the schema version and
    the model as records() does; a point with no record yet is None."""
    store = SweepStore(results)
    path, record = _first(store, "failed")
    got = store.point(path.stem)
    assert got is not None
    assert dump_point(got) == record and got.status == "failed"
    assert store.point("0" * 12) is None
    path.write_text(json.dumps({**record, "schema_version": 1}))
    with pytest.raises(BenchError, match="bench migrate"):
        store.point(path.stem)


def test_nan_and_inf_in_undeclared_fields_survive_a_save(results):
    """json.dumps writes NaN / Infinity; the models' JSON dump would write null for them outside typed float fields
    (found in review): Open keeps them (ser_json_inf_nan)."""
    import math

    store = SweepStore(results)
    path, _ = _first(store)
    record = store.records()[path.stem]
    record.added_afterwards = {"ratio": float("nan"), "rate": [float("inf")]}  # type: ignore[attr-defined]
    store.save_point(record)
    text = path.read_text()
    assert "NaN" in text and "Infinity" in text
    kept = store.records()[path.stem].model_extra["added_afterwards"]
    assert math.isnan(kept["ratio"]) and kept["rate"] == [math.inf]
