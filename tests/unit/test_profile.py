import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from bench.errors import BenchError
from bench.profile import PROFILES_DIR, load_profile, parse_profile


@pytest.mark.parametrize("path", sorted(PROFILES_DIR.glob("*.toml")), ids=lambda p: p.stem)
@pytest.mark.parametrize("platform", ["cpu", "gpu"])
def test_shipped_profiles_load_on_both_platforms(path, platform):
    profile = load_profile(str(path), platform)
    assert profile.name == path.stem and profile.axes.shapes


def test_tiny_picks_platform_axes():
    cpu, gpu = load_profile("tiny", "cpu"), load_profile("tiny", "gpu")
    assert cpu.axes.draft_attention_backend == ["CPU_MLA"] and cpu.model.weights == "zero-final-norm"
    assert set(gpu.axes.draft_attention_backend) == {"TRITON_MLA", "FLASHMLA"}
    assert gpu.acceptance.mode == "synthetic" and gpu.acceptance.rates == [0.65, 0.40, 0.25]
    assert len(gpu.axes.shapes) >= 3


@pytest.mark.parametrize(
    "data, message",
    [
        ({"name": "x", "axes": {"shapez": ["1x1x2"]}}, "t.toml: axes.shapez: unknown key; allowed here: dcp_size,"),
        ({"name": "x", "bogus": 1}, "t.toml: bogus: unknown key; allowed here: acceptance, axes, description"),
        ({"name": "x", "axes": {"shapes": ["4x128"]}}, "shape '4x128' is not 'CONCURRENCYxINPUT_LENxOUTPUT_LEN'"),
        ({"name": "x", "axes": {"dcp_size": [0]}}, "axes.dcp_size: Value error, values must be >= 1"),
        ({"name": "x", "axes": {"dcp_size": "2"}}, "axes.dcp_size: Input should be a valid list"),
        ({"name": "x", "acceptance": {"mode": "synthetic"}}, "exactly one of 'rates' or 'mean_length'"),
        ({"name": "x", "acceptance": {"mode": "fake"}}, "Input should be 'real' or 'synthetic' (got 'fake')"),
        ({"name": "x", "acceptance": {"mode": "synthetic", "rates": [1.5]}}, "rates must be a non-empty list"),
        ({"name": "x", "server": {"port": 8000}}, "server keys ['port'] are set by the suite"),
        ({"name": "x", "speculative": {"num_speculative_tokens": 3}}, "come from [model], [axes] or [acceptance]"),
        ({"name": "x", "when": {"tpu": {}}}, "[when] may only hold tables 'cpu' and 'gpu'"),
        ({"name": "x", "when": {"gpu": {"axes": {"shapes": []}}}}, "(with [when.gpu])"),
        ({"name": "x", "model": {"target": "tiny", "draft": "org/real"}}, "both be 'tiny' or both be real"),
        ({}, "name: Field required"),
        ({"name": " "}, "name: String should match pattern"),
    ],
)
def test_bad_profiles_name_file_key_and_allowed_values(data, message):
    with pytest.raises(BenchError) as err:
        parse_profile(data, "cpu", "t.toml")
    assert message in str(err.value)


def test_unknown_profile_name_lists_shipped(tmp_path):
    with pytest.raises(BenchError, match="unknown profile 'nope'; shipped profiles: .*tiny"):
        load_profile("nope", "cpu")
    bad = tmp_path / "bad.toml"
    bad.write_text("name = [")
    with pytest.raises(BenchError, match="bad.toml: not valid TOML"):
        load_profile(str(bad), "cpu")


toml_scalars = st.one_of(st.integers(-5, 10), st.text(max_size=8), st.booleans(), st.floats(allow_nan=False))
toml_values = st.recursive(
    toml_scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)),
    max_leaves=8,
)
sections = st.sampled_from(
    ["name", "model", "server", "speculative", "axes", "acceptance", "run", "hardware", "when", "description", "junk"]
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(sections, toml_values, max_size=6), st.sampled_from(["cpu", "gpu"]))
@example({"name": ""}, "cpu")  # found by CI's fuzzing: an empty name used to load
def test_fuzzed_profiles_either_load_or_raise_bench_error(data, platform):
    try:
        profile = parse_profile(data, platform, "fuzz.toml")
    except BenchError as exc:
        assert str(exc).startswith("fuzz.toml")
        assert "\n" not in str(exc)
    else:
        assert profile.axes.shapes and profile.name


@settings(max_examples=100, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(
            ["draft_attention_backend", "draft_kv_cache_dtype", "dcp_size", "num_speculative_tokens", "shapes", "extra"]
        ),
        toml_values,
        max_size=4,
    )
)
def test_fuzzed_axes(axes):
    try:
        parse_profile({"name": "f", "axes": axes}, "cpu", "fuzz.toml")
    except BenchError as exc:
        assert "fuzz.toml: axes" in str(exc)
