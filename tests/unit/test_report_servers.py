"""The report's server table (bench.report.servers) from real H200 server logs of tests/data."""

from __future__ import annotations

import shutil
from pathlib import Path

from bench.report.build import build_report
from bench.report.servers import server_table
from bench.results.store import SweepStore

EXAMPLE = Path(__file__).resolve().parents[1] / "data" / "results" / "tiny-gpu-h200"


def test_one_row_per_engine_with_vllms_own_startup_lines():
    table = server_table(EXAMPLE, SweepStore(EXAMPLE).records()).set_index("engine_id")
    assert set(table.index) == {p.name[len("server-") : -len(".log")] for p in (EXAMPLE / "logs").glob("*.log")}
    row = table.loc["3397f50986de"]
    assert (row.model_gib, row.kv_tokens, row.init_s, row.starts) == ("0.3", "12,805,664", "46.22", 1)
    assert row.ready_s is not None and float(row.ready_s) > 0


def test_a_log_with_two_starts_shows_each_starts_value_and_a_missing_log_no_row(tmp_path):
    root = Path(shutil.copytree(EXAMPLE, tmp_path / "r"))
    log = root / "logs" / "server-3397f50986de.log"
    log.write_text(
        log.read_text()
        + "# bench: python -m vllm.entrypoints.openai.api_server\n"
        + "INFO GPU KV cache size: 1,000 tokens\nINFO init engine (profile) took 9.5 s (compilation: 1 s)\n"
    )
    (root / "logs" / "server-7d1628a1b6a9.log").unlink()
    table = server_table(root, SweepStore(root).records()).set_index("engine_id")
    assert "7d1628a1b6a9" not in table.index
    row = table.loc["3397f50986de"]
    assert (row.kv_tokens, row.init_s, row.starts) == ("12,805,664/1,000", "46.22/9.5", 2)
    paths = build_report(root, tmp_path / "report")
    assert (
        "## Servers" in paths["summary"].read_text() and paths["servers_csv"].read_text().count("\n") == len(table) + 1
    )


def test_a_start_that_died_early_keeps_the_other_starts_values_in_line(tmp_path):
    """Three starts in one log (bench.engine.server heads each with "# bench: "); the first died after loading its model:
    each column shows a value per start in start order, "-" where that start logged nothing, so the second start's
    KV tokens stand under the second start's model load (before, "a/b" read as the first two starts' values)."""
    root = Path(shutil.copytree(EXAMPLE, tmp_path / "r"))
    log = root / "logs" / "server-3397f50986de.log"
    one = log.read_text()
    assert one.startswith("# bench: ") and one.count("# bench: ") == 1
    died = one.split("GPU KV cache size")[0].rsplit("\n", 1)[0] + "\nRuntimeError: CUDA out of memory\n"
    assert "Model loading took" in died and "init engine" not in died
    log.write_text(died + one + one.replace("12,805,664", "12,000,000"))
    row = server_table(root, SweepStore(root).records()).set_index("engine_id").loc["3397f50986de"]
    assert row.starts == 3
    assert row.model_gib == "0.3"  # the same in every start: one value
    assert row.kv_tokens == "-/12,805,664/12,000,000"
    assert row.init_s == "-/46.22/46.22"


# vLLM 0.26.0's own lines (reports/examples/kimi-rank-h100-l40-starts, start-1 and start-2 of one FLASHMLA server)
_FRESH = (
    "INFO [backends.py:393] Compiling a graph for compile range (1, 8192) takes 23.94 s\n"
    "INFO [decorators.py:708] saved AOT compiled function to /tmp/vllm-cache/torch_compile_cache/torch_aot_compile/x\n"
    "INFO [monitor.py:53] torch.compile took 41.43 s in total\n"
)
_LOADED = (
    "INFO [backends.py:393] Compiling a graph for compile range (1, 8192) takes 1.76 s\n"
    "INFO [decorators.py:311] Directly load AOT compilation from path /tmp/vllm-cache/torch_compile_cache/x\n"
    "INFO [monitor.py:53] torch.compile took 4.42 s in total\n"
)
# reports/examples/kimi-rank-h200/nsys/flashmla-fp8: the draft's graphs from the cache, its AOT artefact saved anew
_LOADED_SAVED = (
    "INFO [backends.py:292] Directly load the compiled graph(s) for compile range (1, 8192) from the cache, took 0.092 s\n"
    "INFO [decorators.py:708] saved AOT compiled function to /tmp/vllm-cache/torch_compile_cache/torch_aot_compile/y\n"
    "INFO [monitor.py:53] torch.compile took 1.05 s in total\n"
)


def test_compile_state_judges_each_compiled_unit_by_whether_it_loaded_from_the_cache():
    from bench.report.servers import compile_state

    assert compile_state(_FRESH) == "compiled"
    assert compile_state(_LOADED) == "cache-loaded", "0.26 logs 'Compiling a graph' (2 s) before it loads the AOT"
    assert compile_state(_LOADED + _FRESH) == "compiled", "the target loaded, the draft compiled afresh"
    assert compile_state(_LOADED + _LOADED_SAVED) == "cache-loaded", "a saved AOT artefact is not a compile"
    assert compile_state("INFO Compiling a graph for compile range (1, 8192) takes 9 s\n") == "compiled"
    assert compile_state("INFO Directly load the compiled graph(s) for compile range (1, 8192)\n") == "cache-loaded"
    assert compile_state("INFO eager\n") is None


def test_machine_id_prefers_the_host_and_boot_id_and_falls_back_to_the_os_build():
    from bench.results.environment import host_identity, machine_id

    here = host_identity()
    assert here["name"] and (here["boot_id"] is None or len(here["boot_id"]) >= 8)
    a = {"host": {"name": "h", "boot_id": "0123456789ab"}, "platform": "Linux-x"}
    b = {"host": {"name": "h", "boot_id": "ffff456789ab"}, "platform": "Linux-x"}
    assert machine_id(a) != machine_id(b), "a reboot (a new lease) is another machine"
    old1 = {"platform": "Linux-6.18-v1294", "machine": {"driver": "580"}}
    old2 = {"platform": "Linux-6.18-v1272", "machine": {"driver": "580"}}
    assert machine_id(old1) != machine_id(old2) and machine_id(old1) == machine_id(dict(old1))


def test_the_start_before_vllms_timed_phases_from_the_logs_own_clock():
    """`logged_s`: the API server's first line to 'Starting vLLM server'; `spawn_s`: to the engine process's first
    line; whole seconds of vLLM's stamps, [] where a line is missing or the stamps run backwards (a year's turn)."""
    from bench.report.servers import log_phases

    log = (
        "# bench: python -m vllm.entrypoints.openai.api_server\n"
        "INFO 12-07 15:03:33 [plugin.py:154] bench effective-configuration record active in pid 5040\n"
        "(APIServer pid=5040) INFO 12-07 15:03:33 [api_utils.py:345] version 0.26.0\n"
        "(EngineCore pid=5253) INFO 12-07 15:04:02 [plugin.py:154] bench effective-configuration record active\n"
        "(EngineCore pid=5253) INFO 12-07 15:04:36 [core.py:340] init engine (profile) took 23.63 s\n"
        "(APIServer pid=5040) INFO 12-07 15:04:36 [api_server.py:677] Starting vLLM server on http://127.0.0.1:1\n"
    )
    assert log_phases(log) == {"logged_s": ["63"], "spawn_s": ["29"]}
    died = log.split("(EngineCore")[0]
    assert log_phases(died) == {"logged_s": [], "spawn_s": []}
    assert log_phases(log.replace("12-07 15:03:33", "12-31 23:59:59")) == {"logged_s": [], "spawn_s": []}
    assert log_phases("no stamps at all") == {"logged_s": [], "spawn_s": []}


def test_the_phases_of_committed_h100_starts():
    """reports/examples/kimi-rank-h100-l40-ab-sleep: a cache-loaded FLASHMLA start of 86 s spent 63 s between the API
    server's first line and serving, 29 s of them before the engine process logged."""
    root = Path(__file__).resolve().parents[2] / "reports" / "examples" / "kimi-rank-h100-l40-ab-sleep"
    root = root / "baseline" / "round-0"
    row = server_table(root, SweepStore(root).records()).iloc[0]
    assert (row.ready_s, row.logged_s, row.spawn_s, row.init_s) == ("86", "63", "29", "23.63")
