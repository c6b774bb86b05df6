"""Apply / status / revert / idempotence and every bad input, on unpacked real wheels of vLLM 0.26.0 and 0.33.0;
and the committed patches are exactly what scripts/edit_vllm_sources.py makes from the pristine sources."""

from __future__ import annotations

import importlib.util
import json
import stat
import subprocess
import sys

import pytest

from bench.cli import main
from bench.core.errors import BenchError
from bench.models.dcp_local import verify_rows
from bench.patching import apply_series, locate_vllm, manager, patch_report, revert_series
from bench.patching.series import PATCHES_DIR, all_series
from tests.conftest import HELPERS, REPO, copy_tree, tree_bytes, vllm_env

pytestmark = pytest.mark.slow

EXPECTED_BEFORE = {
    "0.26.0": {"draft-overrides": "not applied", "dcp-draft-seq-lens": "not applied", "dcp-spec-decode": "not applied"},
    "0.33.0": {
        "draft-overrides": "not applied",
        "dcp-draft-seq-lens": "already upstream",
        "dcp-spec-decode": "not applied",
    },
}


@pytest.fixture(params=["0.26.0", "0.33.0"])
def vllm_copy(request, tmp_path):
    src = request.getfixturevalue("wheel_026" if request.param == "0.26.0" else "wheel_033")
    return request.param, copy_tree(src, tmp_path / "site")


def states(base):
    return {f["fix"]: f["state"] for f in patch_report(locate_vllm(base))["fixes"]}


def test_apply_status_revert_idempotence(vllm_copy, capsys):
    version, base = vllm_copy
    pristine = tree_bytes(base)
    install = locate_vllm(base)
    assert (install.version, install.distribution) == (version, "vllm")
    assert states(base) == EXPECTED_BEFORE[version]

    assert apply_series(install).changed
    after = {k: "applied" if v == "not applied" else v for k, v in EXPECTED_BEFORE[version].items()}
    assert states(base) == after
    assert all(f["in_code"] for f in patch_report(install)["fixes"])

    again = apply_series(install)
    assert not again.changed and "already applied" in again.message

    record = json.loads((install.root / manager.STATE_FILE).read_text())
    assert record[-1]["action"] == "apply" and record[-1]["series"] == version.rsplit(".", 1)[0]
    assert all(len(h["before"]) == 64 for h in record[-1]["files"].values())

    assert main(["patch", "verify", "--vllm-root", str(base)]) == 0
    assert revert_series(install).changed
    assert states(base) == EXPECTED_BEFORE[version]
    now = tree_bytes(base)
    now.pop(f"vllm/{manager.STATE_FILE}")
    assert now == pristine, "revert must restore byte-identical originals"
    assert not revert_series(install).changed
    assert main(["patch", "verify", "--vllm-root", str(base)]) == 1
    assert "not verified: draft-overrides" in capsys.readouterr().err


def test_dry_run_shows_diff_and_writes_nothing(vllm_copy, capsys):
    _, base = vllm_copy
    pristine = tree_bytes(base)
    assert main(["patch", "apply", "--dry-run", "--vllm-root", str(base)]) == 0
    out = capsys.readouterr().out
    assert "+    draft_attention_backend: AttentionBackendEnum" in out and "dry run" in out
    assert tree_bytes(base) == pristine


def test_unsupported_version_lists_supported_and_changes_nothing(vllm_copy, capsys):
    _, base = vllm_copy
    version_file = base / "vllm" / "_version.py"
    version_file.write_text(
        version_file.read_text().replace("__version__ = version = '0.", "__version__ = version = '9.")
    )
    pristine = tree_bytes(base)
    assert main(["patch", "apply", "--vllm-root", str(base)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: vLLM 9.") and "not supported" in err and "0.26: 0.26.*" in err
    assert "Traceback" not in err
    assert tree_bytes(base) == pristine


def test_locally_modified_file_is_named_and_nothing_changes(vllm_copy):
    _, base = vllm_copy
    target = base / "vllm/v1/spec_decode/llm_base_proposer.py"
    target.write_text(target.read_text() + "# local edit\n")
    pristine = tree_bytes(base)
    with pytest.raises(BenchError, match="hash mismatch.*vllm/v1/spec_decode/llm_base_proposer.py"):
        apply_series(locate_vllm(base))
    assert tree_bytes(base) == pristine
    status = {f["fix"]: f for f in patch_report(locate_vllm(base))["fixes"]}
    assert status["draft-overrides"]["state"] == "cannot apply"
    assert "llm_base_proposer.py" in status["draft-overrides"]["detail"]


def test_read_only_install_is_refused_untouched(vllm_copy):
    _, base = vllm_copy
    target = base / "vllm/config/speculative.py"
    target.chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
    pristine = tree_bytes(base)
    try:
        with pytest.raises(BenchError, match="read-only vLLM install.*vllm/config/speculative.py"):
            apply_series(locate_vllm(base))
    finally:
        target.chmod(0o644)
    assert tree_bytes(base) == pristine


def test_unknown_series_and_wrong_series(vllm_copy):
    version, base = vllm_copy
    with pytest.raises(BenchError, match="unknown patch series 'nope'; known: 0.26, 0.32-cpu, 0.33"):
        apply_series(locate_vllm(base), "nope")
    other = "0.33" if version == "0.26.0" else "0.26"
    pristine = tree_bytes(base)
    with pytest.raises(BenchError, match="not supported"):
        apply_series(locate_vllm(base), other)
    assert tree_bytes(base) == pristine


def test_failure_mid_write_restores_every_file(vllm_copy, monkeypatch):
    _, base = vllm_copy
    pristine = tree_bytes(base)
    real_write, written, calls = manager._atomic_write, [], []

    def failing_write(path, text):
        calls.append(path)
        if len(calls) == 2:  # the second file of the series fails; the restore writes go through
            raise OSError("disk full (injected)")
        written.append(path)
        real_write(path, text)

    monkeypatch.setattr(manager, "_atomic_write", failing_write)
    with pytest.raises(BenchError, match="every file restored: disk full"):
        apply_series(locate_vllm(base))
    monkeypatch.setattr(manager, "_atomic_write", real_write)
    assert len(calls) == 3, "one write, one failure, one restore"
    assert tree_bytes(base) == pristine


def test_bad_vllm_root(tmp_path):
    with pytest.raises(BenchError, match="no such folder"):
        locate_vllm(tmp_path / "missing")
    with pytest.raises(BenchError, match="neither it nor its vllm/ subfolder is a vllm package"):
        locate_vllm(tmp_path)


def test_verify_fails_when_a_runner_file_of_the_fix_is_unpatched(vllm_copy, capsys):
    """The config accepting the draft_* keys is not enough: a runner that ignores them makes the draft inherit
    the target's settings. verify probes every file the fix edits."""
    _version, base = vllm_copy
    runner = base / "vllm/v1/spec_decode/llm_base_proposer.py"
    original = runner.read_bytes()
    apply_series(locate_vllm(base))
    assert main(["patch", "verify", "--vllm-root", str(base)]) == 0
    runner.write_bytes(original)  # config patched, V1 runner not
    assert main(["patch", "verify", "--vllm-root", str(base)]) == 1
    assert "not verified: draft-overrides" in capsys.readouterr().err
    fix = next(f for f in patch_report(locate_vllm(base))["fixes"] if f["fix"] == "draft-overrides")
    assert fix["in_code"] is False and fix["state"] == "cannot apply"


def edit_script():
    spec = importlib.util.spec_from_file_location("edit_vllm_sources", REPO / "scripts" / "edit_vllm_sources.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    "series, pristine_fixture", [("0.26", "wheel_026"), ("0.32-cpu", "pristine_032_cpu"), ("0.33", "wheel_033")]
)
def test_committed_patches_are_what_the_edit_script_makes(series, pristine_fixture, request):
    """One source for the patches: regenerating every series from pristine vLLM reproduces each committed .patch
    byte for byte and each series.toml hash."""
    pristine = request.getfixturevalue(pristine_fixture)
    script = edit_script()
    assert set(script.SERIES) == {s.name for s in all_series()}
    assert script.differences(series, pristine) == []


def test_a_drifted_patch_or_hash_is_reported(wheel_033, tmp_path):
    """The check above can fail: a copy of patches/0.33 with one changed line and one wrong hash."""
    script = edit_script()
    folder = tmp_path / "0.33"
    copy_tree(PATCHES_DIR / "0.33", folder)
    patch = folder / "0001-draft-overrides.patch"
    patch.write_text(patch.read_text().replace("Legacy name", "Old name", 1))
    toml = folder / "series.toml"
    toml.write_text(toml.read_text().replace('after = "8cb7', 'after = "0000', 1))
    found = script.differences("0.33", wheel_033, tmp_path)
    assert found[0] == "0001-draft-overrides.patch: differs from the regenerated patch"
    assert found[1].startswith("series.toml: hashes of vllm/config/speculative.py differ") and len(found) == 2


ROW_CASES = [
    {"seq_lens": [10, 4, 7], "query_lens": [4, 4, 1], "size": 2, "interleave": 1, "num_rows": 11},
    {"seq_lens": [8195, 8196, 8197, 8198], "query_lens": [4, 4, 4, 4], "size": 8, "interleave": 1, "num_rows": 16},
    {"seq_lens": [8195, 8196, 8197, 8198], "query_lens": [4, 4, 4, 4], "size": 4, "interleave": 64, "num_rows": 20},
    {"seq_lens": [17, 64, 65, 129], "query_lens": [2, 2, 2, 2], "size": 4, "interleave": 16, "num_rows": 8},
    {"seq_lens": [63, 64, 65], "query_lens": [0, 3, 3], "size": 8, "interleave": 8, "num_rows": 9},
]


def test_patched_flashmla_rows_match_the_reference_on_every_rank(vllm_copy, tmp_path):
    """The patched module's own per-token rows (the function and the builder method, run on CPU tensors) give
    every query token the request and DCP-local length bench.models.dcp_local brute-force-checks, for every rank,
    padding rows length 0, block-table rows copied from their request, in the builder's persistent buffers, which a
    block table of another width does not replace (an error: captured FULL CUDA graphs read them)."""
    version, base = vllm_copy
    apply_series(locate_vllm(base))
    cases = [{**c, "rank": r} for c in ROW_CASES for r in range(c["size"])]
    out = run_probe("dcp_rows_probe.py", base, tmp_path, cases)
    assert out["vllm_version"] == version and out["flashmla_file"].startswith(str(base))
    for case, got in zip(cases, out["results"], strict=True):
        want = verify_rows(case["seq_lens"], case["query_lens"], case["size"], case["rank"], case["interleave"])
        real = len(want)
        want_lens = [r.local_len for r in want] + [0] * (case["num_rows"] - real)
        assert got["local_len"] == got["builder_local_len"] == want_lens, case
        assert got["local_dtype"] == "torch.int32"
        assert got["request"][:real] == [r.request for r in want], case
        assert got["builder_table_first_column"][:real] == [1000 * r.request for r in want]
        assert got["builder_table_width"] == 5 and got["persistent_buffers"], case
        assert (
            got["too_many_rows"]
            == f"{case['num_rows'] + 4} DCP decode rows exceed the {case['num_rows'] + 3} allocated"
        )
        assert got["width_change"] == (
            "block table width changed from 5 to 6: the DCP decode rows' persistent block table cannot be reallocated"
        )


def test_unpatched_flashmla_has_no_rows(vllm_copy):
    _, base = vllm_copy
    text = (base / "vllm/v1/attention/backends/mla/flashmla.py").read_text()
    assert "dcp_spec_decode_rows" not in text and "num_decodes = attn_metadata.num_decodes" in text
    fix = next(f for f in patch_report(locate_vllm(base))["fixes"] if f["fix"] == "dcp-spec-decode")
    assert fix["in_code"] is False and fix["state"] == "not applied"


# The metadata builder's __init__ (tests/helpers/flashmla_builder_probe.py: the real FlashMLA, MLA-common and
# reorder-threshold initialisers with a stand-in config and DCP group), per case: the reorder threshold patched on
# 0.26 and 0.33, and unpatched; the per-row buffers' rows (max_num_seqs 16 x threshold) where the patch lifts it.
# parallel_drafting: 0.26 counts 1 + 2k; 0.33 counts 1 + 2k on the V1 runner only (max_decode_query_len).
BUILDER_CASES = [
    # (case, patched threshold {0.26, 0.33}, unpatched threshold)
    ({"dcp": 2, "group": 2, "rank": 1, "k": 3}, {"0.26.0": 4, "0.33.0": 4}, 1),
    ({"dcp": 8, "group": 8, "rank": 5, "k": 3, "parallel_drafting": True}, {"0.26.0": 7, "0.33.0": 4}, 1),
    (
        {"dcp": 8, "group": 8, "rank": 7, "k": 3, "parallel_drafting": True, "v2_runner": False},
        {"0.26.0": 7, "0.33.0": 7},
        1,
    ),
    ({"dcp": 4, "group": 4, "rank": 3, "k": 1, "graphs": "PIECEWISE"}, {"0.26.0": 2, "0.33.0": 2}, 1),
    ({"dcp": 2, "group": 2, "rank": 0, "k": 3, "cache_dtype": "auto"}, {"0.26.0": 4, "0.33.0": 4}, 1),
    # no rows: no speculative decoding; DCP 1; a group of one (a draft replicated at DCP 1); PCP
    ({"dcp": 2, "group": 2, "rank": 0, "k": None}, {"0.26.0": 1, "0.33.0": 1}, 1),
    ({"dcp": 1, "group": 1, "rank": 0, "k": 3}, {"0.26.0": 128, "0.33.0": 128}, 128),
    ({"dcp": 2, "group": 1, "rank": 0, "k": 3}, {"0.26.0": 1, "0.33.0": 1}, 1),
    ({"dcp": 2, "group": 2, "rank": 1, "k": 3, "pcp": 2}, {"0.26.0": 1, "0.33.0": 1}, 1),
]
BUILDER_DEFAULTS = {
    "pcp": 1,
    "parallel_drafting": False,
    "v2_runner": True,
    "graphs": "FULL_AND_PIECEWISE",
    "cache_dtype": "fp8",
}


def run_probe(script: str, base, tmp_path, cases) -> dict:
    """A probe of tests/helpers run on the vLLM copy at `base` with `cases`: its last stdout line, as JSON."""
    proc = subprocess.run(
        [sys.executable, str(HELPERS / script), json.dumps(cases)],
        capture_output=True,
        text=True,
        env={**vllm_env(tmp_path), "PYTHONPATH": str(base)},
        cwd=tmp_path,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def builder_probe(base, tmp_path, cases):
    out = run_probe("flashmla_builder_probe.py", base, tmp_path, cases)
    assert out["flashmla_file"].startswith(str(base)) and out["max_num_seqs"] == 16
    return out


def test_flashmla_builder_init_lifts_the_threshold_and_sizes_the_rows(vllm_copy, tmp_path):
    """The patched FlashMLAMetadataBuilder.__init__, run for real on CPU: under DCP with speculative decoding it
    takes the spec-as-decode threshold 1 + k (not DCP's forced 1), learns its DCP rank, and sizes the persistent
    per-row lengths (int32) and the FULL-graph `cg_buf_num_splits` for max_num_seqs x threshold rows (+ 1); the
    block-table buffer waits for the first build. Without speculative decoding, at DCP 1, in a DCP group of one or
    with PCP, nothing changes. The unpatched builder, the control, keeps threshold 1 under DCP."""
    version, base = vllm_copy
    cases = [{**BUILDER_DEFAULTS, **case} for case, _, _ in BUILDER_CASES]
    unpatched = builder_probe(base, tmp_path, cases)
    apply_series(locate_vllm(base))
    patched = builder_probe(base, tmp_path, cases)
    assert patched["vllm_version"] == unpatched["vllm_version"] == version
    for (case, want, want_unpatched), full, got, before in zip(
        BUILDER_CASES, cases, patched["results"], unpatched["results"], strict=True
    ):
        threshold = want[version]
        assert (got["threshold"], before["threshold"]) == (threshold, want_unpatched), case
        assert before["dcp_spec_decode"] is None and before["rows_seq_lens"] is None, case
        assert got["dcp_world_size"] == before["dcp_world_size"] == full["group"]
        assert got["is_fp8_kvcache"] == (full["cache_dtype"] == "fp8")
        full_graphs = full["graphs"] != "PIECEWISE"
        lifted = full["dcp"] > 1 and full["group"] > 1 and full["k"] is not None and full["pcp"] == 1
        assert got["dcp_spec_decode"] is lifted, case
        if lifted:
            assert threshold == 1 + case["k"] * (2 if threshold > 1 + case["k"] else 1)
            assert got["dcp_rank"] == full["rank"]
            assert (got["rows_seq_lens"], got["rows_dtype"]) == ([16 * threshold], "torch.int32")
            assert got["rows_block_table"] is None
            assert got["num_splits"] == ([16 * threshold + 1] if full_graphs else None)
        else:
            assert got["rows_seq_lens"] is None and got["dcp_rank"] is None
            assert got["num_splits"] == ([17] if full_graphs else None)
        assert before["num_splits"] == ([17] if full_graphs else None)


def test_a_subset_of_the_series_applies_verifies_and_reverts(wheel_026, tmp_path, capsys):
    """`apply --except dcp-spec-decode` on the real 0.26.0 wheel: the other two fixes applied, that one not (status
    per fix, verify of the subset, the record); a full apply then adds only it; the subset again takes only it back;
    `--only` picks; revert restores byte-identical originals. The A/B of issue 39 item 5 switches between these."""
    base = copy_tree(wheel_026, tmp_path / "site")
    pristine = tree_bytes(base)
    flashmla_file = base / "vllm/v1/attention/backends/mla/flashmla.py"
    root = ["--vllm-root", str(base)]
    assert main(["patch", "apply", "--except", "dcp-spec-decode", *root]) == 0
    out = capsys.readouterr().out
    assert "series 0.26 without dcp-spec-decode set (draft-overrides applied, dcp-draft-seq-lens applied)" in out
    want = {"draft-overrides": "applied", "dcp-draft-seq-lens": "applied", "dcp-spec-decode": "not applied"}
    assert states(base) == want
    assert flashmla_file.read_bytes() == pristine["vllm/v1/attention/backends/mla/flashmla.py"]
    assert main(["patch", "status", *root]) == 0
    out = capsys.readouterr().out
    assert "dcp-spec-decode      not applied       (code lacks it)" in out
    assert "last recorded action: apply series 0.26 without dcp-spec-decode at" in out
    record = json.loads((base / "vllm" / manager.STATE_FILE).read_text())
    assert record[-1]["left_out"] == ["dcp-spec-decode"] and record[-1]["action"] == "apply"
    assert main(["patch", "verify", "--except", "dcp-spec-decode", *root]) == 0
    assert "verified: every fix but dcp-spec-decode is in the code, and those are not" in capsys.readouterr().out
    assert main(["patch", "verify", *root]) == 1  # the whole series is not there
    assert "not verified: dcp-spec-decode" in capsys.readouterr().err

    full = apply_series(locate_vllm(base))
    assert full.changed and full.message == "series 0.26 applied: vllm/v1/attention/backends/mla/flashmla.py"
    assert main(["patch", "verify", "--except", "dcp-spec-decode", *root]) == 1
    assert "not left out: dcp-spec-decode present" in capsys.readouterr().err
    again = apply_series(locate_vllm(base), exclude=["dcp-spec-decode"])
    assert again.message == (
        "series 0.26 without dcp-spec-decode set (dcp-spec-decode reverted): vllm/v1/attention/backends/mla/flashmla.py"
    )
    assert states(base) == want
    same = apply_series(locate_vllm(base), exclude=["dcp-spec-decode"])
    assert not same.changed and "already applied: nothing to do" in same.message

    apply_series(locate_vllm(base), only=["dcp-spec-decode"])
    assert states(base) == {
        "draft-overrides": "not applied",
        "dcp-draft-seq-lens": "not applied",
        "dcp-spec-decode": "applied",
    }
    assert revert_series(locate_vllm(base)).changed
    now = tree_bytes(base)
    now.pop(f"vllm/{manager.STATE_FILE}")
    assert now == pristine, "revert after subsets must restore byte-identical originals"


def test_a_subset_naming_a_fix_the_series_does_not_patch_is_refused(wheel_033, tmp_path, capsys):
    """On 0.33, dcp-draft-seq-lens is upstream: it cannot be left out, and a typo is named with the series'
    patches; nothing is written."""
    base = copy_tree(wheel_033, tmp_path / "site")
    pristine = tree_bytes(base)
    with pytest.raises(BenchError, match="fix 'dcp-draft-seq-lens': already upstream"):
        apply_series(locate_vllm(base), exclude=["dcp-draft-seq-lens"])
    with pytest.raises(BenchError, match="fix 'dcp-spec': not a fix of the series; series 0.33 patches: draft-overr"):
        apply_series(locate_vllm(base), only=["dcp-spec"])
    with pytest.raises(SystemExit):  # argparse: --only and --except exclude each other
        main(["patch", "apply", "--only", "draft-overrides", "--except", "dcp-spec-decode", "--vllm-root", str(base)])
    assert "not allowed with argument" in capsys.readouterr().err
    assert tree_bytes(base) == pristine
