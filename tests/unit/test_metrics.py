from pathlib import Path

import pytest

from bench.core.errors import BenchError
from bench.engine.server import server_argv
from bench.measure import metrics as M
from bench.measure.effective import mismatches, read_effective
from bench.measure.failures import classify_log


def rec(send, chunks, tokens, end, status="ok", phase="measure", prompt_len=8):
    return {
        "phase": phase,
        "status": status,
        "send_time": send,
        "end_time": end,
        "chunk_times": chunks,
        "chunk_tokens": tokens,
        "output_tokens": sum(tokens),
        "prompt_len": prompt_len,
        "error": None,
    }


def test_multi_token_chunks_give_token_accurate_itl_and_tpot():
    # First token at 0.1 s, then chunks of 4, 4, 3 tokens 40 ms apart: TPOT = 120 ms / 11 tokens.
    r = rec(0.0, [0.1, 0.14, 0.18, 0.22], [1, 4, 4, 3], 0.23)
    lat = M.request_latencies(r)
    assert lat["ttft"] == pytest.approx(100)
    assert lat["tpot"] == pytest.approx(120 / 11)
    assert len(lat["itl"]) == 11 and sum(lat["itl"]) == pytest.approx(120)
    assert lat["e2e"] == pytest.approx(230)


def test_summary_throughput_and_unknowns():
    recs = [
        rec(0.0, [0.1, 0.2], [1, 3], 0.2, phase="warmup"),
        rec(1.0, [1.1, 1.3], [1, 3], 1.3),
        rec(1.0, [1.2, 1.5], [1, 3], 2.0),
        {**rec(1.0, [], [], 1.1, status="error"), "error": "HTTP 500"},
    ]
    s = M.summarize(recs)
    assert (s["requests"], s["completed"], s["errors"]) == (3, 2, 1)
    assert s["duration_s"] == pytest.approx(1.0) and s["output_throughput"] == pytest.approx(8.0)
    assert s["error_samples"] == ["HTTP 500"]
    empty = M.summarize([{**rec(0, [], [], 1, status="error"), "error": "x"}])
    assert empty["output_throughput"] is None and empty["ttft_ms"]["p50"] is None


METRICS_TEXT = """# HELP x
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 10.0
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 30.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 13.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 6.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 4.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} 3.0
vllm:cache_config_info{block_size="64",cache_dtype="fp8",engine="0"} 1.0
"""


def test_spec_delta_over_window():
    before = {"drafts": 0.0, "draft_tokens": 0.0, "accepted_tokens": 0.0, "per_position": [0.0, 0.0, 0.0]}
    after = M.spec_counters(M.parse_prometheus(METRICS_TEXT))
    d = M.spec_delta(before, after)
    assert d["acceptance_rate"] == pytest.approx(13 / 30) and d["mean_acceptance_length"] == pytest.approx(2.3)
    assert d["per_position_acceptance"] == pytest.approx([0.6, 0.4, 0.3])
    assert M.spec_delta({}, after)["acceptance_rate"] is None  # unknown stays None


def test_effective_config_and_mismatch_flags():
    log = (
        "INFO Using AttentionBackendEnum.FLASHMLA backend.\nINFO Using TRITON_MLA backend.\n"
        "'cudagraph_mode': <CUDAGraphMode.FULL_AND_PIECEWISE: 2> decode_context_parallel_size=1"
    )
    eff = read_effective(log, M.parse_prometheus(METRICS_TEXT))
    assert eff["target_attention_backend"] == "FLASHMLA" and eff["draft_attention_backend"] == "TRITON_MLA"
    assert eff["kv_cache_dtype"] == "fp8" and eff["cudagraph_mode"] == "FULL_AND_PIECEWISE"
    asked = {"dcp_size": 2, "draft_attention_backend": "FLASHMLA", "server": {"kv_cache_dtype": "auto"}}
    flags = mismatches(asked, eff)
    assert len(flags) == 3 and flags[0] == "dcp_size: asked 2, ran 1"


@pytest.mark.parametrize(
    "line, reason",
    [
        (
            "pydantic_core._pydantic_core.ValidationError: 1 validation error for SpeculativeConfig\n"
            "draft_attention_backend\n  Unexpected keyword argument [type=unexpected_keyword_argument",
            "unpatched-draft-keys",
        ),
        (
            "    seq_lens = seq_lens[:num_reqs]\nTypeError: 'NoneType' object is not subscriptable",
            "dcp-draft-seq-lens-none",
        ),
        (  # the 0.26.0 builder's line as a log prints it: prefix, source line, carets, error
            '(EngineCore pid=7) ERROR [core.py:1] File "mla_attention.py", line 1985, in build\n'
            "(EngineCore pid=7) ERROR [core.py:1]     seq_lens_device=seq_lens[:num_decodes],\n"
            "(EngineCore pid=7) ERROR [core.py:1]                     ~~~~~~~~^^^^^^^^^^^^^^\n"
            "(EngineCore pid=7) ERROR [core.py:1] TypeError: 'NoneType' object is not subscriptable",
            "dcp-draft-seq-lens-none",
        ),
        ("    x = cfg[:3]\nTypeError: 'NoneType' object is not subscriptable", None),  # any other None slice
        (
            "AssertionError: Decode Context Parallelism (DCP) requires attention implementations to return the "
            "softmax LSE during decode, but CPUMLAImpl does not.",
            "dcp-backend-no-lse",
        ),
        (
            "ValueError: Selected backend AttentionBackendEnum.FLASHMLA is not valid for this configuration. "
            "Reason: ['block_size not supported']",
            "invalid-backend-combination",
        ),
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate", "out-of-memory"),
        ("AssertionError: Synthetic acceptance not supported with CPU sampling", "synthetic-acceptance-unsupported"),
        ("vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue", "engine-dead"),
        # Seen on an H200, vLLM 0.26.0, FLASHMLA draft with fp8 draft KV: the root cause wins over EngineDeadError.
        (
            "(EngineCore pid=2898) ERROR 12-02 15:49:23 [core.py:1332] RuntimeError: call, /opt/venv/lib/python3.12/"
            "site-packages/torch/include/torch/csrc/stable/stableivalue_conversions.h:544, Not yet supported ScalarType "
            "46, please file an issue describing your use case.\nvllm.v1.engine.exceptions.EngineDeadError: EngineCore",
            "kernel-dtype-unsupported",
        ),
        # Seen on an H200, vLLM 0.26.0, one Kimi K2.6 rank: FLASHMLA draft on bf16 KV under an fp8 target KV cache.
        (
            "CUDA error (/workspace/.deps/flashmla-src/csrc/smxx/decode/combine/combine.cu:196): an illegal memory "
            "access was encountered\nvllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue",
            "cuda-illegal-memory-access",
        ),
    ],
)
def test_failure_signatures(line, reason):
    found = classify_log("INFO start\n" + line + "\nINFO more")
    assert (found[0] if found else None) == reason
    assert classify_log("INFO all good\n") is None


@pytest.mark.parametrize(
    "name, reason",
    [
        ("server-dcp4-loopback-unpatched-h200.log", "dcp-draft-seq-lens-none"),
        ("server-dcp4-loopback-full-graphs-h200.log", "dcp-spec-full-cudagraph"),
    ],
)
def test_failures_in_committed_h200_logs(name, reason):
    """Excerpts of real vLLM 0.26.0 server logs (tests/data/logs/README.md) classified from their tracebacks."""
    text = (Path(__file__).resolve().parents[1] / "data" / "logs" / name).read_text()
    found = classify_log(text)
    assert found is not None and found[0] == reason, found


def test_server_argv_maps_vllm_names():
    argv = server_argv(
        "/m",
        "n",
        9,
        {"enforce_eager": True, "max_model_len": 512, "trust_remote_code": False, "compilation_config": {"mode": 0}},
        {"method": "eagle3"},
        2,
        "dummy",
    )
    assert argv[argv.index("--decode-context-parallel-size") + 1] == "2"
    assert "--enforce-eager" in argv and "--trust-remote-code" not in argv
    assert argv[argv.index("--compilation-config") + 1] == '{"mode": 0}'
    assert argv[argv.index("--speculative-config") + 1] == '{"method": "eagle3"}'


def test_prometheus_text_through_prometheus_clients_parser():
    """Label values unescaped, histogram and counter samples under their sample names; a page that does not parse
    is an error naming /metrics, not an empty reading that would pass for 'no counters'."""
    page = (
        "# TYPE vllm:e2e_request_latency_seconds histogram\n"
        'vllm:e2e_request_latency_seconds_bucket{le="+Inf",model_name="m"} 4.0\n'
        'vllm:e2e_request_latency_seconds_count{model_name="m"} 4.0\n'
        "# TYPE vllm:prefix_cache_hits counter\n"
        'vllm:prefix_cache_hits_total{model_name="a \\"q\\" b"} 7.0\n'
    )
    samples = M.parse_prometheus(page)
    assert ("vllm:prefix_cache_hits_total", {"model_name": 'a "q" b'}, 7.0) in samples
    assert ("vllm:e2e_request_latency_seconds_count", {"model_name": "m"}, 4.0) in samples
    with pytest.raises(BenchError, match="/metrics page does not parse"):
        M.parse_prometheus('vllm:x{model_name="m" 1.0\n')


def test_acceptance_length_se_is_the_standard_error_of_the_steps_accepted():
    # the per-position fractions of a sample of steps (position i accepted where X >= i) give back the sample's
    # own variance of X, so the standard error is its standard deviation over sqrt(steps)
    import random
    import statistics

    rng = random.Random(7)
    steps = [min(sum(1 for _ in iter(lambda: rng.random() < 0.6, False)), 3) for _ in range(5000)]
    per_position = [sum(x >= i for x in steps) / len(steps) for i in (1, 2, 3)]
    se = M.acceptance_length_se(per_position, len(steps))
    assert se == pytest.approx(statistics.pstdev(steps) / len(steps) ** 0.5)
    # the synthetic rates 0.65 / 0.40 / 0.25: steps accept 0, 1, 2, 3 drafts with 0.35 / 0.25 / 0.15 / 0.25
    assert M.acceptance_length_se([0.65, 0.40, 0.25], 1) == pytest.approx((3.1 - 1.3**2) ** 0.5)
    assert M.acceptance_length_se([1.0, 1.0], 100) == 0.0  # every draft accepted: no spread
    assert M.acceptance_length_se(None, 100) is None and M.acceptance_length_se([0.5], 0) is None
