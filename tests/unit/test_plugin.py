"""The profiling plugin without a server: the target table (against the real vLLM sources), wrapping on
import and at once, idempotence, the missing-target warning, inactivity by default, the NVTX dummy-domain
guard, the timing file schema and the wrappers' overhead. A GPU test (marker gpu) checks CUDA-event timing
and that nothing is recorded into a CUDA graph being captured."""

from __future__ import annotations

import ast
import importlib.util
import json
import logging
import multiprocessing
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from bench.profiling import import_hook, nvtx_check, plugin, targets, timing, wrapping
from bench.profiling.nsys_analysis import summarize_ranges
from bench.profiling.nsys_attribution import RANGE_GPU_COLUMNS
from tests.helpers.extras import ENGINE, PROFILE, need

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "nvtx-ranges.md"
REQUIRED = {
    targets.DRAFT_ATTN_METADATA,
    targets.DRAFT_PROPOSE,
    targets.TARGET_FORWARD,
    targets.SAMPLE_REJECTION,
    targets.ENGINE_STEP,
}
ENV_KEYS = (
    plugin.ENV_NVTX,
    plugin.ENV_TIMING,
    plugin.ENV_TIMING_DIR,
    plugin.ENV_NVTX_ATTENTION,
    plugin.ENV_EFFECTIVE_DIR,
    wrapping.ENV_WARNED,
    targets.EXTRA_TARGETS_ENV,
    *nvtx_check.TOOL_ENV,
)


@pytest.fixture(autouse=True)
def clean_plugin(monkeypatch):
    for key in ENV_KEYS:
        monkeypatch.delenv(key, raising=False)
    plugin.deactivate()
    yield
    plugin.deactivate()


@pytest.fixture
def log_records():
    """Records of the plugin's logger (it lives under 'vllm', which vLLM may have made non-propagating)."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = logging.getLogger(plugin.LOGGER_NAME)
    logger.addHandler(handler)
    old = logger.level
    logger.setLevel(logging.DEBUG)
    yield records
    logger.removeHandler(handler)
    logger.setLevel(old)


@pytest.fixture
def fake_pkg(tmp_path, monkeypatch):
    """A package `benchfake_<n>` with classes shaped like vLLM's (a base with the method, a subclass that
    inherits it, a static and a class method), importable but not yet imported."""
    name = f"benchfake_{tmp_path.name.replace('-', '_')}"
    pkg = tmp_path / "site" / name
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "runner.py").write_text(
        textwrap.dedent("""
        CALLS = []
        class Base:
            def build(self, x):
                CALLS.append(("build", x))
                if x == "boom":
                    raise ValueError("boom")
                return x * 2
            @staticmethod
            def stat(x):
                return x + 1
            @classmethod
            def klass(cls, x):
                return (cls.__name__, x)
        class Sub(Base):
            pass
    """)
    )
    # Shaped like mla_attention: a module-level function called by name, and one imported by name from elsewhere.
    (pkg / "ops.py").write_text("def combine(x):\n    return x * 10\n")
    (pkg / "attn.py").write_text(
        textwrap.dedent("""
        from .ops import combine
        def reorg(x):
            return x + 1
        class Layer:
            def forward(self, x):
                return combine(reorg(x))
    """)
    )
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    yield name
    for mod in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        del sys.modules[mod]


def rows_for(pkg: str, *extra: targets.Target) -> list[targets.Target]:
    mod = f"{pkg}.runner"
    return [
        targets.Target("bench.t.build", mod, ("Sub.build",)),
        targets.Target("bench.t.stat", mod, ("Base.stat",)),
        targets.Target("bench.t.klass", mod, ("Base.klass",)),
        *extra,
    ]


# --- the table -----------------------------------------------------------------------------------------------


def test_every_line_has_the_required_ranges_and_well_formed_rows():
    assert set(targets.TABLES) == {"0.26", "0.32", "0.33"}
    for line, rows in targets.TABLES.items():
        assert {r.range for r in rows} >= REQUIRED, line
        for row in rows:
            assert row.range in targets.RANGE_NAMES and row.range.startswith(f"{targets.DOMAIN}.")
            assert row.module.startswith("vllm.") or row.module == "bench.profiling.dcp_loopback", row
            # Class.method, or (attention rows only) a module-level function called by name from its module
            assert row.attrs and all("." in a or row.runner == targets.ATTENTION_RUNNER for a in row.attrs), row
            assert (row.range in targets.ATTENTION_RANGES) == (row.runner == targets.ATTENTION_RUNNER), row
        keys = [(r.module, r.attrs) for r in rows]
        assert len(keys) == len(set(keys)), f"duplicate rows in {line}"


def test_every_range_is_a_row_of_each_line_or_declared_absent_with_a_reason():
    assert set(targets.ABSENT) == set(targets.TABLES)
    for line, rows in targets.TABLES.items():
        present = {r.range for r in rows}
        absent = targets.ABSENT[line]
        assert not present & set(absent), f"{line}: declared absent but has rows: {present & set(absent)}"
        assert present | set(absent) == set(targets.RANGE_NAMES), f"{line}: {set(targets.RANGE_NAMES) - present}"
        assert all(why.strip() for why in absent.values()), line
    assert targets.ATTN_DCP_COMBINE in targets.ABSENT["0.33"] and not targets.ABSENT["0.26"]


def test_attention_rows_follow_vllm_026s_mla_code():
    """The paths issue 39 separates, by the names 0.26.0's mla_attention.py gives them (checked against the wheel
    in test_table_matches_real_wheels): each range's rows, as (module tail, attribute)."""

    def rows(line, name):
        return {(r.module.rsplit(".", 1)[-1], r.attrs) for r in targets.TABLES[line] if r.range == name}

    assert rows("0.26", targets.ATTN_LAYER) == {("mla_attention", ("MLAAttention.forward_impl",))}
    assert rows("0.26", targets.ATTN_PREFILL) == {("mla_attention", ("MLACommonBaseImpl.forward_mha",))}
    assert rows("0.26", targets.ATTN_PREFILL_CONTEXT) == {
        ("mla_attention", ("MLACommonBaseImpl._context_parallel_compute_prefill_context",)),
        ("mla_attention", ("MLACommonBaseImpl._compute_prefill_context",)),
    }
    assert rows("0.26", targets.ATTN_REORG) == {("mla_attention", ("reorg_kvcache",))}
    assert ("flashmla", ("FlashMLAImpl.forward_mqa",)) in rows("0.26", targets.ATTN_DECODE)
    assert rows("0.26", targets.ATTN_DCP_COMBINE) == {("mla_attention", ("cp_lse_ag_out_rs",))}
    assert {a for _, (a,) in rows("0.26", targets.DCP_COLLECTIVE)} == {
        "LoopbackGroup.all_gather",
        "LoopbackGroup.reduce_scatter",
        "LoopbackGroup.all_reduce",
    }


def test_draft_metadata_rows_follow_the_rename():
    def attrs(line):
        return {a for r in targets.TABLES[line] if r.range == targets.DRAFT_ATTN_METADATA for a in r.attrs}

    assert (
        next(r.attrs[0] for r in targets.TABLES["0.26"] if r.module.endswith("gpu.spec_decode.speculator"))
        == "DraftModelSpeculator._build_draft_attn_metadata"
    )
    assert (
        next(r.attrs[0] for r in targets.TABLES["0.33"] if r.module.endswith("gpu.spec_decode.speculator"))
        == "DraftModelSpeculator._build_attn_metadata"
    )
    for line in targets.TABLES:
        assert "SpecDecodeBaseProposer.build_per_group_and_layer_attn_metadata" in attrs(line)


@pytest.mark.parametrize(
    "version, expected",
    [
        ("0.32.0", ("0.32", True)),
        ("0.32.0+cpu", ("0.32", True)),
        ("0.26.1", ("0.26", True)),
        ("0.33.0rc1", ("0.33", True)),
        ("0.30.0", ("0.26", False)),
        ("0.40.2", ("0.33", False)),
        ("0.20.0", ("0.26", False)),
        ("dev", ("0.33", False)),
        ("", ("0.33", False)),
    ],
)
def test_line_for_version(version, expected):
    assert targets.line_for(version) == expected


def test_extra_targets_parse():
    rows, bad = targets.parse_extra_targets(
        "bench.user.a=vllm.x.y:C.f; bench.user.b=vllm.z:C.g|C.h\nnot-an-entry;bench.c=vllm.q:;=vllm.r:C.f; ;"
    )
    assert [(r.range, r.module, r.attrs) for r in rows] == [
        ("bench.user.a", "vllm.x.y", ("C.f",)),
        ("bench.user.b", "vllm.z", ("C.g", "C.h")),
    ]
    assert bad == ["not-an-entry", "bench.c=vllm.q:", "=vllm.r:C.f"]
    assert targets.parse_extra_targets(None) == ([], [])


def defined_in_source(root: Path, module: str, qualname: str, seen=()) -> bool:
    """Whether class.attr is defined in `module` under root (following base classes by their imports), or, for a
    bare name, whether the module defines that function or imports it by that name from a module that does; read
    with ast: no vLLM import, so 0.26/0.33 sources can be checked on a CPU machine. The suite's own module (the
    loopback group) is read from this repository."""
    if module.startswith("bench."):
        root = REPO
    path = root.joinpath(*module.split("."))
    path = path.with_suffix(".py") if path.with_suffix(".py").is_file() else path / "__init__.py"
    if not path.is_file():
        return False
    tree = ast.parse(path.read_text())
    imported = {
        a.asname or a.name: n.module for n in tree.body if isinstance(n, ast.ImportFrom) and n.module for a in n.names
    }
    if "." not in qualname:  # a module-level function
        if any(isinstance(n, ast.FunctionDef) and n.name == qualname for n in tree.body):
            return True
        source = next(
            (a.name, n.module)
            for n in tree.body
            if isinstance(n, ast.ImportFrom) and n.module
            for a in n.names
            if (a.asname or a.name) == qualname
        ) if qualname in imported else None  # fmt: skip
        return source is not None and defined_in_source(root, source[1], source[0], seen + (qualname,))
    cls, attr = qualname.split(".")
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            if any(isinstance(i, (ast.FunctionDef, ast.AsyncFunctionDef)) and i.name == attr for i in node.body):
                return True
            return any(
                defined_in_source(root, imported.get(b.id, module), f"{b.id}.{attr}", seen + (qualname,))
                for b in node.bases
                if isinstance(b, ast.Name) and f"{b.id}.{attr}" not in seen
            )
    return False


def check_table(root: Path, line: str) -> None:
    missing = [
        r.names() for r in targets.TABLES[line] if not any(defined_in_source(root, r.module, a) for a in r.attrs)
    ]
    assert not missing, f"rows of table {line} not in the sources at {root}: {missing}"


def test_table_matches_installed_vllm():
    spec = importlib.util.find_spec("vllm")
    if spec is None:
        pytest.skip(f"needs vllm: {ENGINE}; scripts/setup.sh installs it")
    root = Path(spec.submodule_search_locations[0]).parent
    version = plugin.vllm_version()
    line, exact = targets.line_for(version)
    assert exact, f"installed vLLM {version} has no table"
    check_table(root, line)


@pytest.mark.slow
@pytest.mark.parametrize("line, fixture", [("0.26", "wheel_026"), ("0.33", "wheel_033")])
def test_table_matches_real_wheels(line, fixture, request):
    check_table(request.getfixturevalue(fixture), line)


def test_doc_lists_every_range_and_row():
    text = DOC.read_text()
    for name in targets.RANGE_NAMES:
        assert f"`{name}`" in text, name
    for rows in targets.TABLES.values():
        for row in rows:
            assert row.attrs[0] in text, row


# The modules that run inside vLLM's processes; they may import each other and nothing else from the suite.
PLUGIN_SIDE = {
    "plugin",
    "nvtx_check",
    "wrapping",
    "import_hook",
    "targets",
    "timing",
    "effective_record",
    "dcp_loopback",
    "step_delay",
}


def suite_imports(name: str) -> set[str]:
    """The bench.* modules a module of bench/profiling imports (`from bench.profiling import x` counts as x)."""
    found = set()
    for node in ast.walk(ast.parse((REPO / "bench" / "profiling" / f"{name}.py").read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module == "bench.profiling":
            found |= {f"bench.profiling.{a.name}" for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            found.add(node.module or "")
    return {m for m in found if m == "bench" or m.startswith("bench.")}


def test_plugin_modules_import_nothing_else_from_the_suite():
    allowed = {f"bench.profiling.{m}" for m in PLUGIN_SIDE}
    for name in sorted(PLUGIN_SIDE):
        assert suite_imports(name) <= allowed, f"{name}.py imports {suite_imports(name) - allowed}"
    assert "bench.profiling.nsys_analysis" not in allowed and suite_imports("session") - allowed, "check the check"


def test_an_active_plugin_loads_only_plugin_side_modules(tmp_path):
    code = f"""
        import json, sys
        from bench.profiling import plugin
        plugin.activate(nvtx=True, timing=True, timing_dir={str(tmp_path / "t")!r}, version="0.32.0")
        plugin.activate_record({str(tmp_path / "e")!r}, version="0.32.0")
        print(json.dumps(sorted(m for m in sys.modules if m.startswith("bench"))))
    """
    out = run_python(code, {}, tmp_path)
    assert out.returncode == 0, out.stderr
    loaded = set(json.loads(out.stdout.strip().splitlines()[-1]))
    # dcp_loopback loads only with BENCH_DCP_LOOPBACK set
    assert loaded == {"bench", "bench.profiling"} | {
        f"bench.profiling.{m}" for m in PLUGIN_SIDE - {"dcp_loopback", "step_delay"}
    }


# --- activation, wrapping, idempotence ---------------------------------------------------------------------


def run_python(code: str, env: dict, tmp_path: Path) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in ENV_KEYS}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env={**clean, **env},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_inactive_by_default(tmp_path):
    code = """
        import sys
        meta = list(sys.meta_path)
        from bench.profiling import plugin
        plugin.register(); plugin.register()
        assert plugin._PROFILER is None
        assert sys.meta_path == meta
        assert "bench.profiling.targets" not in sys.modules and "bench.profiling.timing" not in sys.modules
        print("inactive")
    """
    out = run_python(code, {plugin.ENV_TIMING_DIR: str(tmp_path / "t"), plugin.ENV_NVTX: "0"}, tmp_path)
    assert out.returncode == 0 and "inactive" in out.stdout, out.stderr
    assert not (tmp_path / "t").exists()


def test_wraps_on_import_and_records(fake_pkg, tmp_path):
    prof = plugin.activate(nvtx=True, timing=True, timing_dir=tmp_path, version="0.32.0", rows=rows_for(fake_pkg))
    mod_name = f"{fake_pkg}.runner"
    assert mod_name not in sys.modules and set(prof.waiting) == {mod_name} and prof.finder in sys.meta_path
    runner = importlib.import_module(mod_name)
    assert not prof.waiting and prof.finder not in sys.meta_path, "finder must go once everything is wrapped"
    # Sub gets its own wrapper of the inherited method; Base stays as it was.
    assert getattr(runner.Sub.__dict__["build"], wrapping.MARK) == "bench.t.build"
    assert "build" in runner.Base.__dict__ and not hasattr(runner.Base.build, wrapping.MARK)
    assert runner.Sub().build(3) == 6 and runner.Base().build(1) == 2
    assert runner.Sub.stat(1) == 2 and runner.Sub().stat(2) == 3
    assert runner.Sub.klass(5) == ("Sub", 5) and runner.Base.klass(1) == ("Base", 1)
    with pytest.raises(ValueError, match="boom"):
        runner.Sub().build("boom")
    assert runner.Sub.build.__wrapped__ is runner.Base.build and runner.Sub.build.__name__ == "build"
    prof.recorder.close()
    df = timing.load_timing_dir(tmp_path)
    assert list(df["name"]) == [
        "bench.t.build",
        "bench.t.stat",
        "bench.t.stat",
        "bench.t.klass",
        "bench.t.klass",
        "bench.t.build",
    ]  # the raising call is recorded too
    assert (df["pid"] == os.getpid()).all() and (df["cpu_ns"] > 0).all()


def test_module_level_functions_called_by_name_are_wrapped_in_their_callers_module(fake_pkg, tmp_path):
    """reorg_kvcache (defined in mla_attention) and cp_lse_ag_out_rs (imported into it by name) are rows on
    mla_attention's own names: the method that calls them looks them up there at call time."""
    mod = f"{fake_pkg}.attn"
    rows = [
        targets.Target("bench.t.reorg", mod, ("reorg",), targets.ATTENTION_RUNNER),
        targets.Target("bench.t.combine", mod, ("combine",), targets.ATTENTION_RUNNER),
    ]
    prof = plugin.activate(nvtx=False, timing=True, timing_dir=tmp_path, version="0.26.0", rows=rows)
    attn = importlib.import_module(mod)
    ops = importlib.import_module(f"{fake_pkg}.ops")
    assert attn.Layer().forward(1) == 20
    assert not hasattr(ops.combine, wrapping.MARK), "only the caller's module name is wrapped"
    assert getattr(attn.combine, wrapping.MARK) == "bench.t.combine" and not prof.missing
    prof.recorder.close()
    assert sorted(timing.load_timing_dir(tmp_path)["name"]) == ["bench.t.combine", "bench.t.reorg"]
    plugin.deactivate()
    assert attn.reorg.__name__ == "reorg" and not hasattr(attn.reorg, wrapping.MARK), "restored"


def test_attention_rows_only_with_bench_nvtx_attention(monkeypatch):
    def ranges(**kw):
        plugin.deactivate()
        prof = plugin.activate(nvtx=True, timing=False, version="0.26.0", **kw)
        return {r.range for r in prof.rows}

    off, on = ranges(), ranges(attention=True)
    assert not off & set(targets.ATTENTION_RANGES) and off >= REQUIRED
    assert on == off | set(targets.ATTENTION_RANGES)
    plugin.deactivate()
    monkeypatch.setenv(plugin.ENV_NVTX, "1")
    monkeypatch.setenv(plugin.ENV_NVTX_ATTENTION, "1")
    monkeypatch.setattr(plugin, "vllm_version", lambda: "0.26.0")
    plugin.register()
    assert plugin._PROFILER is not None and {r.range for r in plugin._PROFILER.rows} == on


def test_the_loopback_groups_collectives_are_timed(tmp_path):
    from bench.profiling import dcp_loopback

    rows = [r for r in targets.TABLES["0.26"] if r.range == targets.DCP_COLLECTIVE]
    prof = plugin.activate(nvtx=False, timing=True, timing_dir=tmp_path, version="0.26.0", rows=rows)
    assert len(prof.wrapped) == 3 and not prof.waiting, "the module was imported: wrapped at once"
    group = dcp_loopback.LoopbackGroup(inner=None, world_size=1)
    before = dcp_loopback.CALLS.copy()
    assert group.all_gather("x") == "x" and group.reduce_scatter("y") == "y" and group.all_reduce("z") == "z"
    assert dcp_loopback.CALLS - before == {"all_gather": 1, "reduce_scatter": 1, "all_reduce": 1}  # originals ran
    prof.recorder.close()
    assert list(timing.load_timing_dir(tmp_path)["name"]) == [targets.DCP_COLLECTIVE] * 3


def test_wraps_already_imported_modules_at_once(fake_pkg, tmp_path):
    runner = importlib.import_module(f"{fake_pkg}.runner")
    obj = runner.Sub()  # made before the wrap: sees it, since the class attribute changes
    prof = plugin.activate(nvtx=False, timing=True, timing_dir=tmp_path, version="0.32.0", rows=rows_for(fake_pkg))
    assert not prof.waiting and prof.finder is None
    assert len(prof.wrapped) == 3
    assert obj.build(2) == 4
    prof.recorder.close()
    assert list(timing.load_timing_dir(tmp_path)["name"]) == ["bench.t.build"]


def test_set_enabled_swaps_wrappers_out_and_back_in_place(fake_pkg, tmp_path):
    runner = importlib.import_module(f"{fake_pkg}.runner")
    prof = plugin.activate(nvtx=False, timing=True, timing_dir=tmp_path, version="0.32.0", rows=rows_for(fake_pkg))
    obj = runner.Sub()
    prof.set_enabled(False)
    # Off: Sub's inherited method is inherited again (no attribute of its own), the others are the originals.
    assert "build" not in runner.Sub.__dict__ and not hasattr(runner.Base.stat, wrapping.MARK)
    assert obj.build(2) == 4 and runner.Sub.stat(1) == 2 and runner.Sub.klass(1) == ("Sub", 1)
    prof.set_enabled(True)
    assert getattr(runner.Sub.__dict__["build"], wrapping.MARK) == "bench.t.build"
    assert obj.build(3) == 6
    prof.set_enabled(True)  # idempotent
    prof.recorder.close()
    assert list(timing.load_timing_dir(tmp_path)["name"]) == ["bench.t.build"]  # only the call made while on
    prof.set_enabled(False)
    plugin.deactivate()  # undoing after an "off" must not trip over the attributes already removed
    assert "build" not in runner.Sub.__dict__ and obj.build(1) == 2


def test_module_half_imported_at_register_is_wrapped_when_done(fake_pkg, tmp_path):
    runner = importlib.import_module(f"{fake_pkg}.runner")
    runner.__spec__._initializing = True  # what importlib sets while the module's code runs
    try:
        prof = plugin.activate(nvtx=True, timing=False, version="0.32.0", rows=rows_for(fake_pkg))
        assert set(prof.deferred) == {runner.__name__} and not prof.wrapped and prof.finder in sys.meta_path
    finally:
        runner.__spec__._initializing = False
    importlib.util.find_spec("benchfake_not_there")  # any later import lookup gives the finder its chance
    assert not prof.deferred and len(prof.wrapped) == 3 and prof.finder not in sys.meta_path
    assert hasattr(runner.Sub.__dict__["build"], wrapping.MARK)


def test_failed_import_is_wrapped_on_the_retry(fake_pkg, tmp_path, monkeypatch):
    path = Path(importlib.util.find_spec(fake_pkg).submodule_search_locations[0]) / "runner.py"
    source = path.read_text()
    path.write_text("raise ImportError('not yet')\n" + source)
    prof = plugin.activate(nvtx=True, timing=False, version="0.32.0", rows=rows_for(fake_pkg))
    with pytest.raises(ImportError, match="not yet"):
        importlib.import_module(f"{fake_pkg}.runner")
    assert set(prof.waiting) == {f"{fake_pkg}.runner"} and not prof.missing
    path.write_text(source)
    importlib.invalidate_caches()
    runner = importlib.import_module(f"{fake_pkg}.runner")
    assert hasattr(runner.Sub.__dict__["build"], wrapping.MARK) and not prof.waiting
    assert "exec_module" not in vars(runner.__spec__.loader), "the loader is left as it was"


def test_idempotent(fake_pkg, tmp_path, monkeypatch):
    monkeypatch.setenv(plugin.ENV_TIMING, "1")
    monkeypatch.setenv(plugin.ENV_TIMING_DIR, str(tmp_path))
    runner = importlib.import_module(f"{fake_pkg}.runner")
    original = runner.Base.build
    prof = plugin.activate(nvtx=False, timing=True, timing_dir=tmp_path, version="0.32.0", rows=rows_for(fake_pkg))
    wrapper = runner.Sub.__dict__["build"]
    plugin.register()
    plugin.register()
    assert plugin._PROFILER is prof and runner.Sub.__dict__["build"] is wrapper
    # A second profiler (e.g. a second copy of the module) finds the mark and does not wrap again.
    second = wrapping.Profiler(rows=rows_for(fake_pkg), recorder=prof.recorder)
    second.wrap_module(runner, second.rows)
    assert runner.Sub.__dict__["build"] is wrapper and wrapper.__wrapped__ is original
    assert not second.originals and len(second.wrapped) == 3
    runner.Sub().build(1)
    prof.recorder.close()
    assert len(timing.load_timing_dir(tmp_path)) == 1, "one call, one range"
    plugin.deactivate()
    assert "build" not in runner.Sub.__dict__ and runner.Sub.build is original


def test_register_reads_the_environment(fake_pkg, tmp_path, monkeypatch):
    monkeypatch.setenv(plugin.ENV_TIMING, "1")
    monkeypatch.setenv(plugin.ENV_TIMING_DIR, str(tmp_path / "t"))
    monkeypatch.setenv(targets.EXTRA_TARGETS_ENV, f"bench.user.build={fake_pkg}.runner:Base.build")
    monkeypatch.setattr(targets, "TABLES", {"0.32": ()})
    monkeypatch.setattr(plugin, "vllm_version", lambda: "0.32.0")
    plugin.register()
    runner = importlib.import_module(f"{fake_pkg}.runner")
    runner.Base().build(1)
    plugin._PROFILER.recorder.close()
    df = timing.load_timing_dir(tmp_path / "t")
    assert list(df["name"]) == ["bench.user.build"]
    assert df.attrs["headers"][0]["vllm_version"] == "0.32.0"


def test_register_never_raises(monkeypatch, log_records):
    monkeypatch.setenv(plugin.ENV_NVTX, "1")

    def broken(**_):
        raise RuntimeError("table exploded")

    monkeypatch.setattr(plugin, "activate", broken)
    plugin.register()
    assert any("failed to register" in r.getMessage() and r.exc_info for r in log_records)


# --- missing targets -------------------------------------------------------------------------------------------


def test_missing_target_warned_once_listing_names(fake_pkg, tmp_path, log_records):
    mod = f"{fake_pkg}.runner"
    missing_attr = targets.Target("bench.t.gone", mod, ("Sub.gone", "Base.also_gone"))
    missing_mod = targets.Target("bench.t.nomod", f"{fake_pkg}.nowhere", ("C.f",))
    rows = rows_for(fake_pkg, missing_attr, missing_mod)
    prof = plugin.activate(nvtx=True, timing=False, version="0.32.0", rows=rows)
    warnings = [r.getMessage() for r in log_records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "bench.t.nomod" in warnings[0] and f"{fake_pkg}.nowhere:C.f" in warnings[0]
    importlib.import_module(mod)  # the attribute is missing: found out on import
    warnings = [r.getMessage() for r in log_records if r.levelno == logging.WARNING]
    assert len(warnings) == 2
    assert f"{mod}:Sub.gone" in warnings[1] and f"{mod}:Base.also_gone" in warnings[1]
    assert "vLLM 0.32.0" in warnings[1] and {r.range for r in prof.missing} == {"bench.t.gone", "bench.t.nomod"}
    # Again in this process, and in a child (which inherits the environment mark): no repeat.
    plugin.deactivate()
    sys.modules.pop(mod)
    plugin.activate(nvtx=True, timing=False, version="0.32.0", rows=rows)
    importlib.import_module(mod)
    assert len([r for r in log_records if r.levelno == logging.WARNING]) == 2
    assert "bench.t.gone" in os.environ[wrapping.ENV_WARNED]


def test_bad_extra_entries_and_unknown_versions_are_reported(log_records):
    plugin.activate(nvtx=True, timing=False, version="0.29.0", rows=[], extra="garbage")
    text = "\n".join(r.getMessage() for r in log_records)
    assert "ignoring BENCH_NVTX_EXTRA_TARGETS entry 'garbage'" in text
    assert "vLLM 0.29.0 has no table of its own; using the 0.26.x table" in text


def test_module_exists_without_importing(fake_pkg):
    assert import_hook.module_exists(f"{fake_pkg}.runner") and import_hook.module_exists(fake_pkg)
    assert not import_hook.module_exists(f"{fake_pkg}.nowhere") and not import_hook.module_exists(
        f"{fake_pkg}.runner.x"
    )
    assert not import_hook.module_exists("benchfake_no_such_package.x")
    assert fake_pkg not in sys.modules


# --- NVTX --------------------------------------------------------------------------------------------------------


def test_dummy_domain_guard():
    nvtx = need("nvtx", PROFILE)
    dummy = nvtx._lib.DummyDomain()
    assert nvtx_check.check_domain(dummy, nvtx, None) == (None, None)
    domain, problem = nvtx_check.check_domain(dummy, nvtx, "NSYS_PROFILING_SESSION_ID")
    assert domain is None and "DummyDomain" in problem and "MISSING" in problem
    real = object()  # anything that is not a DummyDomain is taken as a working domain
    assert nvtx_check.check_domain(real, nvtx, "NVTX_INJECTION64_PATH") == (real, None)
    # No tool attached in this process: nvtx hands out its no-op domain, and that is fine.
    assert nvtx_check.nvtx_domain("bench", env={}) == (None, None)
    assert nvtx_check.nvtx_domain("bench", env={"NVTX_INJECTION64_PATH": "/x.so"})[1] is not None


def test_missing_nvtx_package_with_a_tool_is_an_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "nvtx", None)  # import nvtx -> ImportError
    assert nvtx_check.nvtx_domain("bench", env={}) == (None, None)
    domain, problem = nvtx_check.nvtx_domain("bench", env={"NSYS_PROFILING_SESSION_ID": "7"})
    assert domain is None and "not installed" in problem


def test_dummy_domain_under_an_injected_tool_logs_an_error(tmp_path):
    need("nvtx", PROFILE)
    code = """
        from bench.profiling import plugin
        plugin.register()
        print("registered", plugin._PROFILER.domain)
    """
    out = run_python(code, {plugin.ENV_NVTX: "1", "NVTX_INJECTION64_PATH": str(tmp_path / "missing-tool.so")}, tmp_path)
    assert out.returncode == 0 and "registered None" in out.stdout, out.stderr
    assert "bench profiling ERROR" in out.stderr and "DummyDomain" in out.stderr


class FakeDomain:
    """Stands for a real nvtx Domain: records push/pop."""

    def __init__(self):
        self.events = []

    def get_event_attributes(self, message=None):
        return message

    def push_range(self, attrs):
        self.events.append(("push", attrs))

    def pop_range(self):
        self.events.append(("pop",))


def test_nvtx_push_pop_around_the_call_also_on_error():
    domain = FakeDomain()

    def f(x):
        domain.events.append(("call", x))
        if x < 0:
            raise KeyError(x)
        return x

    w = wrapping.make_wrapper(f, "bench.t", domain=domain)
    assert w(1) == 1
    with pytest.raises(KeyError):
        w(-1)
    assert domain.events == [("push", "bench.t"), ("call", 1), ("pop",), ("push", "bench.t"), ("call", -1), ("pop",)]


# --- timing files --------------------------------------------------------------------------------------------------


def nsys_range_columns() -> list[str]:
    return [
        "range_id",
        "domain",
        "name",
        "kind",
        "pid",
        "tid",
        "global_tid",
        "start_ns",
        "end_ns",
        "cpu_ns",
        *RANGE_GPU_COLUMNS,
    ]


def test_timing_schema_is_the_nsys_ranges_schema(tmp_path):
    assert nsys_range_columns() == timing.RANGE_COLUMNS
    rec = timing.TimingRecorder(tmp_path)
    outer = wrapping.make_wrapper(lambda: [inner() for _ in range(3)], "bench.outer", recorder=rec)
    inner = wrapping.make_wrapper(lambda: None, "bench.inner", recorder=rec)
    outer()
    outer()
    rec.close()
    df = timing.load_timing_dir(tmp_path)
    assert list(df.columns) == nsys_range_columns()
    assert df["range_id"].is_unique and set(df["domain"]) == {"bench"} and set(df["kind"]) == {"push_pop"}
    assert df.groupby("name").size().to_dict() == {"bench.inner": 6, "bench.outer": 2}
    assert (df["global_tid"] // 2**24 == df["pid"]).all() and (df["global_tid"] % 2**24 == df["tid"]).all()
    assert df[timing.COUNT_COLUMNS].isna().all().all() and df[timing.GPU_NS_COLUMNS].isna().all().all()
    outer_rows = df[df["name"] == "bench.outer"]
    inner_rows = df[df["name"] == "bench.inner"]
    for o in outer_rows.itertuples():  # inner ranges nest inside their outer one
        inside = inner_rows[(inner_rows["start_ns"] >= o.start_ns) & (inner_rows["end_ns"] <= o.end_ns)]
        assert len(inside) == 3
    summary = summarize_ranges(df)
    assert summary.set_index("name")["count"].to_dict() == {"bench.inner": 6, "bench.outer": 2}
    assert (summary["cpu_ns_total"] > 0).all() and summary["gpu_span_ns_mean"].isna().all()


def test_timing_file_reading_edge_cases(tmp_path):
    head = {
        "format": "bench-timing",
        "version": 1,
        "fields": list(timing.FIELDS),
        "gpu_fields": list(timing.GPU_FIELDS),
        "domain": "bench",
        "pid": 42,
    }
    lines = [
        json.dumps(head),
        '[1,"bench.a",42,100,200]',
        '[2,"bench.b",42,150,180]',
        '["gpu",1,1000,1900,900]',
        '[3,"bench.a",42,300,4',
    ]  # torn last line (killed mid-write)
    (tmp_path / "timing-42.jsonl").write_text("\n".join(lines))
    df = timing.load_timing_dir(tmp_path)
    assert list(df["name"]) == ["bench.a", "bench.b"] and list(df["cpu_ns"]) == [100, 30]
    assert df.loc[0, "gpu_span_ns"] == 900 and df.loc[0, "gpu_start_ns"] == 1000 and pd.isna(df.loc[1, "gpu_span_ns"])
    assert list(df["range_id"]) == [42 * 2**32 + 1, 42 * 2**32 + 2]
    (tmp_path / "timing-43.jsonl").write_text(json.dumps({**head, "version": 99}) + "\n")
    with pytest.raises(timing.TimingFormatError, match="version 99 is not supported"):
        timing.load_timing_dir(tmp_path)
    empty = timing.load_timing_dir(tmp_path / "none")
    assert list(empty.columns) == nsys_range_columns() and len(empty) == 0


def test_written_at_once_so_a_sigkill_loses_nothing_finished(tmp_path):
    rec = timing.TimingRecorder(tmp_path)
    f = wrapping.make_wrapper(lambda: None, "bench.x", recorder=rec)
    f()
    f()
    # No close(): what a SIGKILLed EngineCore leaves behind.
    assert len(timing.load_timing_dir(tmp_path)) == 2


def _child_records(rec, wrapper):
    wrapper()  # written by the child, under the child's pid; its exit hook (Finalize) runs at exit


def test_forked_child_writes_its_own_file(tmp_path):
    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("no fork")
    rec = timing.TimingRecorder(tmp_path, flush_interval_s=3600)
    f = wrapping.make_wrapper(lambda: None, "bench.x", recorder=rec)
    rec.next_flush_ns = 2**62
    f()  # pending in the parent when it forks
    child = multiprocessing.get_context("fork").Process(target=_child_records, args=(rec, f))
    child.start()
    child.join(60)
    assert child.exitcode == 0
    rec.close()
    df = timing.load_timing_dir(tmp_path)
    assert df.groupby("pid").size().to_dict() == {os.getpid(): 1, child.pid: 1}


# The wrappers' cost per call is a benchmark, not a test: benchmarks/plugin_overhead.py.


# --- GPU ---------------------------------------------------------------------------------------------------------


@pytest.mark.gpu
def test_cuda_event_timing_and_graph_capture(tmp_path):
    torch = need("torch", ENGINE)
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    a = torch.randn(4096, 4096, device="cuda")
    a @ a  # the first matmul also creates the cuBLAS handle (100+ ms): keep it out of the timed calls
    torch.cuda.synchronize()
    rec = timing.TimingRecorder(tmp_path, gpu_interval_s=0.0)
    matmul = wrapping.make_wrapper(lambda x: x @ x, "bench.matmul", recorder=rec)
    for _ in range(5):
        matmul(a)
    # Inside a capture no event may be recorded (it would be captured and break the graph or the timing).
    graph = torch.cuda.CUDAGraph()
    static = a.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        matmul(static)  # warm-up on a side stream, as torch recommends
    torch.cuda.current_stream().wait_stream(side)
    with torch.cuda.graph(graph):
        out = matmul(static)
    replay = wrapping.make_wrapper(graph.replay, "bench.replay", recorder=rec)
    for _ in range(3):
        replay()
    torch.cuda.synchronize()
    assert out.shape == a.shape
    rec.close()
    df = timing.load_timing_dir(tmp_path)
    counts = df.groupby("name").size().to_dict()
    assert counts == {"bench.matmul": 7, "bench.replay": 3}
    timed = df[df["gpu_span_ns"].notna()]
    assert len(timed) == 9  # all but the one recorded during capture
    captured = df[(df["name"] == "bench.matmul") & df["gpu_span_ns"].isna()]
    assert len(captured) == 1
    # A 4096^3 fp32 matmul takes 0.1-10 ms on any recent GPU.
    spans = timed["gpu_span_ns"].astype("int64")
    assert spans.between(50_000, 50_000_000).all(), spans.tolist()
    assert (timed["gpu_end_ns"] - timed["gpu_start_ns"] == timed["gpu_span_ns"]).all()
    # On the CPU clock: GPU work starts after the call began (anchor error is ~10 us) and ranges are ordered.
    assert (timed["gpu_start_ns"].astype("int64") >= timed["start_ns"] - 1_000_000).all()
    assert timed["gpu_start_ns"].astype("int64").is_monotonic_increasing
