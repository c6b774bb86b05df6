"""The re-measure loop (bench.run.trial.measured_trial) and the point's flags (bench.run.executor._flags): a window with a
compile inside is measured again with fresh prompts, its rows kept as "contaminated", and what is left after the
last re-measure is flagged. The log line is a real one (tests/data/logs, the JIT compile vLLM 0.26.0 logged inside
a committed Kimi-rank window); the trials are scripted, so the loop's decisions are what is under test."""

from __future__ import annotations

import datetime as dt
import functools
from pathlib import Path
from types import SimpleNamespace

import pytest

from bench.measure import contamination
from bench.measure import window as W
from bench.run import executor as E
from bench.run import trial as T

SERVING = (Path(__file__).resolve().parents[1] / "data" / "logs" / "server-9e0b2fb21fdf-serving.log").read_text()
JIT_LINE = next(line for line in SERVING.splitlines() if "13:02:07" in line)


def at(h: int, m: int, s: int) -> float:
    return dt.datetime(2026, 12, 3, h, m, s, tzinfo=dt.UTC).timestamp()


CLEAN, DIRTY = (at(13, 3, 0), at(13, 3, 5)), (at(13, 2, 5), at(13, 2, 10))  # the JIT line is at 13:02:07


@pytest.fixture
def scripted(monkeypatch):
    """Attempt i runs in windows[i] (unix seconds); returns the list to fill and the calls made."""
    windows: list[tuple[float, float]] = []
    calls: list[int] = []

    def run_trial(tc, point, number, attempt):
        calls.append(attempt)
        start, end = windows[attempt]
        rows = [{"phase": "warmup", "attempt": attempt}, {"phase": "measure", "attempt": attempt}]
        return T.Trial(rows=rows, before={}, after={}, load={"clock": {"unix": start, "perf": 0.0}, "end": end})

    monkeypatch.setattr(T, "_run_trial", run_trial)
    monkeypatch.setattr(T, "headline_spans", lambda rows, c: [W.Span(0.0, 5.0)])  # the window, on the perf clock
    monkeypatch.setattr(contamination, "events_in", functools.partial(contamination.events_in, tz=dt.UTC))
    return windows, calls


def context(remeasure: int, log: str = JIT_LINE):
    run = SimpleNamespace(remeasure=remeasure, prompt_reuse=False)
    tc = SimpleNamespace(
        plan=SimpleNamespace(profile=SimpleNamespace(run=run)), server=SimpleNamespace(log_text=lambda: log)
    )
    point = SimpleNamespace(
        id="p", arrival=None, shape=SimpleNamespace(concurrency=4), workload=SimpleNamespace(is_text=False)
    )
    return tc, point, run


def test_a_compile_inside_the_window_is_measured_again(scripted):
    windows, calls = scripted
    windows += [DIRTY, CLEAN]
    tc, point, run = context(remeasure=1)
    trial = T.measured_trial(tc, point, 0)
    assert calls == [0, 1]
    assert trial.contamination == [] and trial.load["end"] == CLEAN[1]
    assert len(trial.discarded) == 1 and [e["kind"] for e in trial.discarded[0]["events"]] == ["jit-compile"]
    assert "mask_empty_context_kernel" in trial.discarded[0]["events"][0]["line"]
    # the discarded attempt's measured rows stay, marked; its warm-up rows as they were; then the kept attempt's
    assert [(r["attempt"], r["phase"]) for r in trial.rows] == [
        (0, "warmup"),
        (0, "contaminated"),
        (1, "warmup"),
        (1, "measure"),
    ]
    assert E._flags(run, point, {}, {}, [trial]) == []


def test_a_clean_window_is_measured_once(scripted):
    windows, calls = scripted
    windows += [CLEAN]
    tc, point, _ = context(remeasure=1)
    trial = T.measured_trial(tc, point, 0)
    assert calls == [0] and trial.discarded == [] and trial.contamination == []


def test_contamination_left_after_the_last_re_measure_is_kept_and_flagged(scripted):
    windows, calls = scripted
    windows += [DIRTY, DIRTY]
    tc, point, run = context(remeasure=1)
    trial = T.measured_trial(tc, point, 0)
    assert calls == [0, 1]  # bounded: remeasure = 1 allows one more attempt, not a loop
    assert [e["kind"] for e in trial.contamination] == ["jit-compile"]
    assert E._flags(run, point, {}, {}, [trial]) == ["window contaminated (jit-compile) after 1 re-measure(s)"]


def test_remeasure_zero_keeps_the_first_window(scripted):
    windows, calls = scripted
    windows += [DIRTY]
    tc, point, _ = context(remeasure=0)
    trial = T.measured_trial(tc, point, 0)
    assert calls == [0] and trial.contamination and trial.discarded == []


@pytest.mark.parametrize(
    ("rate", "is_text", "reuse", "flagged"),
    [(0.20, False, False, True), (0.005, False, False, False), (0.20, True, False, False), (0.20, False, True, False)],
)
def test_unexpected_prefix_cache_hits_are_flagged(rate, is_text, reuse, flagged):
    run = SimpleNamespace(prompt_reuse=reuse)
    point = SimpleNamespace(workload=SimpleNamespace(is_text=is_text))
    flags = E._flags(run, point, {"prefix_cache_hit_rate": rate}, {}, [])
    assert bool(flags) is flagged
    if flagged:
        assert flags == ["prefix cache hit 20.0% of prompt tokens in the window: prompts repeated (asked fresh)"]


def test_a_window_without_a_server_log_says_it_was_not_checked(scripted):
    """A server the suite does not own (`bench load --url`) has no log unless the user names it: the record says
    where contamination was looked for, and summary.md says which points were not checked."""
    import pandas as pd

    from bench.report.markdown import _unchecked

    windows, _ = scripted
    windows += [DIRTY]
    tc, point, _ = context(remeasure=1, log="")
    trial = T.measured_trial(tc, point, 0)
    assert trial.contamination == [] and trial.checked == ()  # the compile was there, but nothing could see it
    trial.after = {"cache": {"prefix_cache_queries": 1}}
    assert T._contamination(tc.server, trial, point)[1] == (T.CHECKED_METRICS,)
    windows += [DIRTY]
    tc, point, _ = context(remeasure=0)
    assert T.measured_trial(tc, point, 0).checked == (T.CHECKED_LOG,)
    ok = pd.DataFrame({"contamination_checked": ["server log, preemption counter", "preemption counter", None]})
    note = _unchecked(ok)
    assert note and note[0].startswith("**1 point(s) not checked")
    assert _unchecked(ok.iloc[[0, 2]]) == [] and _unchecked(pd.DataFrame({"x": [1]})) == []


def test_conversations_sent_again_are_flagged():
    run = SimpleNamespace(prompt_reuse=False)
    point = SimpleNamespace(workload=SimpleNamespace(is_text=True))
    trials = [SimpleNamespace(load={"samples": {"repeated": 2}}, contamination=[], discarded=[])]
    assert E._flags(run, point, {}, {}, trials) == [
        "2 dataset conversation(s) sent again in this results directory (the dataset ran out)"
    ]
    trials[0].load["samples"]["repeated"] = 0
    assert E._flags(run, point, {}, {}, trials) == []


def test_vllms_own_counts_are_checked_against_the_clients():
    """bench.measure.metrics.served_check / served_total and the flag: vLLM's generated tokens and finished requests over a
    window against what the client received; equal gives ratio 1 and no flag, a difference of more than 0.1% or
    one request is flagged with both counts, unknown counters give no ratio and no flag. Mean TTFT and TPOT come
    from each side's sums and counts, windows added before dividing."""
    from bench.measure import metrics as M

    def row(tokens, first_s, last_s):  # sent at 0, first chunk 1 token, the rest in one more chunk
        return {"status": "ok", "send_time": 0.0, "end_time": last_s, "chunk_times": [first_s, last_s],
                "chunk_tokens": [1, tokens - 1], "output_tokens": tokens}  # fmt: skip

    errored = {"status": "error", "send_time": 0.0, "end_time": None, "chunk_times": [], "chunk_tokens": [],
               "output_tokens": None}  # fmt: skip
    rows = [row(32, 0.1, 0.41), row(32, 0.2, 0.51), errored]  # TTFT 100 and 200 ms, TPOT 10 ms each
    before = {"generation_tokens": 100.0, "finished_requests": 4.0, "ttft_s_sum": 1.0, "ttft_count": 4.0,
              "tpot_s_sum": 0.5, "tpot_count": 4.0}  # fmt: skip
    after = {"generation_tokens": 164.0, "finished_requests": 7.0, "ttft_s_sum": 1.27, "ttft_count": 7.0,
             "tpot_s_sum": 0.527, "tpot_count": 7.0}  # fmt: skip
    check = M.served_check(before, after, rows)
    assert (check["server_generation_tokens"], check["server_finished_requests"]) == (64.0, 3.0)
    assert (check["client_output_tokens"], check["client_requests"], check["client_ttft_count"]) == (64, 3, 2)
    total = M.served_total([check, check])
    assert total["token_ratio"] == 1.0 and total["client_requests"] == 6 and E._served_flag(total) == []
    assert total["ttft_ms_client"] == pytest.approx(150.0) and total["ttft_ms_vllm"] == pytest.approx(90.0)
    assert total["tpot_ms_client"] == pytest.approx(10.0) and total["tpot_ms_vllm"] == pytest.approx(9.0)
    foreign = M.served_total([M.served_check(before, {**after, "generation_tokens": 196.0, "finished_requests": 8.0},
                                             rows)])  # fmt: skip
    assert foreign["token_ratio"] == 1.5
    (flag,) = E._served_flag(foreign)
    assert flag.startswith("vLLM counted 96 generated tokens and 4 finished requests in the window, the client "
                           "received 64 tokens in 3 requests")  # fmt: skip
    assert E._served_flag({**total, "server_finished_requests": 7.0})  # one request more: flagged
    unknown = M.served_total([M.served_check({}, {}, rows)])
    assert unknown["token_ratio"] is None and unknown["ttft_ms_vllm"] is None and unknown["ttft_ms_client"] == 150.0
    assert unknown["client_output_tokens"] == 64 and E._served_flag(unknown) == []
    assert M.served_total([])["token_ratio"] is None


def test_the_windows_preemption_counter_overrules_a_stats_line(scripted):
    """vLLM's "Preemptions: N" counts the 10 s before its line, so a line in the window's first second can report
    the warm-up's preemptions. When the window's own counter is known it decides: zero there, no preemption."""
    stats = (
        "INFO 12-03 13:02:06 [loggers.py:257] Engine 000: Avg prompt throughput: 0.0 tokens/s, Running: 4 reqs, "
        "Waiting: 0 reqs, Preemptions: 3, GPU KV cache usage: 10.0%"
    )
    tc, point, _ = context(remeasure=0, log=stats)
    known = {"cache": {"prefix_cache_queries": 1, "preemptions": 5}}
    trial = T.Trial(rows=[], before=known, after=known, load={"clock": {"unix": DIRTY[0], "perf": 0.0}})
    events, checked = T._contamination(tc.server, trial, point)
    assert events == [] and checked == (T.CHECKED_LOG, T.CHECKED_METRICS)
    unknown = T.Trial(rows=[], before={}, after={}, load={"clock": {"unix": DIRTY[0], "perf": 0.0}})
    events, _ = T._contamination(tc.server, unknown, point)
    assert [e["kind"] for e in events] == ["preemption"]  # no counter: the log is all there is


def test_the_loads_own_requests_waiting_for_a_prefill_are_not_contamination(scripted):
    """A stats line with waiting requests flagged every window it fell in, and the re-measure found it again: in
    the committed H200 logs every such line had running + waiting at or below the point's concurrency (the load's
    own requests queued behind a prefill). Only requests beyond the load's (someone else's) contaminate; an open
    loop queues by design."""

    def stats(running: int, waiting: int) -> str:
        return (
            f"INFO 12-03 13:02:07 [loggers.py:257] Engine 000: Avg prompt throughput: 0.0 tokens/s, Running: "
            f"{running} reqs, Waiting: {waiting} reqs, GPU KV cache usage: 10.0%"
        )

    def kinds(log: str, point=None) -> list[str]:
        tc, own_point, _ = context(remeasure=0, log=log)
        trial = T.Trial(rows=[], before={}, after={}, load={"clock": {"unix": DIRTY[0], "perf": 0.0}})
        return [e["kind"] for e in T._contamination(tc.server, trial, point or own_point)[0]]

    assert kinds(stats(3, 1)) == []  # 4 = the point's concurrency: its own requests
    assert kinds(stats(4, 1)) == ["queueing"]  # 5 > 4: one request is not the load's
    open_loop = SimpleNamespace(
        id="p", arrival=SimpleNamespace(paced=True, max_concurrency=None), shape=None, workload=None
    )
    assert kinds(stats(4, 9), open_loop) == []
    unreadable = "INFO 12-03 13:02:07 [loggers.py:257] Engine 000: Waiting: 3 reqs"
    assert kinds(unreadable) == ["queueing"]  # counts not readable: kept
