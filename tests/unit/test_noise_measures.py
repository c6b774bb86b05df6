"""The three measures against noise at its source: the steady warm-up rule, the measured window's extension,
and CPU affinity (core lists, the split, bad cores, the guard's pin, what the executor applies and records)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from bench import affinity, executor
from bench.errors import BenchError
from bench.guard import SERVER_CPUS_ENV
from bench.hardware import Machine
from bench.loadgen import RequestRecord
from bench.plan import make_plan
from bench.profile import parse_profile
from bench.server import GUARD, ServerSpec
from bench.sweep import SweepOptions, run_sweep
from bench.waves import RandomLoad, is_steady, measure_window, random_trial, warm_up

# -- the steady warm-up rule ---------------------------------------------------------------------------------


def wave(tok_s: float | None, start: float = 0.0, seconds: float = 1.0, n: int = 2) -> list[RequestRecord]:
    """A scripted wave of `n` requests over `seconds` that produced `tok_s` output tokens per second."""
    out = []
    for i in range(n):
        rec = RequestRecord(i, "measure", 8, 4, send_time=start)
        rec.end_time = start + seconds
        rec.status = "ok" if tok_s else "error"
        rec.output_tokens = int(tok_s * seconds / n) if tok_s else None
        out.append(rec)
    return out


def scripted_waves(rates: list[float | None]):
    sent: list[int] = []

    def send(w: int) -> list[RequestRecord]:
        sent.append(w)
        return wave(rates[w])

    return send, sent


def test_is_steady_is_relative_to_the_previous_wave():
    assert is_steady(100.0, 104.0, 0.05) and is_steady(100.0, 95.0, 0.05)
    assert not is_steady(100.0, 106.0, 0.05) and not is_steady(100.0, 93.0, 0.05)
    assert not is_steady(None, 100.0, 0.05) and not is_steady(100.0, None, 0.05) and not is_steady(0.0, 0.0, 0.05)


def test_warm_up_stops_at_the_first_two_waves_that_agree():
    send, sent = scripted_waves([400, 700, 900, 920, 921, 922])
    out = warm_up(send, tolerance=0.05, max_waves=6)
    assert sent == [0, 1, 2, 3]
    assert out["steady"] is True and out["waves_tok_s"] == pytest.approx([400, 700, 900, 920])


def test_warm_up_that_never_settles_says_so_at_the_cap():
    send, sent = scripted_waves([400, 800, 400, 800, 400, 800])
    out = warm_up(send, tolerance=0.05, max_waves=4)
    assert sent == [0, 1, 2, 3] and out["steady"] is False and len(out["waves_tok_s"]) == 4


def test_warm_up_waves_that_complete_nothing_are_never_steady():
    send, _ = scripted_waves([None, None, None])
    out = warm_up(send, tolerance=0.5, max_waves=3)
    assert out["steady"] is False and out["waves_tok_s"] == [None, None, None]


# -- the measured window's extension -------------------------------------------------------------------------


def timed_waves(seconds: float, gap: float = 0.1, fail_at: int | None = None):
    sent: list[int] = []

    def send(w: int) -> list[RequestRecord]:
        sent.append(w)
        return wave(None if w == fail_at else 100.0, start=w * (seconds + gap), seconds=seconds)

    return send, sent


def test_window_repeats_waves_until_it_lasts_the_minimum():
    send, sent = timed_waves(1.0)
    out = measure_window(send, min_window_s=2.5)
    assert sent == [0, 1, 2]  # 1.0, 2.1, 3.2 s
    assert out["waves"] == 3 and out["window_s"] == pytest.approx(3.2)


def test_window_of_zero_is_one_wave_as_before():
    send, sent = timed_waves(1.0)
    assert measure_window(send, min_window_s=0)["waves"] == 1 and sent == [0]


def test_window_stops_extending_when_a_wave_completes_nothing():
    send, sent = timed_waves(1.0, fail_at=1)
    out = measure_window(send, min_window_s=100.0)
    assert sent == [0, 1] and out["waves"] == 2


# -- the waves of one trial, against a scripted load generator ------------------------------------------------

RUN_PROFILE = {
    "name": "waves",
    "model": {"target": "tiny", "draft": "tiny", "weights": "dummy", "flavor": "cpu"},
    "axes": {"draft_attention_backend": ["CPU_MLA"], "num_speculative_tokens": [2], "shapes": ["2x8x4"]},
    "run": {"num_prompts": 3, "warmup_prompts": 2},
}


class FakeSend:
    """Stands in for run_load: records the calls; every request takes 1 s and produces 4 tokens; waves whose
    number is in `slow` produce half the tokens per second."""

    def __init__(self, slow: set[int] = frozenset()):
        self.calls: list[dict] = []
        self.slow, self.clock, self.measure_starts = slow, 0.0, 0

    def __call__(self, base_url, model, *, prompts, warmup_count, records, on_measure_start, first_index, **_):
        self.calls.append({"n": len(prompts), "warmup": warmup_count, "first": first_index, "prompts": prompts})
        seconds = 2.0 if len(self.calls) - 1 in self.slow else 1.0
        for i, prompt in enumerate(prompts):
            if i == warmup_count:
                on_measure_start()
            rec = RequestRecord(
                first_index + i, "warmup" if i < warmup_count else "measure", len(prompt), 4, self.clock
            )
            rec.end_time, rec.status, rec.output_tokens = self.clock + seconds, "ok", 4
            records.append(rec)
        self.clock += seconds + 0.01
        return records


class FakeServer:
    base_url = "http://127.0.0.1:9"

    def check_alive(self) -> None:
        pass


def trial(run: dict, send: FakeSend) -> tuple[dict, list[RequestRecord], list[int]]:
    profile = parse_profile({**RUN_PROFILE, "run": {**RUN_PROFILE["run"], **run}}, "cpu", "waves.toml")
    point = make_plan(profile, Machine("cpu")).runnable[0]
    records: list[RequestRecord] = []
    starts: list[int] = []
    load = RandomLoad(send, FakeServer(), "m", list(range(3, 100)), point, profile.run, 7, records)
    out = random_trial(load, point.warmup_prompts, lambda: starts.append(len(records)))
    return out, records, starts


def test_defaults_send_one_call_with_the_warmup_as_before():
    send = FakeSend()
    out, _, starts = trial({}, send)
    assert [(c["n"], c["warmup"]) for c in send.calls] == [(5, 2)]
    assert out["warmup"]["steady"] is None and len(out["warmup"]["waves_tok_s"]) == 1
    assert out["window"]["waves"] == 1 and starts == [2]


def test_steady_warmup_sends_warmup_waves_alone_until_they_agree():
    send = FakeSend(slow={0})  # the first wave is slow: a second and third are needed
    out, _, starts = trial({"warmup_steady": 0.05, "warmup_max_waves": 5}, send)
    assert [(c["n"], c["warmup"]) for c in send.calls] == [(2, 2), (2, 2), (2, 2), (3, 0)]
    assert out["warmup"]["steady"] is True and out["warmup"]["waves_tok_s"] == pytest.approx([4.0, 8.0, 8.0])
    assert starts == [6], "the measured window starts once, after every warm-up wave"
    assert len({tuple(p) for c in send.calls for p in c["prompts"]}) == 9, "every wave gets fresh prompts"


def test_min_window_adds_measured_waves_of_fresh_prompts_with_distinct_indices():
    send = FakeSend()
    out, records, starts = trial({"min_window_s": 2.5}, send)
    assert [(c["n"], c["warmup"]) for c in send.calls] == [(5, 2), (3, 0), (3, 0)]
    assert out["window"]["waves"] == 3 and out["window"]["window_s"] >= 2.5
    assert starts == [2] and len({r.index for r in records}) == len(records) == 11
    assert len({tuple(p) for c in send.calls for p in c["prompts"]}) == 11


@pytest.mark.parametrize(
    "run, message",
    [
        ({"cpu_affinity": "half"}, "cpu_affinity is 'off', 'split' or a table"),
        ({"cpu_affinity": {"server": "0-3", "client": "3"}}, "must not overlap"),
        ({"cpu_affinity": {"server": "0-x", "client": "4"}}, "is not N or N-M"),
        ({"warmup_steady": 0.05, "warmup_prompts": 0}, "warmup_steady needs warmup_prompts >= 1"),
    ],
)
def test_run_keys_are_checked(run, message):
    with pytest.raises(BenchError, match=message):
        parse_profile({**RUN_PROFILE, "run": {**RUN_PROFILE["run"], **run}}, "cpu", "bad.toml")


def test_steady_warmup_counts_each_workloads_own_warmup_prompts():
    own = {"random": {"shapes": ["1x8x4"], "warmup_prompts": 2}}
    run = {**RUN_PROFILE["run"], "warmup_steady": 0.05, "warmup_prompts": 0}
    assert parse_profile({**RUN_PROFILE, "run": run, "workloads": own}, "cpu", "own.toml").run.warmup_steady == 0.05
    with pytest.raises(BenchError, match=r"workloads \['random'\] have none"):
        parse_profile(
            {
                **RUN_PROFILE,
                "run": {**run, "warmup_prompts": 2},
                "workloads": {"random": {"shapes": ["1x8x4"], "warmup_prompts": 0}},
            },
            "cpu",
            "none.toml",
        )


def test_wave_measures_are_refused_for_text_workloads():
    data = {
        **RUN_PROFILE,
        "run": {"min_window_s": 5},
        "workloads": {"chat": {"dataset": {"kind": "jsonl", "path": "x.jsonl"}}},
    }
    with pytest.raises(BenchError, match="apply to random token-id workloads"):
        parse_profile(data, "cpu", "text.toml")


def test_dry_run_names_the_measures_a_profile_turns_on():
    from bench.launch import describe_plan

    plain = make_plan(parse_profile(RUN_PROFILE, "cpu", "plain.toml"), Machine("cpu"))
    assert "\nrun: " not in describe_plan(plain)
    data = {**RUN_PROFILE, "run": {"cpu_affinity": "split", "warmup_steady": 0.05, "warmup_prompts": 2}}
    shown = describe_plan(make_plan(parse_profile(data, "cpu", "noise.toml"), Machine("cpu")))
    assert "\nrun: cpu_affinity split, warmup_steady 0.05\n" in shown


# -- CPU affinity --------------------------------------------------------------------------------------------


def test_core_lists_parse_and_format_both_ways():
    assert affinity.parse_cpu_list("0,2-4, 7") == (0, 2, 3, 4, 7)
    assert affinity.format_cpu_list([7, 0, 2, 3, 4]) == "0,2-4,7"
    for bad in ("", "a", "3-1", "1-", "1,,2"):
        with pytest.raises(ValueError):
            affinity.parse_cpu_list(bad)


def test_split_gives_the_client_one_core_in_eight_and_the_server_the_rest():
    assert affinity.split_cores({0, 1}) == affinity.CpuSplit(server=(1,), client=(0,))
    sixteen = affinity.split_cores(range(16))
    assert sixteen.client == (0, 1) and sixteen.server == tuple(range(2, 16))
    with pytest.raises(BenchError, match="at least 2 cores"):
        affinity.split_cores({3})


def test_cores_this_machine_lacks_are_a_clear_error():
    sets = parse_profile(
        {**RUN_PROFILE, "run": {"cpu_affinity": {"server": "2-9", "client": "0"}}}, "cpu", "t.toml"
    ).run.cpu_affinity
    with pytest.raises(BenchError, match=r"cores 4-9 are not available on this machine .*may use 0-3"):
        affinity.resolve(sets, available={0, 1, 2, 3})
    assert affinity.resolve(sets, available=range(10)) == affinity.CpuSplit(tuple(range(2, 10)), (0,))
    assert affinity.resolve("off") is None


def test_vllm_openmp_binding_follows_the_server_cores_per_rank():
    assert affinity.omp_bind((1,), 1) == "1"
    assert affinity.omp_bind(tuple(range(2, 16)), 2) == "2-8|9-15"
    assert affinity.omp_bind((2, 3, 4), 2) == "2|3-4"
    with pytest.raises(BenchError, match="cannot hold 2 CPU workers"):
        affinity.omp_bind((5,), 2)
    env = affinity.server_env(affinity.CpuSplit((2, 3), (0,)), cpu_platform=True, ranks=1)
    assert env == {SERVER_CPUS_ENV: "2,3", affinity.OMP_BIND_ENV: "2-3"}
    assert affinity.server_env(affinity.CpuSplit((2, 3), (0,)), cpu_platform=False, ranks=1) == {SERVER_CPUS_ENV: "2,3"}


def _guard(env_cpus: str, code: str) -> subprocess.CompletedProcess:
    r, w = os.pipe()
    try:
        return subprocess.run(
            [sys.executable, str(GUARD), str(r), "5", "--", sys.executable, "-c", code],
            env={**os.environ, SERVER_CPUS_ENV: env_cpus},
            pass_fds=(r,),
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        os.close(r)
        os.close(w)


needs_two = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 usable cores")


@needs_two
def test_guard_pins_the_server_it_starts():
    core = max(os.sched_getaffinity(0))
    out = _guard(str(core), "import os, subprocess, sys; print(sorted(os.sched_getaffinity(0)))")
    assert out.returncode == 0 and out.stdout.strip() == f"[{core}]"


def test_guard_refuses_cores_it_cannot_use():
    out = _guard("4095", "print('started')")
    assert out.returncode == 2 and "cannot pin the server to cores 4095" in out.stderr and "started" not in out.stdout


@needs_two
def test_executor_pins_server_and_client_apart_and_records_it(monkeypatch, tmp_path):
    """A scripted sweep with cpu_affinity = "split": the server's env names its cores (and vLLM's OpenMP
    binding agrees), the load runs on the client's cores, the driver's mask comes back after, and the point
    record says what was asked and what the kernel reports."""
    seen: dict = {}
    before = os.sched_getaffinity(0)

    class Server(FakeServer):
        def __init__(self, spec: ServerSpec):
            seen["env"], self.spec = spec.env, spec

        def start(self, timeout_s: float) -> float:
            return 1.0

        def log_text(self) -> str:
            return ""

        def pids(self) -> list[int]:
            return [os.getpid()]

        def stop(self, grace_s: float = 20.0) -> None:
            pass

    def fake_load(base_url, model, *, prompts, warmup_count, records, on_measure_start, first_index, **_):
        seen.setdefault("client", set()).update(os.sched_getaffinity(0))
        return FakeSend()(base_url, model, prompts=prompts, warmup_count=warmup_count, records=records,
                          on_measure_start=on_measure_start, first_index=first_index)  # fmt: skip

    monkeypatch.setattr(
        executor, "server_spec", lambda engine, store, *a, **k: (ServerSpec(["vllm"], {}, store.log_path("e"), 9), 99)
    )
    monkeypatch.setattr(executor, "Server", Server)
    monkeypatch.setattr(executor, "run_load", fake_load)
    monkeypatch.setattr(executor.M, "scrape", lambda url, timeout=10: "")
    profile = parse_profile({**RUN_PROFILE, "run": {"cpu_affinity": "split"}}, "cpu", "split.toml")
    records = run_sweep(make_plan(profile, Machine("cpu")), tmp_path / "out", SweepOptions(quiet=True)).points()
    split = affinity.split_cores(before)
    server_cores = affinity.format_cpu_list(split.server)
    assert seen["env"][SERVER_CPUS_ENV] == ",".join(map(str, split.server))
    assert seen["env"][affinity.OMP_BIND_ENV] == server_cores
    assert seen["client"] == set(split.client) and os.sched_getaffinity(0) == before
    (record,) = records.values()
    applied = record["server"]["cpu_affinity"]
    assert applied["setting"] == "split" and applied["server"] == server_cores
    assert applied["client"] == applied["client_seen"] == affinity.format_cpu_list(split.client)
    assert applied["server_outside"] == [os.getpid()], "the stand-in 'server' (this process) is not on its cores"
