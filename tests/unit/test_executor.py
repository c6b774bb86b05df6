"""The sweep's control flow with a scripted server and load generator (the real ones run in
tests/integration/test_sweep_cpu.py): what each point's record says when a start fails, a load hangs, the server
dies mid-point, or the bench itself fails; and that the raw rows measured before an abort are stored."""

from __future__ import annotations

import pytest

from bench.commands.sweep import SweepOptions, run_sweep
from bench.config.plan import make_plan
from bench.config.profile import parse_profile
from bench.core.hardware import Machine
from bench.engine.server import ServerFailed, ServerSpec
from bench.load.loadgen import LoadAborted
from bench.results.records import Metrics, dump_point
from bench.results.store import SweepStore
from bench.run import executor, trial
from tests.helpers.scripted_load import fake_closed_loop

PROFILE = {
    "name": "scripted",
    "model": {"target": "tiny", "draft": "tiny", "weights": "dummy", "flavor": "cpu"},
    "axes": {
        "draft_attention_backend": ["CPU_MLA"],
        "draft_kv_cache_dtype": ["auto", "fp8"],  # fp8: skipped on CPU
        "num_speculative_tokens": [2],
        "shapes": ["1x8x4", "2x8x4", "3x8x4"],
    },
    "run": {"num_prompts": 3, "warmup_prompts": 1, "warmup_waves": 0, "repeat": 2},
}


class FakeServer:
    """Stands in for bench.engine.server.Server: `script` says what start and each load do."""

    def __init__(self, spec: ServerSpec, script: dict):
        self.spec, self.script, self.stopped = spec, script, False
        script.setdefault("servers", []).append(self)

    base_url = "http://127.0.0.1:9"

    def start(self, timeout_s: float) -> float:
        if self.script.get("start_fails"):
            raise ServerFailed("out-of-memory", "scripted start failure")
        return 1.5

    def check_alive(self) -> None:
        if self.script.get("dead"):
            raise ServerFailed("crash", "server exited with code -9")

    def log_text(self) -> str:
        return ""

    def pids(self) -> list[int]:
        return [4242]

    def stop(self, grace_s: float = 20.0) -> None:
        self.stopped = True


@pytest.fixture
def scripted(monkeypatch, tmp_path):
    """Patches the executor's server, load generator and /metrics; returns (script, run) where run() sweeps."""
    script: dict = {}

    def fake_spec(engine, store, flavor, extra_env=None, draft_keys="legacy"):
        return ServerSpec(["python", "-m", "vllm"], {}, store.log_path(engine.id), 9), 2048

    def fault(call: int, i: int) -> None:
        action = script.get("actions", {}).get(call, "ok")
        if action != "ok" and i == 1:  # one measured request done, then the scripted fault
            _fault(action, script)

    calls: list[dict] = []
    script["loads"] = calls

    monkeypatch.setattr(executor, "server_spec", fake_spec)
    monkeypatch.setattr(executor, "Server", lambda spec: FakeServer(spec, script))
    monkeypatch.setattr(trial, "run_closed_loop", fake_closed_loop(calls, fault))
    monkeypatch.setattr(trial.http_client, "scrape", lambda url, timeout=10: "vllm:spec_decode_num_drafts_total 5\n")
    plan = make_plan(parse_profile(PROFILE, "cpu", "scripted.toml"), Machine("cpu"))

    def run(**options) -> dict[str, dict]:
        """The runnable points' records by shape, as their files hold them (dump_point); the skipped (fp8) ones
        must be recorded as skipped."""
        stored = run_sweep(plan, tmp_path / "out", SweepOptions(quiet=True, **options)).records()
        records = {pid: dump_point(r) for pid, r in stored.items()}
        assert [records[p.id]["status"] for p in plan.skipped] == ["skipped"] * 3
        return {p.shape.label: records[p.id] for p in plan.runnable}

    return script, run, tmp_path / "out"


def _fault(action: str, script: dict) -> None:
    if action == "hang":
        raise LoadAborted("hang", "no streamed token for 12 s")
    if action == "die":
        script["dead"] = True
        raise LoadAborted("hang", "no streamed token for 12 s")  # a dead server explains the stall better
    raise RuntimeError("scripted bench bug")


def by_status(points: dict[str, dict]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for label, record in sorted(points.items()):
        out.setdefault(record["status"], []).append(label)
    return out


def test_every_point_ok_with_trials_raw_rows_and_server_info(scripted):
    script, run, out = scripted
    points = run()
    ok = [p for p in points.values() if p["status"] == "ok"]
    assert len(ok) == 3
    # num_prompts 3, raised to the 5 x C floor that lets a closed loop state its precision (WindowRule.min_requests)
    sent = {c: max(3, 5 * c) for c in (1, 2, 3)}
    assert [(c["warmup"], c["measure"]) for c in script["loads"]] == [
        (w, sent[c]) for c in (1, 2, 3) for w in (1, 0)
    ], "warm-up: trial 0 only"
    # staggered start: slot j at (j + u) x lifetime / C, u random per block; the lifetime is the warm-up's median
    # (1 s scripted) for block 0 and block 0's loaded one (1 s too) for block 1; none at C = 1
    for call, c in zip(script["loads"], (1, 1, 2, 2, 3, 3)):
        offsets = call["offsets"]
        assert len(offsets) == (c if c > 1 else 0)
        assert all(j / c <= o < (j + 1) / c for j, o in enumerate(offsets)), offsets
    assert script["loads"][2]["offsets"] != script["loads"][3]["offsets"], "each block draws its own phases"
    for record in ok:
        assert [t["trial"] for t in record["trials"]] == [0, 1]
        loads = [t["load"] for t in record["trials"]]
        assert [load["stagger_s"] for load in loads] == [
            1 / c if (c := record["config"]["shape"]["concurrency"]) > 1 else 0.0
        ] * 2
        assert [load["lifetime_from"] for load in loads] == ["warm-up", "block 0"]
        assert record["server"]["pids"] == [4242] and record["server"]["ready_s"] == 1.5
        c = record["config"]["shape"]["concurrency"]
        assert record["metrics"]["requests"] == 2 * sent[c] and record["mismatch"] == []
        raw = SweepStore(out).raw(record["point_id"])
        assert [r["trial"] for r in raw] == [0] * (1 + sent[c]) + [1] * sent[c]
    assert all(s.stopped for s in script["servers"]) and len(script["servers"]) == 1


def test_start_failure_fails_every_point_of_the_engine(scripted):
    script, run, _ = scripted
    script["start_fails"] = True
    points = run()
    failed = [p for p in points.values() if p["status"] == "failed"]
    assert len(failed) == 3
    assert {(p["reason"], p["phase"], p["detail"]) for p in failed} == {
        ("out-of-memory", "startup", "scripted start failure")
    }
    assert all("raw" not in p for p in failed) and script["loads"] == []


def test_hang_fails_the_point_with_its_rows_and_the_points_after_it(scripted):
    script, run, out = scripted
    script["actions"] = {1: "hang"}  # second trial of the first point
    points = run()
    first, second, third = points["1x8x4"], points["2x8x4"], points["3x8x4"]
    assert (first["status"], first["reason"], first["phase"]) == ("failed", "hang", "load")
    raw = SweepStore(out).raw(first["point_id"])
    assert [r["trial"] for r in raw] == [0] * (1 + 5) + [1] * 2, "trial 0 and what trial 1 measured before the hang"
    assert first["raw"] == f"raw/{first['point_id']}.parquet"
    for later in (second, third):
        assert later["reason"] == "hang" and later["phase"] == "load"
        assert later["detail"] == f"server failed on point {first['point_id']}: no streamed token for 12 s"
    assert len(script["loads"]) == 2, "no load after the server failed"


def test_dead_server_explains_a_stall(scripted):
    script, run, _ = scripted
    script["actions"] = {2: "die"}  # first trial of the second point
    points = run()
    assert points["1x8x4"]["status"] == "ok"
    assert (points["2x8x4"]["reason"], points["2x8x4"]["detail"]) == ("crash", "server exited with code -9")
    assert points["3x8x4"]["reason"] == "crash"


def test_bench_bug_is_a_failed_point_not_a_failed_sweep(scripted):
    script, run, _ = scripted
    script["actions"] = {0: "bug"}
    points = run()
    assert points["1x8x4"]["reason"] == "bench-error"
    assert points["1x8x4"]["detail"] == "RuntimeError: scripted bench bug"
    assert "raw" not in points["1x8x4"]
    assert points["3x8x4"]["detail"].startswith(f"server failed on point {points['1x8x4']['point_id']}: Runtime")
    assert script["servers"][0].stopped


def test_point_aborted_carries_its_rows():
    exc = executor.PointAborted("hang", "no token", [{"index": 0}])
    assert (exc.reason, exc.detail, exc.rows, str(exc)) == ("hang", "no token", [{"index": 0}], "hang: no token")
    assert executor.PointAborted("crash", "gone").rows == []


def test_recompute_derives_the_figures_from_the_raw_records_again(scripted):
    from bench.measure.recompute import recompute

    _, run, out = scripted
    points = run()
    store = SweepStore(out)
    before = {pid: r for pid, r in store.records().items() if r.status == "ok"}
    assert len(before) == 3
    for record in before.values():  # figures of an older method: stale
        record.metrics = Metrics(output_throughput=-1.0)
        record.trials[1].metrics = Metrics()
        store.save_point(record)
    assert store.records()[next(iter(before))].metrics == Metrics(output_throughput=-1.0)
    assert sorted(recompute(out)) == sorted(before)
    after = {pid: dump_point(r) for pid, r in store.records().items()}
    for pid, original in ((p["point_id"], p) for p in points.values() if p["status"] == "ok"):
        assert after[pid]["metrics"] == original["metrics"]
        assert [t["metrics"] for t in after[pid]["trials"]] == [t["metrics"] for t in original["trials"]]
        assert after[pid]["recomputed"]["at"]


def test_a_resumed_sweep_keeps_its_prompt_salt_and_sends_the_same_prompts_again(scripted):
    """The manifest's prompt_salt names every prompt (bench.load.prompts): a resumed run keeps it, so a point run again
    sends exactly the prompts it sent the first time (reproducible), and no other point's."""
    script, run, out = scripted
    script["actions"] = {2: "hang"}  # the second shape's first trial hangs: the point fails
    first = run()
    assert first["2x8x4"]["status"] == "failed"
    salt = SweepStore(out).manifest()["prompt_salt"]
    sent_first = [c["prompts"] for c in script["loads"]]
    script["actions"] = {}
    again = run(resume=True, rerun_failed=True)
    assert again["2x8x4"]["status"] == "ok"
    manifest = SweepStore(out).manifest()
    assert manifest["prompt_salt"] == salt and len(manifest["resumed"]) == 1
    rerun = script["loads"][len(sent_first)]["prompts"]
    assert rerun[: len(sent_first[2])] == sent_first[2], "the same point, trial and attempt: the same prompts"
    others = [p for i, call in enumerate(sent_first) if i != 2 for p in call]
    assert not any(p in others for p in rerun), "no prompt of another point"


def test_a_given_prompt_salt_sends_the_same_prompts_to_another_folder_and_a_resume_keeps_its_own(scripted, tmp_path):
    """`sweep --prompt-salt` (what `bench ab` gives both sides of a round): two results folders swept with one salt
    send the same prompts, point by point; a new salt sends others; resuming a folder with another salt than its
    own is refused before anything runs."""
    from bench.core.errors import BenchError

    script, _, _ = scripted

    def sent(out, salt, **options) -> list[list[str]]:
        profile = parse_profile(PROFILE | {"run": PROFILE["run"] | {"prompt_salt": salt}}, "cpu", "scripted.toml")
        start = len(script["loads"])
        run_sweep(make_plan(profile, Machine("cpu")), out, SweepOptions(quiet=True, **options))
        return [c["prompts"] for c in script["loads"][start:]]

    side_a, side_b = sent(tmp_path / "a", "s1-r0"), sent(tmp_path / "b", "s1-r0")
    assert SweepStore(tmp_path / "b").manifest()["prompt_salt"] == "s1-r0"
    assert side_a == side_b and len(side_a) == 6  # 3 shapes x 2 trials, the same prompts on both sides
    other = sent(tmp_path / "c", "s1-r1")
    sent_a = [p for call in side_a for p in call]
    assert not any(p in sent_a for call in other for p in call), "another round: fresh prompts"
    next(iter(sorted((tmp_path / "a" / "points").glob("*.json")))).unlink()  # a point left to run
    with pytest.raises(BenchError, match="sent its prompts with salt s1-r0, not s1-r1"):
        sent(tmp_path / "a", "s1-r1", resume=True)
    rerun = sent(tmp_path / "a", "s1-r0", resume=True)  # its own salt: the lost point's prompts again
    assert len(rerun) == 2 and all(call in side_a for call in rerun)


def test_a_prompt_salt_is_one_word_without_slashes_from_the_profile_and_the_cli():
    """A prompt's name joins the salt to the point id and trial with '/' (bench.load.prompts): the profile's
    `[run] prompt_salt` and `sweep --prompt-salt` refuse a salt that is empty, spaced or holds one."""
    from bench.config.plan import plan_sweep
    from bench.core.errors import BenchError

    for salt in ("a/b", " ", ""):
        with pytest.raises(BenchError, match="prompt_salt: String should match"):
            parse_profile(PROFILE | {"run": PROFILE["run"] | {"prompt_salt": salt}}, "cpu", "scripted.toml")
        with pytest.raises(BenchError, match="--prompt-salt"):
            plan_sweep("tiny", dry_run=True, prompt_salt=salt)
    assert plan_sweep("tiny", dry_run=True, prompt_salt="s1-r0").profile.run.prompt_salt == "s1-r0"


def test_a_resume_keeps_what_earlier_points_ran_on_and_lists_every_session(scripted, monkeypatch):
    """A resume from another commit (another lease, another day) must not rewrite the environment the first
    session's points were measured in: the manifest keeps the first environment and lists every session, and the
    report's provenance says which session measured how many points. A resume with nothing left to run leaves the
    manifest as it was."""

    from bench.commands import sweep as sweep_mod
    from bench.report.tables import provenance

    script, run, out = scripted
    script["actions"] = {2: "hang"}
    run()
    first = SweepStore(out).manifest()
    assert len(first["sessions"]) == 1 and first["sessions"][0] == first["environment"]

    real = sweep_mod.collect_environment

    def later(machine):
        return {**real(machine), "time": "2999-01-01T00:00:00+00:00", "suite_git": {"sha": "feedbee", "dirty": False}}

    monkeypatch.setattr(sweep_mod, "collect_environment", later)
    script["actions"] = {}
    run(resume=True, rerun_failed=True)
    manifest = SweepStore(out).manifest()
    assert manifest["environment"] == first["environment"], "the first session's environment is kept"
    assert [s["suite_git"]["sha"] for s in manifest["sessions"]][1:] == ["feedbee"]
    # the rerun point started before the fake session time "2999", so it counts to the first session here: move it
    store = SweepStore(out)
    rerun = next(p for p in store.records().values() if p.started and p.trials and p.status == "ok")
    rerun.started = "2999-01-01T00:00:01+00:00"
    store.save_point(rerun)
    line = provenance(out)["sessions"]
    assert line.startswith("2: ") and "git feedbee" in line and line.endswith("(1 points)"), line

    before = (out / "manifest.json").read_bytes()
    run(resume=True)  # every point done: nothing measured, nothing rewritten
    assert (out / "manifest.json").read_bytes() == before


def test_a_resume_on_another_vllm_or_other_hardware_refuses_before_running_anything(scripted, monkeypatch):
    from bench.commands import sweep as sweep_mod
    from bench.core.errors import BenchError

    script, run, _out = scripted
    script["actions"] = {2: "hang"}
    run()
    loads = len(script["loads"])
    real = sweep_mod.collect_environment

    def other_vllm(machine):
        env = real(machine)
        return {**env, "vllm": {**env["vllm"], "vllm_version": "9.9.9"}}

    monkeypatch.setattr(sweep_mod, "collect_environment", other_vllm)
    with pytest.raises(BenchError, match=r"vLLM .*this session 9\.9\.9"):
        run(resume=True, rerun_failed=True)
    assert len(script["loads"]) == loads, "nothing ran"
    assert sweep_mod.resume_differences(real(Machine("cpu")), real(Machine("cpu"))) == []
    gpu = {"machine": {"platform": "gpu", "gpus": 1, "gpu_name": "NVIDIA H200"}}
    assert sweep_mod.resume_differences(gpu, {"machine": {**gpu["machine"], "gpu_name": "NVIDIA H100"}})
    assert not sweep_mod.resume_differences(gpu, {"machine": {**gpu["machine"], "driver": "999"}})
    assert not sweep_mod.resume_differences(gpu, {"machine": {**gpu["machine"], "gpus": 8}}), "a count may change"
    # on a Ray cluster the machine facts are the driver's and the cluster may grow: only the draft keys count
    cluster = {"machine": {"platform": "gpu", "gpus": 8, "gpu_name": None}, "draft_keys": "legacy"}
    assert not sweep_mod.resume_differences(cluster, {**cluster, "machine": {**cluster["machine"], "gpus": 16}}, True)
    assert not sweep_mod.resume_differences(cluster, {**cluster, "vllm": {"vllm_version": "9.9.9"}}, True)
    assert sweep_mod.resume_differences(cluster, {**cluster, "draft_keys": "upstream"}, True)


def test_a_resume_with_other_draft_keys_refuses(scripted):
    """The draft keys change every speculating server's --speculative-config: a resume that forgot
    `--draft-keys upstream` would have run its points with other keys under the manifest's old value."""
    from bench.core.errors import BenchError

    script, run, _out = scripted
    script["actions"] = {2: "hang"}
    run(draft_keys="upstream")
    with pytest.raises(BenchError, match="draft keys upstream, this session legacy"):
        run(resume=True, rerun_failed=True, draft_keys="legacy")
