"""Point records are objects outside bench.results: the store hands out and takes PointRecord models only, and no
code in bench/ or benchmarks/ outside bench/results reads a point record by string key, dumps one back into a dict, or
opens `points/<id>.json` itself (so every reader goes through the store's version check and the models).

mypy (CI, over bench and benchmarks) refuses `record["x"]` on a PointRecord; this test covers what it cannot see: a
store method that hands out dicts, a record turned into a dict (`model_dump`), and a point file read directly. The
checker is a flow-insensitive scan of each function: a name is a record when it is bound from a store read
(`.point(...)`, an element of `.records()`), from `new_point` / `point_record` / a PointRecord constructor, or
annotated PointRecord. The raw per-request rows (`store.raw(...)`, dicts with "status" and "phase") are not records.
"""

from __future__ import annotations

import ast
import inspect
import typing
from pathlib import Path

import pytest

from bench.results.records import OutputsRecord, PointRecord, new_point
from bench.results.store import SweepStore

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "bench" / "results"

# SweepStore's public methods: a new one is added here on purpose, and may not hand out point records as dicts
STORE_API = {
    "point_path",
    "raw_path",
    "log_path",
    "outputs_path",
    "save_outputs",
    "outputs",
    "write_manifest",
    "save_point",
    "save_raw",
    "manifest",  # the manifest, not a point record
    "point",
    "records",
    "raw",  # the raw per-request rows, not point records
}
# what a store's methods give that is no point record (or a single one: `point`)
NOT_RECORDS = {
    "manifest",
    "raw",
    "point_path",
    "raw_path",
    "log_path",
    "write_manifest",
    "save_raw",
    "save_point",
    "point",
}
RECORD_SOURCES = {"new_point", "point_record"}  # functions that return a PointRecord
DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
PATH_READERS = {"glob", "rglob", "open", "Path", "read_text", "read_bytes", "loads", "load"}


def _is_record_annotation(node: ast.expr | None) -> bool:
    if node is None:
        return False
    text = ast.unparse(node).replace(" ", "").strip("'\"")
    return text in ("PointRecord", "PointRecord|None", "Optional[PointRecord]")


def _is_collection_annotation(node: ast.expr | None) -> bool:
    if node is None:
        return False
    text = ast.unparse(node).replace(" ", "").strip("'\"")
    return "PointRecord" in text and not _is_record_annotation(node)


def _is_store(node: ast.expr) -> bool:
    """`SweepStore(...)`, `store`, `self.ctx.store`, `loaded_store`: what a store is called in bench."""
    if isinstance(node, ast.Call):
        return _call_name(node) in ("SweepStore", "EventStore")
    name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
    return "store" in name.lower()


def _call_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Call):
        func = node.func
        return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
    return None


class _Scope:
    """The names of one function (with its nested functions and comprehensions) that hold a point record, and
    those that hold a collection of them."""

    def __init__(self, records: set[str], collections: set[str]):
        self.records, self.collections = set(records), set(collections)

    def is_record(self, node: ast.expr) -> bool:
        if isinstance(node, ast.Name):
            return node.id in self.records
        if isinstance(node, ast.NamedExpr):
            return self.is_record(node.value)
        if isinstance(node, ast.Subscript) and not isinstance(node.slice, ast.Constant):
            return self.is_collection(node.value)  # records[pid], points[0]
        if isinstance(node, ast.Subscript) and isinstance(node.slice.value, int):
            return self.is_collection(node.value)
        name = _call_name(node)
        if isinstance(node, ast.Call):
            func = node.func
            if name == "point" and isinstance(func, ast.Attribute) and len(node.args) == 1:
                return True  # SweepStore.point(point_id)
            if name in RECORD_SOURCES:
                return True
            if name == "PointRecord" or (
                isinstance(func, ast.Attribute) and ast.unparse(func.value) == "PointRecord"
            ):  # PointRecord(...), PointRecord.model_validate(...)
                return True
            if name == "parse" and node.args and ast.unparse(node.args[0]) == "PointRecord":
                return True
            if name == "model_copy" and isinstance(func, ast.Attribute):
                return self.is_record(func.value)
        if isinstance(node, ast.BoolOp):
            return any(self.is_record(v) for v in node.values)
        if isinstance(node, ast.IfExp):
            return self.is_record(node.body) or self.is_record(node.orelse)
        return False

    def is_collection(self, node: ast.expr) -> bool:
        if isinstance(node, ast.Name):
            return node.id in self.collections
        name = _call_name(node)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if name == "records" and not node.args:
                return True  # SweepStore.records()
            if _is_store(node.func.value) and name not in NOT_RECORDS:
                return True  # any other reader of a store (a `points()` come back) reads point records
            if name in ("values", "copy"):
                return self.is_collection(node.func.value)
        if isinstance(node, ast.Call) and name in ("list", "sorted", "tuple") and node.args:
            return self.is_collection(node.args[0])
        if isinstance(node, (ast.ListComp, ast.GeneratorExp, ast.SetComp)):
            return self.inside(node).is_record(node.elt)
        if isinstance(node, ast.DictComp):
            return self.inside(node).is_record(node.value)
        return False

    def inside(self, node: ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp) -> _Scope:
        """The scope of a comprehension: its targets are its own (they shadow the function's names)."""
        scope = _Scope(self.records, self.collections)
        for gen in node.generators:
            names = {n.id for n in ast.walk(gen.target) if isinstance(n, ast.Name)}
            scope.records -= names
            scope.collections -= names
            scope.bind(gen.target, gen.iter, iterated=True)
        return scope

    def bind(self, target: ast.expr, value: ast.expr | None, iterated: bool = False) -> bool:
        """Bind `target` from `value` (the element of `value` when `iterated`); True when a name was added."""
        before = (len(self.records), len(self.collections))
        if iterated:
            if value is None:
                return False
            items = isinstance(value, ast.Call) and _call_name(value) == "items"
            source = value.func.value if items and isinstance(value.func, ast.Attribute) else value  # type: ignore[union-attr]
            if not self.is_collection(source):
                return False
            if items and isinstance(target, (ast.Tuple, ast.List)) and len(target.elts) == 2:
                target = target.elts[1]
            if isinstance(target, ast.Name):
                self.records.add(target.id)
        elif isinstance(target, ast.Name) and value is not None:
            if self.is_record(value):
                self.records.add(target.id)
            elif self.is_collection(value):
                self.collections.add(target.id)
        elif isinstance(target, (ast.Tuple, ast.List)) and value is not None:
            if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts):
                for t, v in zip(target.elts, value.elts, strict=True):
                    self.bind(t, v)
            elif self.is_collection(value):  # (record,) = [r for r in ... if ...]
                self.records.update(t.id for t in target.elts if isinstance(t, ast.Name))
        return (len(self.records), len(self.collections)) != before


def _bindings(scope: _Scope, body: ast.AST) -> None:
    """Bind names to a fixpoint (flow-insensitive: a name bound to a record anywhere in the function is one)."""
    for _ in range(10):
        changed = False
        for node in ast.walk(body):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                for arg in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]:
                    if _is_record_annotation(arg.annotation) and arg.arg not in scope.records:
                        scope.records.add(arg.arg)
                        changed = True
                    elif _is_collection_annotation(arg.annotation) and arg.arg not in scope.collections:
                        scope.collections.add(arg.arg)
                        changed = True
            elif isinstance(node, ast.Assign):
                for target in node.targets:
                    changed |= scope.bind(target, node.value)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                if _is_record_annotation(node.annotation) and node.target.id not in scope.records:
                    scope.records.add(node.target.id)
                    changed = True
                changed |= scope.bind(node.target, node.value)
            elif isinstance(node, ast.NamedExpr):
                changed |= scope.bind(node.target, node.value)
            elif isinstance(node, (ast.For, ast.AsyncFor)):  # a comprehension's targets: _Scope.inside
                changed |= scope.bind(node.target, node.iter, iterated=True)
        if not changed:
            return


def _points_path(node: ast.AST) -> bool:
    """`X / "points"`, f"points/{id}.json", "points/*.json" given to a path reader, `.point_path(...)`."""

    def is_points(value: object) -> bool:
        return isinstance(value, str) and (value == "points" or value.startswith("points/"))

    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        return any(isinstance(side, ast.Constant) and is_points(side.value) for side in (node.left, node.right))
    if isinstance(node, ast.JoinedStr) and node.values:
        first = node.values[0]
        return isinstance(first, ast.Constant) and is_points(first.value)
    if isinstance(node, ast.Call):
        if _call_name(node) == "point_path":
            return True
        if _call_name(node) in PATH_READERS:
            return any(isinstance(a, ast.Constant) and is_points(a.value) for a in node.args)
    return False


def _check(node: ast.AST, scope: _Scope, parents: dict[ast.AST, ast.AST], where: str, out: list[str]) -> None:
    line = f"{where}:{getattr(node, 'lineno', '?')}"
    if _points_path(node):
        parent = parents.get(node)
        checked = isinstance(parent, ast.Attribute) and parent.attr in ("is_dir", "exists")  # a folder test, no read
        if not checked:
            out.append(f"{line}: reads points/ without the store: {ast.unparse(node)[:80]}")
    elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        if isinstance(node.slice.value, str) and scope.is_record(node.value):
            out.append(f"{line}: a point record read by key: {ast.unparse(node)[:80]}")
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        name, receiver = node.func.attr, node.func.value
        if name in ("get", "setdefault", "pop", "keys", "items") and scope.is_record(receiver):
            out.append(f"{line}: a point record read as a dict: {ast.unparse(node)[:80]}")
        elif name in ("model_dump", "model_dump_json", "dict", "json") and scope.is_record(receiver):
            out.append(f"{line}: a point record turned into a dict: {ast.unparse(node)[:80]}")
    elif (
        isinstance(node, ast.Call)
        and _call_name(node) in ("dict", "vars")
        and node.args
        and scope.is_record(node.args[0])
    ):
        out.append(f"{line}: a point record turned into a dict: {ast.unparse(node)[:80]}")
    if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
        scope = scope.inside(node)
    for child in ast.iter_child_nodes(node):
        _check(child, scope, parents, where, out)


def violations(source: str, where: str = "<source>") -> list[str]:
    """What in `source` reads a point record as a dict, or a point file without the store."""
    tree = ast.parse(source)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    out: list[str] = []
    units: list[ast.AST] = []  # module-level code, and each outermost function or method (nested ones with it)

    def collect(body: list[ast.stmt]) -> None:
        units.append(ast.Module(body=[n for n in body if not isinstance(n, DEFINITIONS)], type_ignores=[]))
        for node in body:
            if isinstance(node, ast.ClassDef):
                collect(node.body)
            elif isinstance(node, DEFINITIONS):
                units.append(node)

    collect(tree.body)
    for unit in units:
        scope = _Scope(set(), set())
        _bindings(scope, unit)
        _check(unit, scope, parents, where, out)
    return out


def _sources() -> list[Path]:
    files = sorted((REPO / "bench").rglob("*.py")) + sorted((REPO / "benchmarks").rglob("*.py"))
    return [f for f in files if RESULTS not in f.parents]


def test_no_point_record_is_read_as_a_dict_outside_bench_results():
    files = _sources()
    assert len(files) > 100 and any(f.name == "recompute.py" for f in files)
    found = [v for f in files for v in violations(f.read_text(), str(f.relative_to(REPO)))]
    assert not found, "read point records through SweepStore, as attributes:\n" + "\n".join(found)


def test_the_scan_sees_the_records_it_is_about():
    """The scan binds what the code really reads records from: a test that found nothing because it recognised
    nothing could not fail."""
    seen: dict[str, set[str]] = {}
    for path in _sources():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                scope = _Scope(set(), set())
                _bindings(scope, node)
                if scope.records:
                    seen.setdefault(str(path.relative_to(REPO)), set()).update(scope.records)
    assert "stored" in seen["bench/distributed/driver.py"]  # stored = self.ctx.store.point(point.id)
    assert "record" in seen["bench/measure/recompute.py"]
    assert "record" in seen["bench/commands/sweep.py"]  # _needs_run's parameter
    assert "record" in seen["benchmarks/steady_drift.py"]  # (record,) = [r for pid, r in ....records().items()]
    assert "p" in seen["bench/report/tables.py"]
    assert len(seen) >= 10


@pytest.mark.parametrize(
    "source",
    [
        "def f(store):\n    for pid, r in store.records().items():\n        x = r['status']",
        "def f(d):\n    for r in SweepStore(d).records().values():\n        x = r.get('reason')",
        "def f(store, pid):\n    rec = store.point(pid)\n    return rec['metrics']['output_throughput']",
        "def f(store):\n    points = list(store.records().values())\n    return points[0]['server']",
        "def f(d):\n    return [r['status'] for r in SweepStore(d).points().values()]",
        "def f(ctx):\n    return {p.get('reason') for p in ctx.store.all_points()}",
        "def f(d, p):\n    (record,) = [r for k, r in SweepStore(d).records().items() if k == p]\n    return record['raw']",
        "def f(record: PointRecord):\n    data = record.model_dump()\n    return data",
        "def f(record: 'PointRecord | None'):\n    return dict(record)",
        "def f(x):\n    record = new_point(x)\n    return record['status']",
        "def f(root, pid):\n    return json.loads((root / 'points' / f'{pid}.json').read_text())",
        "def f(root):\n    return [json.loads(p.read_text()) for p in (root / 'points').glob('*.json')]",
        "def f(root):\n    return [p for p in root.glob('points/*.json')]",
        "def f(store, pid):\n    return json.loads(store.point_path(pid).read_text())",
        "def f(root, pid):\n    return open(f'points/{pid}.json')",
    ],
)
def test_the_scan_flags_a_dict_reader(source):
    assert violations(source), source


@pytest.mark.parametrize(
    "source",
    [
        # the raw per-request rows are dicts, not point records
        "def f(store, pid):\n    rows = store.raw(pid)\n    return [r for r in rows if r['status'] == 'ok' and r['phase'] == 'measure']",
        "def f(store):\n    for pid, r in store.records().items():\n        rows = [row['status'] for row in store.raw(pid)]",
        # attributes, a record's typed parts, the label dict a record declares as a dict, a points table's column
        "def f(store):\n    return {pid: r.metrics.output_throughput for pid, r in store.records().items()}",
        "def f(p: PointRecord):\n    return p.label.get('shape'), p.effective.model_dump(exclude_unset=True)",
        "def f(df):\n    return df['points'], df.get('status')",
        "def f(summary):\n    return [p['point_id'] for p in summary['points']]",
        "def f(rel):\n    return rel.startswith('points/')",
    ],
)
def test_the_scan_leaves_other_dicts_alone(source):
    assert not violations(source), violations(source)


def test_the_store_hands_out_and_takes_typed_records_only(tmp_path):
    public = {name for name, member in inspect.getmembers(SweepStore, inspect.isfunction) if not name.startswith("_")}
    assert public == STORE_API, "a new SweepStore method: hand out PointRecord models, never dicts, and add it here"
    hints = {name: typing.get_type_hints(getattr(SweepStore, name)) for name in public}
    assert hints["point"]["return"] == PointRecord | None
    assert hints["records"]["return"] == dict[str, PointRecord]
    assert hints["save_point"]["record"] is PointRecord
    assert hints["outputs"]["return"] == dict[str, OutputsRecord]
    assert hints["save_outputs"]["record"] is OutputsRecord
    typed = ("dict[str, bench.results.records.PointRecord]", "dict[str, bench.results.records.OutputsRecord]")
    for name in public - {"manifest", "raw"}:
        said = str(hints[name].get("return"))
        for keyed in typed:
            said = said.replace(keyed, "")
        assert "dict" not in said

    store = SweepStore(tmp_path)
    record = new_point(
        {
            "point_id": "p1",
            "engine_id": "e1",
            "status": "skipped",
            "reason": "not planned",
            "config": {"engine": {}, "shape": {"concurrency": 1, "input_len": 2, "output_len": 3}},
        }
    )
    with pytest.raises(TypeError, match="PointRecord"):
        store.save_point(dict(record))  # type: ignore[arg-type]
    assert not store.point_path("p1").exists()
    store.save_point(record)
    assert isinstance(store.point("p1"), PointRecord)
    assert all(isinstance(r, PointRecord) for r in store.records().values())
    assert store.point("p1") == record
