"""Prompts are unique across points, trials, attempts and runs (bench.prompts), and reproducible from the salt."""

from __future__ import annotations

from bench.loadgen import make_prompt
from bench.prompts import int_seed, new_salt, prompt_name


def _name(**kw) -> str:
    base = dict(
        salt="s1", point_id="p1", trial=0, attempt=0, phase="measure", index=0, reuse=False, seed=0, input_len=64
    )
    return prompt_name(**{**base, **kw})


def test_every_coordinate_changes_the_prompt():
    names = {
        _name(),
        _name(salt="s2"),
        _name(point_id="p2"),
        _name(trial=1),
        _name(attempt=1),
        _name(phase="warmup"),
        _name(index=1),
    }
    assert len(names) == 7
    prompts = {tuple(make_prompt(64, 5000, n)) for n in names}
    assert len(prompts) == 7, "distinct names draw distinct token ids"


def test_same_name_same_prompt_and_reuse_ignores_point_and_salt():
    assert make_prompt(32, 5000, _name()) == make_prompt(32, 5000, _name())
    a = _name(reuse=True, point_id="p1", salt="s1")
    b = _name(reuse=True, point_id="p2", salt="s2")
    assert a == b and a != _name(reuse=True, input_len=128)


def test_prompts_share_no_16_token_block_across_points():
    blocks = set()
    for point in ("p1", "p2", "p3"):
        for i in range(8):
            ids = make_prompt(256, 20480, _name(point_id=point, index=i))
            for j in range(0, 256, 16):
                block = tuple(ids[j : j + 16])
                assert block not in blocks
                blocks.add(block)


def test_salts_differ_and_int_seeds_are_stable():
    assert new_salt() != new_salt()
    assert int_seed("x") == int_seed("x") != int_seed("y")
