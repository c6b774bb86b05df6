from bench.patching.probes import PROBES
from bench.patching.series import all_series


def test_every_series_is_consistent():
    series = all_series()
    assert {s.name for s in series} >= {"0.26", "0.32-cpu", "0.33"}
    for s in series:
        assert set(s.upstream) <= set(PROBES), s.name
        fix_ids = [f.id for f in s.fixes]
        assert set(fix_ids) | set(s.upstream) == set(PROBES), f"{s.name} must cover every fix"
        assert not set(fix_ids) & set(s.upstream)
        for fix in s.fixes:
            assert {d.path for d in fix.diffs()} == {f.path for f in fix.files}
            for f in fix.files:
                assert len(f.before) == len(f.after) == 64 and f.before != f.after


def test_0_26_carries_both_fixes_and_later_lines_only_the_overrides():
    by_name = {s.name: s for s in all_series()}
    assert [f.id for f in by_name["0.26"].fixes] == ["draft-overrides", "dcp-draft-seq-lens"]
    for name in ("0.32-cpu", "0.33"):
        assert [f.id for f in by_name[name].fixes] == ["draft-overrides"]
        assert by_name[name].upstream == ("dcp-draft-seq-lens",)
    runner_paths = {f.path for f in by_name["0.26"].fixes[0].files}
    assert {"vllm/v1/spec_decode/llm_base_proposer.py", "vllm/v1/worker/gpu/spec_decode/eagle/utils.py"} <= runner_paths
