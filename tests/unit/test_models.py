import hashlib
import json
import os
import subprocess
import sys

import pytest

from bench.core.errors import BenchError
from bench.load.loadgen import make_prompts
from bench.models import models
from bench.models.models import FLAVORS, SPECIAL_TOKENS, VOCAB_SIZE, cache_folder, write_tiny_models
from tests.helpers.extras import needs_torch


def digest(folder):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


@pytest.mark.parametrize("flavor", ["cpu", "gpu"])
def test_configs_have_kimi_mla_dims_and_eagle3_fields(tmp_path, flavor):
    m = write_tiny_models(tmp_path, flavor)
    target = json.loads((m.target / "config.json").read_text())
    draft = json.loads((m.draft / "config.json").read_text())
    for c in (target, draft):
        assert (c["kv_lora_rank"], c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"]) == (512, 128, 64, 128)
        assert c["kv_lora_rank"] + c["qk_rope_head_dim"] == 576  # CPU MLA needs it
        assert c["rope_scaling"]["factor"] == 32.0
    assert target["architectures"] == ["DeepseekV3ForCausalLM"] and target["topk_method"] == "noaux_tc"
    assert draft["architectures"] == ["Eagle3DeepseekV3ForCausalLM"] and draft["model_type"] != "deepseek_v3"
    assert draft["eagle_aux_hidden_state_layer_ids"] == [1, 2, 3] and draft["num_hidden_layers"] == 1
    assert target["model_type"] == FLAVORS[flavor].target_model_type


@needs_torch  # zero-final-norm weights are written as bf16 through torch
def test_deterministic_and_idempotent_with_zero_norm_weights(tmp_path):
    a = write_tiny_models(tmp_path / "a", "cpu", "zero-final-norm", seed=0)
    b = write_tiny_models(tmp_path / "b", "cpu", "zero-final-norm", seed=0)
    assert digest(a.target) == digest(b.target) and digest(a.draft) == digest(b.draft)
    before = digest(a.target)
    write_tiny_models(tmp_path / "a", "cpu", "zero-final-norm", seed=0)
    assert digest(a.target) == before

    from safetensors.torch import load_file

    target, draft = load_file(str(a.target / "model.safetensors")), load_file(str(a.draft / "model.safetensors"))
    assert float(target["model.norm.weight"].abs().sum()) == 0.0 and float(draft["norm.weight"].abs().sum()) == 0.0
    assert float(target["model.layers.0.input_layernorm.weight"].float().mean()) == 1.0
    assert target["model.layers.1.mlp.experts.7.down_proj.weight"].shape == (256, 128)
    assert draft["midlayer.self_attn.q_a_proj.weight"].shape == (128, 512)  # the draft layer sees [embeds, hidden]


def test_byte_level_tokenizer_encodes_any_text_and_decodes_every_id(tmp_path):
    from tokenizers import Tokenizer

    m = write_tiny_models(tmp_path, "cpu")
    tok = Tokenizer.from_file(str(m.target / "tokenizer.json"))
    assert tok.get_vocab_size() == VOCAB_SIZE
    text = "def f(x):\n    return 'héllo, 日本'  \t~"
    ids = tok.encode(text).ids
    assert len(ids) == len(text.encode()) and min(ids) >= len(SPECIAL_TOKENS)  # one token per byte, no special
    assert tok.decode(ids) == text
    assert [tok.token_to_id(t) for t in SPECIAL_TOKENS] == [0, 1, 2]
    assert all(tok.decode([i]) for i in range(len(SPECIAL_TOKENS), VOCAB_SIZE))  # every ordinary id decodes
    prompt = make_prompts(1, 64, VOCAB_SIZE, seed=0)[0]  # the random-id workload's ids stay valid
    assert all(tok.id_to_token(i) is not None for i in prompt)


def test_tokenizer_vocab_size_is_a_parameter(tmp_path):
    from tokenizers import Tokenizer

    models._write_tokenizer(tmp_path, vocab_size=70000)
    tok = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    assert tok.get_vocab_size() == 70000 and tok.decode([69999])
    with pytest.raises(BenchError, match="at least 259"):
        models._write_tokenizer(tmp_path / "small", vocab_size=100)


def test_cache_folder_changes_with_flavor_weights_and_configs(tmp_path, monkeypatch):
    base = cache_folder(tmp_path, "cpu", "dummy")
    assert base.parent == tmp_path and base.name.startswith("tiny-cpu-dummy-")
    assert cache_folder(tmp_path, "gpu", "dummy") != base
    assert cache_folder(tmp_path, "cpu", "zero-final-norm") != base
    real = models.draft_config  # one field of one config changes: the weights written before must not be reused
    monkeypatch.setattr(models, "draft_config", lambda flavor: {**real(flavor), "num_hidden_layers": 2})
    assert cache_folder(tmp_path, "cpu", "dummy") != base


def test_cache_folder_is_the_same_in_another_process(tmp_path):
    """The sweep finds a model written by an earlier run: the name must not depend on the process (a key built
    with hash() or set order would change with the hash seed)."""
    code = f"from bench.models.models import cache_folder; print(cache_folder({str(tmp_path)!r}, 'cpu', 'dummy'))"
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.strip() == str(cache_folder(tmp_path, "cpu", "dummy"))


def test_cache_folder_changes_with_the_tokenizer_version(tmp_path, monkeypatch):
    before = cache_folder(tmp_path, "cpu", "dummy")
    monkeypatch.setattr(models, "TOKENIZER_VERSION", models.TOKENIZER_VERSION + 1)
    assert cache_folder(tmp_path, "cpu", "dummy") != before
