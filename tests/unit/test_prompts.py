"""Prompts are unique across points, trials, attempts and runs (bench.load.prompts), and reproducible from the salt."""

from __future__ import annotations

import itertools
import random

import pytest

from bench.load.loadgen import make_prompt
from bench.load.prompts import int_seed, new_salt, prompt_name


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


def test_consecutive_prompts_run_through_the_allowed_ids_from_a_named_start():
    ids = list(range(7, 5000, 3))  # allowed ids with gaps, as bench.engine.launch.prompt_ids gives them
    p = make_prompt(600, ids, _name(), style="consecutive")
    assert len(p) == 600 and set(p) <= set(ids)
    pos = [ids.index(t) for t in p]
    assert all((b - a) % len(ids) == 1 for a, b in itertools.pairwise(pos)), "each id is the next allowed one"
    assert p == make_prompt(600, ids, _name(), style="consecutive")
    starts = {make_prompt(4, ids, _name(index=i), style="consecutive")[0] for i in range(20)}
    assert len(starts) == 20, "each prompt name draws its own start"
    wrap = make_prompt(2000, ids, _name(), style="consecutive")  # longer than the allowed ids: wraps round
    assert wrap[len(ids)] == wrap[0]


def test_uniform_style_is_the_default_and_unchanged():
    name = _name()
    assert make_prompt(64, 5000, name) == make_prompt(64, 5000, name, style="uniform")

    assert make_prompt(64, 5000, name) == random.Random(name).choices(range(3, 5000), k=64)


def test_salts_differ_and_int_seeds_are_stable():
    assert new_salt() != new_salt()
    assert int_seed("x") == int_seed("x") != int_seed("y")


# --- dataset samples: a stretch of the run's order per point, trial and attempt --------------------------------


def _dataset(per_category: dict[str, int]):
    from bench.workloads.conversation import Conversation, Dataset, Provenance

    convs = tuple(
        Conversation(id=f"{cat}-{i}", category=cat, turns=(f"{cat} question {i}",))
        for cat, n in per_category.items()
        for i in range(n)
    )
    prov = Provenance(
        kind="jsonl",
        source="test",
        path="-",
        sha256="0" * 64,
        text_sha256="0" * 64,
        selection={},
        count=len(convs),
        turns=len(convs),
        categories=per_category,
    )
    return Dataset(conversations=convs, provenance=prov)


def test_stretches_of_one_order_never_overlap_until_the_dataset_runs_out():
    data = _dataset({"a": 30, "b": 30})
    first, again1 = data.take(10, seed=7, start=0)
    second, again2 = data.take(10, seed=7, start=5)  # 10 conversations over 2 categories: 5 rounds
    assert again1 == again2 == 0
    assert not {c.id for c in first} & {c.id for c in second}
    assert [c.category for c in first] == ["a", "b"] * 5  # categories take turns
    late, again = data.take(10, seed=7, start=28)  # rounds 28..32 of 30: 3 rounds come round again, x 2 categories
    assert again == 6 and {c.id for c in late[4:]} <= {c.id for c in first}


def test_every_point_trial_and_attempt_of_a_plan_gets_its_own_stretch():
    from types import SimpleNamespace

    from bench.config.plan import Plan

    def point(pid: str, n: int):
        return SimpleNamespace(
            id=pid,
            load_id=pid,
            num_prompts=n,
            warmup_prompts=1,
            workload=SimpleNamespace(is_text=True, dataset_key="d"),
        )

    run = SimpleNamespace(remeasure=1, repeat=2)
    pts = [point("p2", 9), point("p1", 5), point("p3", 3)]
    plan = Plan(SimpleNamespace(run=run), None, [(None, pts)])  # type: ignore[arg-type]
    plan.text_demand = plan._text_demand()
    stretches = []
    for p in pts:
        rounds = -(-(p.warmup_prompts + p.num_prompts) // 2)  # 2 categories
        for trial in range(2):
            for attempt in range(2):
                start = plan.sample_start(p, trial, attempt, categories=2)
                stretches.append(set(range(start, start + rounds)))
    assert sum(len(s) for s in stretches) == len(set().union(*stretches)), "no round taken twice"
    # a --points subset (or a resumed run of one point) takes the same stretch as the full plan
    only = plan.select(["p3"])
    assert only.sample_start(pts[2], 1, 1, categories=2) == plan.sample_start(pts[2], 1, 1, categories=2)


def test_a_datasets_order_follows_the_salt_and_the_source_not_the_folder_it_is_read_from():
    """The same salt replays the same conversations from any checkout: the order's seed was hashed with the folder
    relative dataset paths start from, so a run reproduced from another directory sent other conversations."""
    from bench.run.trial import text_order_seed
    from bench.workloads.point import Workload

    source = {"source": "jsonl", "path": "data/chats.jsonl"}
    here = Workload(id="chats", dataset=source, base_dir="/home/a/bench/profiles")
    there = Workload(id="chats", dataset=source, base_dir="/tmp/clone/profiles")
    assert text_order_seed("s1", here) == text_order_seed("s1", there)
    assert text_order_seed("s1", here) != text_order_seed("s2", here)
    other = Workload(id="chats", dataset={**source, "path": "data/other.jsonl"}, base_dir=here.base_dir)
    assert text_order_seed("s1", here) != text_order_seed("s1", other)


def test_a_speculating_point_and_its_baseline_are_sent_the_same_conversations():
    """Found in review: every point had a stretch of its own, so a k = 3 point and its k = 0 baseline (other
    servers) were sent other questions and their ratio mixed texts into the comparison. One load, one stretch on
    every engine; the loads of one engine (one server) still have stretches of their own."""
    from bench.config.plan import make_plan
    from bench.config.profile import parse_profile
    from bench.core.hardware import Machine

    text = """
name = "t"
[model]
target = "tiny"
draft = "tiny"
[axes]
num_speculative_tokens = [0, 3]
shapes = ["2x16x8"]
[workloads.notes]
dataset = { kind = "jsonl", path = "notes.jsonl" }
concurrency = [2, 4]
"""
    import tomllib

    plan = make_plan(parse_profile(tomllib.loads(text), "cpu", "t.toml"), Machine("cpu"))  # datasets: read later
    text_points = [p for p in plan.runnable if p.workload.is_text]
    by_load: dict[str, list] = {}
    for p in text_points:
        by_load.setdefault(p.load_id, []).append(p)
    assert len(by_load) == 2 and all(len(ps) == 2 for ps in by_load.values())  # c2 and c4, each on k = 0 and k = 3
    for ps in by_load.values():
        assert len({p.engine.num_speculative_tokens for p in ps}) == 2 and len({p.id for p in ps}) == 2
        assert len({plan.sample_start(p, 0, 0, 3) for p in ps}) == 1, "the same stretch on both engines"
    starts = {plan.sample_start(ps[0], 0, 0, 3) for ps in by_load.values()}
    assert len(starts) == 2, "one server's two loads: stretches of their own"


@pytest.mark.parametrize("style", ["uniform", "consecutive"])
def test_a_points_closed_loop_draws_its_prompts_in_the_runs_style(monkeypatch, style):
    """bench.run.trial's random-id load hands the closed loop prompts drawn as `[run] prompt_ids` says."""
    from types import SimpleNamespace

    from bench.config.run_options import Run
    from bench.run import trial as T

    loops = []
    monkeypatch.setattr(T, "run_closed_loop", lambda url, model, loop, **kw: loops.append(loop))
    monkeypatch.setattr(T, "closed_loop_concurrency", lambda point: 2)
    monkeypatch.setattr(T, "warmup_count", lambda tc, point, c: 0)
    vocab = list(range(3, 5000))
    tc = SimpleNamespace(
        plan=SimpleNamespace(profile=SimpleNamespace(run=Run(prompt_ids=style))),
        salt="s1",
        vocab=vocab,
        server=SimpleNamespace(base_url="http://x", check_alive=lambda: None),
        model="m",
        deadline=None,
        lifetimes={},
    )
    point = SimpleNamespace(
        id="p1", shape=SimpleNamespace(input_len=64, output_len=8), num_prompts=4, workload=SimpleNamespace(id="w")
    )
    T._random_load(tc, point, 0, 0, SimpleNamespace(start=lambda: None), [])
    ids = loops[0].prompt("measure", 0)
    assert ids == make_prompt(64, vocab, _name(point_id="p1", input_len=64), style=style)
    steps = {(b - a) % len(vocab) for a, b in itertools.pairwise(ids)}
    assert (steps == {1}) is (style == "consecutive")
