"""What a server is started with: the dry run shows the exact command the run passes (upstream draft keys
included), and prompts use the target's own token ids, never special ones, never a guessed vocab."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys

import pytest

from bench.commands.sweep import SweepOptions, SweepRequest, dry_run, run_sweep
from bench.config.plan import plan_sweep
from bench.core.errors import BenchError
from bench.engine import launch
from bench.load.loadgen import make_prompts
from bench.models.models import VOCAB_SIZE, write_tiny_models
from bench.models.prompt_vocab import prompt_vocab
from bench.results.store import SweepStore
from bench.run import executor
from tests.helpers.extras import needs_vllm
from tests.unit.test_executor import FakeServer

HUB_PROFILE = """
name = "hub-target"
[model]
target = "org/absent"
draft = "org/absent-eagle3"
[axes]
draft_attention_backend = ["CPU_MLA"]
draft_kv_cache_dtype = ["auto"]
num_speculative_tokens = [2]
shapes = ["1x8x4"]
"""


def spec_configs(text: str) -> list[dict]:
    """The --speculative-config of every server command in a dry run."""
    out = []
    for line in text.splitlines():
        if line.startswith("  python "):
            argv = shlex.split(line)
            out.append(json.loads(argv[argv.index("--speculative-config") + 1]))
    return out


def test_dry_run_shows_the_draft_keys_the_run_passes(monkeypatch, tmp_path):
    request = SweepRequest(profile="tiny", platform="cpu", draft_keys="upstream")
    (upstream,) = spec_configs(dry_run(request))
    assert upstream["attention_backend"] == "CPU_MLA" and upstream["kv_cache_dtype"] == "auto"
    assert "draft_attention_backend" not in upstream and "draft_kv_cache_dtype" not in upstream
    (legacy,) = spec_configs(dry_run(SweepRequest(profile="tiny", platform="cpu")))
    assert (legacy["draft_attention_backend"], legacy["draft_kv_cache_dtype"]) == ("CPU_MLA", "auto")
    assert "attention_backend" not in legacy

    # The run's own argv for the same engine config carries the same --speculative-config, byte for byte.
    plan = plan_sweep("tiny", platform="cpu", dry_run=True)
    engine = plan.groups[0][0]
    target, draft = launch._display_models(engine, plan.flavor)
    monkeypatch.setattr(launch, "resolve_models", lambda e, f: (target, draft, None, range(3, 9)))
    spec, ids = launch.server_spec(engine, SweepStore(tmp_path), plan.flavor, {}, "upstream")
    ran = json.loads(spec.argv[spec.argv.index("--speculative-config") + 1])
    assert ran == upstream and ids == range(3, 9)


def test_the_tiny_target_prompt_ids_are_known_without_vllm():
    code = (
        "import sys; from bench.engine.launch import prompt_ids; ids = prompt_ids('tiny'); "
        "assert 'vllm' not in sys.modules and 'transformers' not in sys.modules; print(ids.start, ids.stop)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["3", str(VOCAB_SIZE)]  # the tiny tokenizer's specials are ids 0-2


@needs_vllm  # prompt_vocab reads the tokenizer through vLLM's
def test_a_local_target_uses_its_own_tokenizer_without_special_ids(tmp_path):
    models = write_tiny_models(tmp_path / "m", "cpu")
    launch.prompt_ids.cache_clear()
    target, _, _, ids = launch.resolve_models(plan_engine(tmp_path, str(models.target), str(models.draft)), "cpu")
    vocab = prompt_vocab(str(models.target))
    assert target == str(models.target) and list(ids) == vocab.allowed()
    assert not set(ids) & vocab.special_ids and len(ids) == vocab.size - len(vocab.special_ids)
    prompts = make_prompts(20, 64, ids, seed=1)
    assert {i for p in prompts for i in p} <= set(ids) and all(len(p) == 64 for p in prompts)


def test_an_uncached_hub_target_fails_clearly_before_any_server_starts(monkeypatch, tmp_path):
    import huggingface_hub.constants as c

    monkeypatch.setattr(c, "HF_HUB_CACHE", str(tmp_path / "empty"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    launch.prompt_ids.cache_clear()
    profile = tmp_path / "hub.toml"
    profile.write_text(HUB_PROFILE)
    assert "org/absent" in dry_run(SweepRequest(profile=str(profile), platform="cpu"))  # no tokenizer needed
    with pytest.raises(BenchError, match="not in the local Hugging Face cache"):
        launch.resolve_models(plan_sweep(str(profile), platform="cpu", dry_run=True).groups[0][0], "cpu")
    script: dict = {}
    monkeypatch.setattr(executor, "Server", lambda spec: FakeServer(spec, script))
    plan = plan_sweep(str(profile), platform="cpu", dry_run=True)
    with pytest.raises(BenchError, match="org/absent"):
        run_sweep(plan, tmp_path / "out", SweepOptions(quiet=True))
    assert "servers" not in script and not (tmp_path / "out").exists()


def test_prompts_from_a_vocab_size_are_unchanged():
    """The tiny model's ids (a range from its specials' end) give the prompts an int vocab size always gave."""
    assert make_prompts(3, 16, launch.prompt_ids("tiny"), seed=7) == make_prompts(3, 16, VOCAB_SIZE, seed=7)


def plan_engine(tmp_path, target: str, draft: str):
    profile = tmp_path / "local.toml"
    profile.write_text(HUB_PROFILE.replace("org/absent-eagle3", draft).replace("org/absent", target))
    return plan_sweep(str(profile), platform="cpu", dry_run=True).groups[0][0]


def test_the_dry_run_says_how_many_blocks_and_starts():
    text = launch.measurement_line(plan_sweep("kimi-k2.6-rank-h200-starts", dry_run=True).profile.run)
    assert "3 blocks of it, each restarted at its own random phase" in text
    assert "on 3 server starts (OUT/start-k, starts.md)" in text
    one = launch.measurement_line(plan_sweep("tiny-text", dry_run=True).profile.run)
    assert "one block (no phase sampled)" in one and "server starts" not in one
