"""The generated one-rank Kimi K2.6 model: per-rank arithmetic at TP 8, 4 and 16, the memory estimate, the
refusal, the files, and the sweep's no-speculation baseline (k = 0) and kimi-rank naming."""

import json

import pytest

from bench.config.plan import NO_DRAFT, make_plan
from bench.config.profile import load_profile, parse_profile
from bench.core.errors import BenchError
from bench.core.hardware import Machine
from bench.engine.server import server_argv
from bench.models import kimi_rank as K

H200_BYTES = 143771 * 1024**2  # nvidia-smi memory.total of an H200 (MiB)
H200 = Machine("gpu", 1, "sm90", "NVIDIA H200", gpu_memory_gib=143771 / 1024)


@pytest.mark.parametrize("tp", [8, 4, 16])
def test_target_config_is_one_rank_of_kimi(tp):
    cfg = K.target_config(K.RankSpec(tp=tp))
    # Per rank: heads, dense and expert MLP width and vocab split by TP; everything else is the full model's.
    assert cfg["num_attention_heads"] == cfg["num_key_value_heads"] == 64 // tp
    assert cfg["intermediate_size"] * tp == 18432
    assert cfg["moe_intermediate_size"] * tp == 2048
    assert cfg["vocab_size"] * tp == 163840
    assert (cfg["hidden_size"], cfg["num_hidden_layers"], cfg["q_lora_rank"]) == (7168, 61, 1536)
    assert (cfg["kv_lora_rank"], cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]) == (
        512,
        128,
        64,
        128,
    )
    assert (cfg["n_routed_experts"], cfg["num_experts_per_tok"], cfg["n_shared_experts"]) == (384, 8, 1)
    assert cfg["first_k_dense_replace"] == 1 and cfg["routed_scaling_factor"] == 2.827
    assert (cfg["topk_method"], cfg["scoring_func"], cfg["rms_norm_eps"]) == ("noaux_tc", "sigmoid", 1e-5)
    rope = cfg["rope_scaling"]
    assert (rope["type"], rope["factor"], rope["original_max_position_embeddings"]) == ("yarn", 64.0, 4096)
    assert cfg["rope_theta"] == 50000.0
    assert (cfg["architectures"], cfg["model_type"]) == (["DeepseekV3ForCausalLM"], "deepseek_v3")


@pytest.mark.parametrize("tp", [8, 4, 16])
def test_draft_config_matches_the_rank(tp):
    spec = K.RankSpec(tp=tp)
    target, draft = K.target_config(spec), K.draft_config(spec)
    assert (draft["architectures"], draft["model_type"]) == (["Eagle3DeepseekV3ForCausalLM"], "deepseek_v2")
    assert draft["num_hidden_layers"] == 1 and draft["hidden_size"] == draft["target_hidden_size"] == 7168
    for key in ("num_attention_heads", "intermediate_size", "vocab_size", "kv_lora_rank", "q_lora_rank"):
        assert draft[key] == target[key], key
    assert draft["draft_vocab_size"] == target["vocab_size"]
    assert draft["eagle_aux_hidden_state_layer_ids"] == draft["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    assert draft["eagle_aux_hidden_state_layer_ids"] == [1, 29, 57]
    assert "quantization_config" not in draft and draft["rope_scaling"]["factor"] == 64.0


def test_aux_layers_scale_with_depth_and_stay_inside():
    for layers in range(4, 62):
        aux = K.aux_layers(layers)
        assert len(aux) == 3 and aux == sorted(set(aux)) and aux[0] >= 1 and aux[-1] <= layers - 1
    assert K.aux_layers(61) == [1, 29, 57] and K.aux_layers(4) == [1, 2, 3]


def test_int4_experts_use_kimis_quantization_config_and_ignore_list():
    q = K.target_config(K.RankSpec())["quantization_config"]
    w = q["config_groups"]["group_0"]["weights"]
    assert (q["quant_method"], q["format"]) == ("compressed-tensors", "pack-quantized")
    assert (w["num_bits"], w["type"], w["symmetric"], w["strategy"], w["group_size"]) == (4, "int", True, "group", 32)
    assert q["ignore"][0] == "lm_head" and any("self_attn" in i for i in q["ignore"])
    assert any("shared_experts" in i for i in q["ignore"]) and any("gate|up" in i for i in q["ignore"])
    assert "quantization_config" not in K.target_config(K.RankSpec(experts="bf16"))
    fp8 = K.target_config(K.RankSpec(experts="fp8"))["quantization_config"]
    assert fp8["config_groups"]["group_0"]["weights"]["num_bits"] == 8 and fp8["ignore"] == q["ignore"]


def test_spec_parsing_and_bad_values():
    assert K.parse_spec("kimi-rank") == K.RankSpec(8, 61, "int4")
    assert K.parse_spec("kimi-rank:tp=4,layers=8,experts=bf16") == K.RankSpec(4, 8, "bf16")
    assert K.parse_spec(K.RankSpec(16, 30, "fp8").name) == K.RankSpec(16, 30, "fp8")
    for bad in ("kimi-rank:tp=3", "kimi-rank:layers=3", "kimi-rank:experts=int8", "kimi-rank:foo=1", "kimi-rank:tp=x"):
        with pytest.raises(BenchError):
            K.parse_spec(bad)


def test_estimate_matches_the_hand_arithmetic_at_tp8():
    est = K.estimate(K.RankSpec())
    c = est.components
    # 60 MoE layers x 384 experts x 3 x 7168 x 256 weights at 4 bits + a bf16 scale per 32 = 71.3 GB
    assert c["target routed experts"] == pytest.approx(60 * 384 * 3 * 7168 * 256 * (0.5 + 2 / 32))
    assert c["target routed experts"] / 1e9 == pytest.approx(71.35, abs=0.01)
    # MLA per layer: q_a 7168x1536, q_b 1536x8x192, kv_a 7168x576, kv_b 512x8x256, o 1024x7168 (+2 norms)
    per_layer = 7168 * 1536 + 1536 + 1536 * 8 * 192 + 7168 * 576 + 512 + 512 * 8 * 256 + 8 * 128 * 7168
    assert c["target attention (MLA)"] == 61 * per_layer * 2
    target = sum(v for k, v in c.items() if k.startswith("target"))
    assert 75e9 < target < 77e9  # the "~76 GB" for one rank at full depth
    # docs/facts.md: 125.8 GB allocated at utilization 0.85 = weights + KV cache + activations; the weights
    # leave ~48 GB of it for the cache, i.e. over a million fp8 tokens at 35 kB each.
    assert 45e9 < 125.8e9 - est.weights < 50e9
    assert est.target_kv_per_token["fp8"] == 61 * 576 and est.target_kv_per_token["auto"] == 61 * 576 * 2
    assert est.kv_per_token("fp8", None) == 61 * 576
    assert est.kv_per_token("fp8", "auto") == 61 * 576 + 1152
    assert "total weights" in est.table()


@pytest.mark.parametrize("tp", [4, 16])
def test_estimate_scales_with_tp(tp):
    base, other = K.estimate(K.RankSpec(tp=8)).components, K.estimate(K.RankSpec(tp=tp)).components
    ratio = 8 / tp
    for key in ("target routed experts", "target shared experts", "target dense MLP", "target lm_head"):
        assert other[key] == pytest.approx(base[key] * ratio)
    assert other["target router"] == base["target router"]  # the router is replicated


def test_fit_refuses_what_an_h200_cannot_hold():
    assert K.fit_problem(K.RankSpec(), H200_BYTES, utilization=0.85, max_model_len=34816, target_kv="fp8") is None
    why = K.fit_problem(K.RankSpec(experts="bf16"), H200_BYTES, utilization=0.85)
    assert why and "does not fit" in why and "GiB" in why
    assert K.fit_problem(K.RankSpec(experts="fp8"), H200_BYTES, utilization=0.85)  # ~124 GiB of weights
    assert K.fit_problem(K.RankSpec(experts="fp8", layers=40), H200_BYTES, utilization=0.85) is None
    assert K.fit_problem(K.RankSpec(tp=4), H200_BYTES) and K.fit_problem(K.RankSpec(tp=16), H200_BYTES) is None
    assert K.fit_problem(K.RankSpec(experts="bf16"), None) is None  # unknown GPU: no verdict


def test_written_models_have_the_rank_vocab_and_are_idempotent(tmp_path):
    spec = K.RankSpec(layers=4)
    models = K.write_rank_models(tmp_path / "m", spec)
    target = json.loads((models.target / "config.json").read_text())
    assert target == K.target_config(spec) and target["num_hidden_layers"] == 4
    vocab = json.loads((models.draft / "tokenizer.json").read_text())["model"]["vocab"]
    assert len(vocab) == 20480 and max(vocab.values()) == 20479
    before = {p: p.stat().st_mtime_ns for p in (tmp_path / "m").rglob("*") if p.is_file()}
    K.write_rank_models(tmp_path / "m", spec)
    assert {p: p.stat().st_mtime_ns for p in before} == before
    assert K.cache_folder(tmp_path, spec) != K.cache_folder(tmp_path, K.RankSpec(layers=5))


# --- the sweep side: k = 0 and the kimi-rank model name ------------------------------------------------------


def _profile(**axes):
    data = {
        "name": "k",
        "model": {"target": "kimi-rank:layers=4", "draft": "kimi-rank", "weights": "dummy"},
        "server": {"kv_cache_dtype": "fp8", "gpu_memory_utilization": 0.85, "max_model_len": 2048},
        "axes": {"draft_attention_backend": ["TRITON_MLA", "FLASHMLA"], "draft_kv_cache_dtype": ["fp8", "auto"]} | axes,
        "acceptance": {"mode": "synthetic", "rates": [0.65, 0.4, 0.25]},
    }
    return parse_profile(data, "gpu", "k.toml")


def test_k0_is_one_baseline_server_without_speculative_config():
    plan = make_plan(_profile(num_speculative_tokens=[0, 3], shapes=["1x8x8", "4x8x8"]), H200)
    engines = [e for e, _ in plan.groups]
    assert len(engines) == 1 + 4 and engines[0].num_speculative_tokens == 0  # one baseline, first
    base = engines[0]
    assert (base.draft_attention_backend, base.draft_kv_cache_dtype) == (NO_DRAFT, NO_DRAFT)
    assert base.label().startswith("no-spec") and base.speculative_config("/d") is None
    argv = server_argv("/t", "m", 1, {}, base.speculative_config("/d"), 1, "dummy")
    assert "--speculative-config" not in argv
    spec_argv = server_argv("/t", "m", 1, {}, engines[1].speculative_config("/d"), 1, "dummy")
    assert json.loads(spec_argv[spec_argv.index("--speculative-config") + 1])["num_speculative_tokens"] == 3


def test_k0_needs_no_draft_backend_on_cpu():
    data = {"name": "c", "axes": {"num_speculative_tokens": [0], "draft_attention_backend": ["FLASHMLA"]}}
    plan = make_plan(parse_profile(data, "cpu", "c.toml"), Machine("cpu"))
    assert plan.counts()["runnable"] == 1 and not plan.skipped


def test_negative_k_is_refused():
    with pytest.raises(BenchError, match="num_speculative_tokens"):
        _profile(num_speculative_tokens=[-1])


def test_kimi_rank_profile_checks_names_and_fit():
    with pytest.raises(BenchError, match="kimi-rank"):
        parse_profile({"name": "x", "model": {"target": "kimi-rank", "draft": "/some/draft"}}, "gpu", "x.toml")
    with pytest.raises(BenchError, match="layers"):
        parse_profile({"name": "x", "model": {"target": "kimi-rank:layers=2", "draft": "kimi-rank"}}, "gpu", "x")
    bf16 = {"name": "b", "model": {"target": "kimi-rank:experts=bf16", "draft": "kimi-rank"}}
    plan = make_plan(parse_profile(bf16, "gpu", "b.toml"), H200)
    assert plan.runnable == [] and "does not fit" in plan.skipped[0].skip_reason


def test_shipped_profile_plans_for_one_h200():
    plan = make_plan(load_profile("kimi-k2.6-rank-h200", "gpu"), H200)
    engines = [e for e, _ in plan.groups]
    assert not plan.skipped and engines[0].num_speculative_tokens == 0
    # baseline + backends x draft KV x k in {1, 2, 3, 4}, the plain rank only (DCP: kimi-k2.6-rank-h200-dcp)
    assert len(engines) == 1 + 3 * 2 * 4
    assert K.parse_spec(engines[0].target) == K.RankSpec(8, 61, "int4")
    assert {K.parse_spec(e.target).dcp for e in engines} == {1}
    dcp = make_plan(load_profile("kimi-k2.6-rank-h200-dcp", "gpu"), H200)
    assert not dcp.skipped
    assert [e.label() for e, _ in dcp.groups] == [
        "FLASHMLA/fp8 dcp4-loopback k3",
        "FLASHMLA/fp8 dcp8-loopback k3",
        "FLASHMLA/fp8 dcp2-loopback k3",
        "FLASHMLA/fp8 dcp1 k3",
    ]


def test_cli_prints_the_estimate_writes_and_refuses(tmp_path, capsys):
    from bench.cli import main

    assert main(["models", "kimi-rank", str(tmp_path / "ok"), "--layers", "4", "--gpu-memory-gib", "140.4"]) == 0
    out = capsys.readouterr().out
    assert "total weights" in out and (tmp_path / "ok" / "draft" / "config.json").exists()
    assert main(["models", "kimi-rank", str(tmp_path / "no"), "--experts", "bf16", "--gpu-memory-gib", "140.4"]) == 1
    captured = capsys.readouterr()
    assert "total weights" in captured.out and "does not fit" in captured.err and not (tmp_path / "no").exists()
    assert main(["models", "kimi-rank", str(tmp_path / "f"), "--experts", "bf16", "--layers", "4", "--force"]) == 0
