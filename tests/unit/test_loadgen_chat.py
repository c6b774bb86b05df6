"""The chat path of the load generator against a stand-in server: multi-turn replay after the model's own answer,
sampling and chat_template_kwargs passed through (unset ones not sent), per-request speculative numbers read,
the measured window after the warm-up and its callback, arrival times in the records, and a failed turn ending its conversation."""

from __future__ import annotations

import itertools

import pytest

from bench.load.loadgen import TextSettings, run_conversations, run_load
from bench.measure.metrics import category_metrics
from bench.workloads.arrival import Arrival
from bench.workloads.conversation import Conversation
from bench.workloads.point import Sampling
from tests.helpers.openai_standin import StandIn, serve


@pytest.fixture
def standin():
    server, loop = serve(StandIn())
    yield server
    loop.call_soon_threadsafe(loop.stop)


def conv(cid: str, category: str, turns: tuple[str, ...], output_tokens: int | None = None) -> Conversation:
    return Conversation(id=cid, category=category, turns=turns, output_tokens=output_tokens)


def run(standin: StandIn, measured, *, warmup=(), arrival=None, settings=None, on_start=None):
    return run_conversations(
        standin.url,
        "m",
        warmup=list(warmup),
        measured=measured,
        arrival=arrival or Arrival.fixed_concurrency(2),
        seed=0,
        settings=settings or TextSettings(Sampling(max_tokens=5), None, "w"),
        stall_s=10,
        timeout_s=10,
        check_alive=lambda: None,
        on_measure_start=on_start or (lambda: None),
    )


def test_second_turn_follows_the_models_own_answer_with_the_workloads_sampling(standin):
    settings = TextSettings(Sampling(temperature=0.7, top_k=20, max_tokens=5), {"thinking": True}, "mt")
    records = run(standin, [conv("q1", "math", ("first?", "second?"))], settings=settings)
    first, second = standin.bodies
    assert first["messages"] == [{"role": "user", "content": "first?"}]
    assert second["messages"] == [
        {"role": "user", "content": "first?"},
        {"role": "assistant", "content": standin.answer(5)},  # what the model streamed, chunk by chunk
        {"role": "user", "content": "second?"},
    ]
    for body in (first, second):
        assert body["temperature"] == 0.7 and body["top_k"] == 20 and body["max_tokens"] == 5
        assert body["chat_template_kwargs"] == {"thinking": True} and "ignore_eos" not in body and "top_p" not in body
        assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert [(r.conversation, r.turn, r.category, r.workload) for r in records] == [
        ("q1", 0, "math", "mt"),
        ("q1", 1, "math", "mt"),
    ]
    assert all(r.status == "ok" and r.output_tokens == 5 and r.chunk_tokens == [3, 2] for r in records)
    assert all(r.finish_reason == "length" and r.prompt_len is None for r in records)


def test_unset_sampling_is_not_sent_and_the_rows_own_length_wins(standin):
    records = run(standin, [conv("a", "x", ("hi",), output_tokens=4)], settings=TextSettings())
    (body,) = standin.bodies
    assert set(body) == {"model", "messages", "max_tokens", "stream", "stream_options"} and body["max_tokens"] == 4
    assert records[0].max_tokens == 4
    standin.bodies.clear()
    run(standin, [conv("b", "x", ("hi",))], settings=TextSettings())
    assert "max_tokens" not in standin.bodies[0]  # to EOS: the server's default


def test_per_request_acceptance_is_read_and_summed_per_category(standin):
    convs = [conv(f"{c}{i}", c, ("q",)) for c in ("code", "chat") for i in range(3)]
    records = run(standin, convs)
    assert all(r.spec_histogram == [0, 0, 2, 0] and r.spec_steps == 2 for r in records)
    rows = [{**r.to_row(), "trial": 0} for r in records]
    cats = {c["category"]: c for c in category_metrics(rows)}
    assert set(cats) == {"code", "chat"}
    for c in cats.values():
        assert c["acceptance_source"] == "per-request" and c["num_drafts"] == 6 and c["requests"] == 3
        assert c["mean_acceptance_length"] == 3.0 and c["per_position_acceptance"] == [1.0, 1.0, 0.0]
        assert c["acceptance_rate"] == pytest.approx(2 / 3)


def test_the_measured_window_starts_after_the_warmup_and_its_callback(standin):
    seen: list[int] = []  # requests the server had got when the callback ran
    measured = [conv("a1", "a", ("q",)), conv("b1", "b", ("q",))]
    records = run(standin, measured, warmup=[conv("w", "a", ("q",))], on_start=lambda: seen.append(len(standin.bodies)))
    assert seen == [1]  # once, after the warm-up request
    assert [r.phase for r in records] == ["warmup", "measure", "measure"]
    warm = records[0]
    assert all(warm.end_time <= r.send_time for r in records[1:])


def test_records_carry_when_each_slot_was_due_arrived_and_started(standin):
    convs = [conv(f"c{i}", "x", ("q", "q2")) for i in range(4)]
    records = run(standin, convs, arrival=Arrival(request_rate=50, burstiness=float("inf"), max_concurrency=1))
    by_conv: dict[str, list] = {}
    for r in records:
        by_conv.setdefault(r.conversation, []).append(r)
    firsts = [rs[0] for rs in by_conv.values()]
    assert [r.due_s for r in firsts] == pytest.approx([0.02, 0.04, 0.06, 0.08])  # constant gaps of 1/50 s
    for rs in by_conv.values():  # both turns of a conversation share its slot's times
        assert rs[0].due_s == rs[1].due_s and rs[0].arrival_time == rs[1].arrival_time
        assert rs[0].start_time <= rs[0].send_time < rs[1].send_time
    ordered = sorted(firsts, key=lambda r: r.start_time)
    for a, b in itertools.pairwise(ordered):  # one slot: the next conversation starts after both turns of this one
        assert b.start_time >= max(r.end_time for r in by_conv[a.conversation])
        assert b.arrival_time >= a.arrival_time


def test_a_failed_turn_ends_its_conversation(standin):
    standin.fail_turn = 2
    records = run(standin, [conv("a", "x", ("one", "two", "three"))])
    assert [(r.turn, r.status) for r in records] == [(0, "ok"), (1, "error")]
    assert "HTTP 500" in records[1].error


def test_random_prompts_keep_their_exact_request_and_take_an_arrival(standin):
    records = run_load(
        standin.url,
        "m",
        prompts=[[5, 6, 7]] * 5,
        warmup_count=1,
        max_tokens=4,
        concurrency=2,
        stall_s=10,
        timeout_s=10,
        check_alive=lambda: None,
        arrival=Arrival(request_rate=100, burstiness=1.0, max_concurrency=2),
        seed=3,
    )
    assert standin.bodies[0] == {
        "model": "m",
        "prompt": [5, 6, 7],
        "max_tokens": 4,
        "temperature": 0.0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    measured = sorted((r for r in records if r.phase == "measure"), key=lambda r: r.index)
    assert len(measured) == 4 and all(r.status == "ok" and r.category == "random" for r in measured)
    dues = [r.due_s for r in measured]
    assert dues == sorted(dues) and dues[-1] == pytest.approx(4 / 100)  # vLLM's rescale: the last is due at n/rate
