import re

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from bench.config.profile import PROFILES_DIR, Axes, load_profile, parse_profile
from bench.core.errors import BenchError


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
        (
            {"name": "x", "axes": {"shapez": ["1x1x2"]}},
            "t.toml: axes.shapez: unknown key; allowed here: dcp_size, draft_attention_backend,",
        ),
        ({"name": "x", "bogus": 1}, "t.toml: bogus: unknown key; allowed here: acceptance, axes, description"),
        ({"name": "x", "axes": {"shapes": ["4x128"]}}, "shape '4x128' is not 'CONCURRENCYxINPUT_LENxOUTPUT_LEN'"),
        ({"name": "x", "axes": {"dcp_size": [0]}}, "axes.dcp_size: Value error, values must be >= 1"),
        ({"name": "x", "axes": {"dcp_size": "2"}}, "axes.dcp_size: Input should be a valid list"),
        ({"name": "x", "acceptance": {"mode": "synthetic"}}, "exactly one of 'rates' or 'mean_length'"),
        ({"name": "x", "acceptance": {"mode": "fake"}}, "Input should be 'real' or 'synthetic' (got 'fake')"),
        ({"name": "x", "acceptance": {"mode": "synthetic", "rates": [1.5]}}, "rates must be a non-empty list"),
        ({"name": "x", "server": {"port": 8000}}, "server keys ['port'] are set by the suite"),
        ({"name": "x", "speculative": {"num_speculative_tokens": 3}}, "come from [model], [axes]"),
        ({"name": "x", "speculative": {"kv_cache_dtype": "fp8"}}, "['kv_cache_dtype'] come from [model], [axes]"),
        ({"name": "x", "server": {"max-num-seqs": 8, "max_num_seqs": 16}}, "given twice"),
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


AXIS_KEYS = ["draft_attention_backend", "draft_kv_cache_dtype", "dcp_size", "num_speculative_tokens", "shapes"]


def shape_numbers(given) -> tuple[int, int, int]:
    if isinstance(given, str):
        return tuple(int(n) for n in re.findall(r"\d+", given))
    return int(given["concurrency"]), int(given["input_len"]), int(given["output_len"])


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from([*AXIS_KEYS, "extra"]), toml_values, max_size=4))
@example({"draft_attention_backend": ["flashmla", "AUTO"], "dcp_size": [1, 2], "shapes": ["2x16x8", " 1 x4x2"]})
@example({"shapes": [{"concurrency": 3, "input_len": 4, "output_len": 2}], "num_speculative_tokens": [0, 3]})
@example({"draft_attention_backend": ["flashmla", "FLASHMLA"]})  # one backend twice: duplicate points
@example({"dcp_size": [0]})
@example({"num_speculative_tokens": []})
@example({"extra": ["x"]})
def test_fuzzed_axes(axes):
    """Either a one-line error about the axes, or axes that hold exactly what was asked: one value per input
    value, distinct, within bounds, backend names normalized, the defaults where nothing was given."""
    try:
        parsed = parse_profile({"name": "f", "axes": axes}, "cpu", "fuzz.toml").axes
    except BenchError as exc:
        assert str(exc).startswith("fuzz.toml: axes") and "\n" not in str(exc)
        return
    assert "extra" not in axes, "an unknown axis must be refused"
    for key in AXIS_KEYS:
        values = getattr(parsed, key)
        if key not in axes:
            assert values == getattr(Axes(), key)
        else:
            assert len(values) == len(axes[key]) and len({str(v) for v in values}) == len(values), (key, values)
    assert all(d >= 1 for d in parsed.dcp_size) and all(k >= 0 for k in parsed.num_speculative_tokens)
    for name, backend in zip(axes.get("draft_attention_backend", []), parsed.draft_attention_backend):
        assert backend == ("auto" if name.lower() == "auto" else name.upper())
    for given_shape, shape in zip(axes.get("shapes", []), parsed.shapes):
        assert (shape.concurrency, shape.input_len, shape.output_len) == shape_numbers(given_shape)
        assert shape.concurrency >= 1 and shape.input_len >= 1 and shape.output_len >= 2
