"""`bench migrate`: a results directory of schema 1 (tests/data/results-v1: a real H200 sweep of the tiny model,
written before the steady window, with failed points and their server logs) is refused with the way out, upgraded
in place, and rebuilds the report the older bench built, byte for byte."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from bench.cli import main
from bench.core.errors import BenchError
from bench.report.build import build_report
from bench.results.migrate import migrate
from bench.results.records import Cache
from bench.results.store import SCHEMA_VERSION, SweepStore

V1 = Path(__file__).resolve().parents[1] / "data" / "results-v1"


@pytest.fixture
def v1(tmp_path) -> Path:
    root = tmp_path / "results"
    shutil.copytree(V1, root, ignore=shutil.ignore_patterns("report"))
    return root


def test_an_old_directory_is_refused_with_the_command_that_upgrades_it(v1):
    with pytest.raises(BenchError, match="bench migrate"):
        SweepStore(v1).records()


def test_migrate_upgrades_in_place_and_the_report_is_unchanged(v1, tmp_path):
    steps = migrate(v1)
    assert [(s["from"], s["to"]) for s in steps] == [(1, SCHEMA_VERSION)]
    assert steps[0]["changed"]["metrics.window"] == 6, "the 6 ok points' headlines were the whole window"
    store = SweepStore(v1)
    points = store.records()
    ok = [p for p in points.values() if p.status == "ok"]
    assert all(p.metrics and p.metrics.window == "whole" and p.metrics.whole for p in ok)
    assert all("cache" in p.model_fields_set and p.cache == Cache() for p in ok)
    assert all(p.contamination == [] and p.flags == [] for p in ok)
    assert json.loads((v1 / "manifest.json").read_text())["migrations"][0]["to"] == SCHEMA_VERSION
    out = build_report(v1, tmp_path / "report")
    rebuilt = Path(out["summary"]).read_text()
    servers = re.search(r"## Servers\n.*?(?=## Provenance)", rebuilt, re.S)
    assert servers, "the server table (a section this bench added) is there"
    view = re.search(r"(?<=`\n\n)Across .*?\n\n(?=\d+ ok, \d+ failed)", rebuilt, re.S)
    assert view, "the decision view (added later too: bench/report/decision.py) opens the summary"
    rest = rebuilt.replace(servers.group(0), "").replace(view.group(0), "")
    assert rest == (V1 / "report" / "summary.md").read_text(), "the rest unchanged"
    assert migrate(v1) == [], "idempotent"


def test_the_cli_migrates_and_says_what_changed(v1, capsys):
    assert main(["migrate", str(v1)]) == 0
    assert "1 -> 2" in capsys.readouterr().out
    assert main(["migrate", str(v1)]) == 0
    assert "already current" in capsys.readouterr().out
    assert main(["migrate", str(v1.parent / "nothing")]) != 0


def test_a_record_the_upgrade_cannot_make_valid_is_named(v1):
    path = sorted((v1 / "points").glob("*.json"))[0]
    record = json.loads(path.read_text())
    record["status"] = "finished"  # no schema version ever had it
    path.write_text(json.dumps(record))
    with pytest.raises(BenchError, match=rf"{path.name}: not a valid PointRecord: status"):
        migrate(v1)


def test_an_unreadable_record_is_named_and_nothing_is_migrated(v1):
    """Found in review: a truncated record raised JSONDecodeError (a traceback) after the records before it had
    been rewritten, leaving the directory half migrated."""
    paths = sorted((v1 / "points").glob("*.json"))
    before = {p: p.read_bytes() for p in paths}
    paths[-1].write_text(paths[-1].read_text()[:200])
    with pytest.raises(BenchError, match=rf"{paths[-1].name}: not a readable record .*nothing was migrated"):
        migrate(v1)
    assert all(p.read_bytes() == before[p] for p in paths[:-1]), "no record rewritten"
    assert json.loads((v1 / "manifest.json").read_text())["schema_version"] == 1
