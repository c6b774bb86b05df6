"""GPU correctness of the dcp-spec-decode patch (issue 39 item 4): speculative verify tokens decoded on a KV cache
sharded over N = 2, 4, 8 interleaved DCP ranks, merged with vLLM's own LSE correction, equal causal attention
over the whole KV.

Needs a CUDA GPU with FlashMLA (sm90/sm100) and a vLLM 0.26.* or 0.33.* with the patch applied
(`bench patch apply`); skipped otherwise. Run: `pytest -q -m gpu tests/integration/test_dcp_spec_decode_gpu.py`.

What runs is vLLM's code, not a copy:
- the sharding: vLLM's own slot-mapping kernel (`BlockTables.compute_slot_mappings`, v1/worker/gpu/block_table.py)
  places every token of every sequence on its rank; the test checks those slots against bench.models.dcp_local;
- the patched decode path: `FlashMLAMetadataBuilder._build_decode` (per-token rows, FlashMLA scheduler metadata)
  and `FlashMLAImpl.forward_mqa` (the FlashMLA kernel, bf16 or fp8), called on instances made without __init__
  that hold only the attributes those methods read (a real builder needs a model config and a DCP group);
- the merge: `correct_attn_out` (0.26: v1/attention/ops/common.py; 0.33: v1/attention/ops/dcp.py), the Triton
  kernel `cp_lse_ag_out_rs` runs after its all-gather of the LSEs; the sum over ranks stands for its
  reduce-scatter (a sum, then a head slice per rank).

Tolerances (stated here, checked per case): with err(x) = max |x - ref| / max |ref| over every row, head and
channel, against float32 causal attention over the whole KV computed from the values as cached (so the fp8
quantisation of the cache and query is not counted, only the kernels' arithmetic):
- output: err <= max(4 x err of the unsharded decode path (DCP 1: the same FlashMLA kernel, one k+1-token row
  per request), FLOOR[dtype]), FLOOR = 2e-2 for bf16 and 6e-2 for fp8. Each rank's partial output is rounded to
  bf16 by the kernel and again by the correction before the sum, so the merge adds roundings the DCP-1 path
  has not: hence 4x, not 1x;
- LSE: max |lse - ref| <= max(4 x the DCP-1 path's, LSE_FLOOR[dtype]) (natural log), LSE_FLOOR = 2e-2 bf16 / 6e-2 fp8.
A control shows the test can fail: the same shards decoded the unpatched way (one k+1-token causal row per
request with the request's local length) miss keys and exceed the tolerance many times over.
These tolerances were written without a GPU run (no GPU was available to the session that wrote them).
"""

from __future__ import annotations

import inspect
from types import SimpleNamespace

import pytest

from bench.models.dcp_local import local_index, verify_rows, whole_request_mask

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")

BLOCK = 64  # FlashMLA's one kernel block size (FlashMLABackend.get_supported_kernel_block_sizes)
LORA, ROPE = 512, 64  # MLA latent (the value) and rope widths: a 576-wide MQA key, as in Kimi K2.6
HEADS_PER_RANK = 8  # one TP8 rank of Kimi K2.6 (docs/kimi-rank.md); under DCP the rank attends N x 8 gathered heads
SCALE = (128 + 64) ** -0.5  # 1/sqrt(qk_nope + qk_rope head dims)
FLOOR = {"bf16": 2e-2, "fp8": 6e-2}
LSE_FLOOR = {"bf16": 2e-2, "fp8": 6e-2}
SEQ_LENS = [9, 130, 700, 1029]  # 9: on most ranks the first verify tokens see no local key at all
RECENT, ALPHA = 32, 6.0  # the last RECENT keys of each sequence match every query strongly: masks matter
FP8_MAX = 448.0
DEVICE = "cuda"


@pytest.fixture(scope="module")
def flashmla():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    vllm = pytest.importorskip("vllm")
    from vllm.v1.attention.ops.flashmla import is_flashmla_dense_supported

    supported, why = is_flashmla_dense_supported()
    if not supported:
        pytest.skip(f"FlashMLA dense is unavailable here: {why}")
    from vllm.v1.attention.backends.mla import flashmla as module

    if not hasattr(module, "dcp_spec_decode_rows"):
        pytest.skip(f"vLLM {vllm.__version__} at {module.__file__} lacks dcp-spec-decode: run `bench patch apply`")
    return module


def make_data(k: int, heads: int, kind: str, seed: int):
    """Per-request latent KV rows (as cached: bf16, or fp8 with a per-tensor scale) and the queries of the k + 1
    verify tokens of every request, with their dequantised float32 values for the reference."""
    gen = torch.Generator().manual_seed(seed)
    u = torch.randn(ROPE, generator=gen)
    u /= u.norm()
    kv = [torch.randn(n, LORA + ROPE, generator=gen) * 0.5 for n in SEQ_LENS]
    for x in kv:
        x[-RECENT:, LORA:] += ALPHA * u
    q = torch.randn(len(SEQ_LENS) * (k + 1), heads, LORA + ROPE, generator=gen) * 0.5
    q[..., LORA:] += ALPHA * u
    if kind == "bf16":
        kv_c = [x.to(torch.bfloat16) for x in kv]
        q_c = q.to(torch.bfloat16)
        return kv_c, q_c, [x.float() for x in kv_c], q_c.float(), 1.0, 1.0
    k_scale = max(float(x.abs().max()) for x in kv) / FP8_MAX
    q_scale = float(q.abs().max()) / FP8_MAX
    kv_c = [(x / k_scale).to(torch.float8_e4m3fn) for x in kv]
    q_c = (q / q_scale).to(torch.float8_e4m3fn)
    return kv_c, q_c, [x.float() * k_scale for x in kv_c], q_c.float() * q_scale, k_scale, q_scale


def reference(q: torch.Tensor, kv: list[torch.Tensor], k: int):
    """Causal attention over the whole KV in float32: verify token i of request j (position L - (k + 1) + i) sees
    positions 0 .. its own. Returns out [rows, heads, LORA] and lse [rows, heads]."""
    outs, lses = [], []
    for j, x in enumerate(kv):
        n = x.shape[0]
        qj = q[j * (k + 1) : (j + 1) * (k + 1)]
        scores = torch.einsum("thd,kd->thk", qj, x) * SCALE
        pos = torch.arange(n - (k + 1), n)
        scores = scores.masked_fill((torch.arange(n)[None, :] > pos[:, None])[:, None, :], float("-inf"))
        lses.append(torch.logsumexp(scores, dim=-1))
        outs.append(torch.einsum("thk,kd->thd", torch.softmax(scores, dim=-1), x[:, :LORA]))
    return torch.cat(outs), torch.cat(lses)


def shard(kv: list[torch.Tensor], size: int, rank: int, interleave: int, block_ids: torch.Tensor):
    """Rank `rank`'s paged KV cache, filled through vLLM's own slot mapping (every token of every sequence as one
    prefill), and that mapping checked against bench.models.dcp_local."""
    from vllm.v1.worker.gpu.block_table import BlockTables

    reqs, width = block_ids.shape
    lens = [x.shape[0] for x in kv]
    kwargs = {
        "block_sizes": [BLOCK],
        "max_num_reqs": reqs,
        "max_num_batched_tokens": sum(lens),
        "max_num_blocks_per_group": [width],
        "device": torch.device(DEVICE),
        "cp_size": size,
        "cp_rank": rank,
        "cp_interleave": interleave,
    }
    if "kernel_block_sizes" in inspect.signature(BlockTables).parameters:  # 0.26
        kwargs["kernel_block_sizes"] = [BLOCK]
    tables = BlockTables(**kwargs)
    tables.block_tables[0].gpu[:reqs, :width] = block_ids
    starts = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32, device=DEVICE)
    positions = torch.cat([torch.arange(n) for n in lens]).to(DEVICE, torch.int64)
    slots = tables.compute_slot_mappings(
        torch.arange(reqs, dtype=torch.int32, device=DEVICE), starts, positions, sum(lens)
    )[0].cpu()
    want = []
    for j, n in enumerate(lens):
        for p in range(n):
            if (p // interleave) % size != rank:
                want.append(-1)
            else:
                li = local_index(p, size, interleave)
                want.append(int(block_ids[j, li // BLOCK]) * BLOCK + li % BLOCK)
    assert slots.tolist() == want, "vLLM's slot mapping and bench.models.dcp_local disagree"
    values, held = torch.cat(kv), slots >= 0
    shape = (int(block_ids.max()) + 1, BLOCK, LORA + ROPE)
    if values.dtype == torch.bfloat16:
        cache = torch.zeros(shape, dtype=torch.bfloat16, device=DEVICE)
        cache.view(-1, LORA + ROPE)[slots[held].to(DEVICE)] = values[held].to(DEVICE)
        return cache
    # fp8: written as bytes (index_put has no float8 kernel in every torch), read as float8_e4m3fn, as vLLM views
    # its uint8 cache.
    cache = torch.zeros(shape, dtype=torch.uint8, device=DEVICE)
    cache.view(-1, LORA + ROPE)[slots[held].to(DEVICE)] = values[held].view(torch.uint8).to(DEVICE)
    return cache.view(torch.float8_e4m3fn)


def decode(flashmla, cache, q, block_ids, k, kind, size, rank, interleave, k_scale, q_scale, patched=True):
    """One rank's decode of every request's k + 1 verify tokens through the (patched) FlashMLA builder and impl.
    patched=False: the unpatched path, one k+1-token causal row per request with the request's local length."""
    reqs = block_ids.shape[0]
    seq_lens = torch.tensor(SEQ_LENS, dtype=torch.int32, device=DEVICE)
    qsl = torch.arange(0, reqs * (k + 1) + 1, k + 1, dtype=torch.int32)
    builder = object.__new__(flashmla.FlashMLAMetadataBuilder)
    builder.__dict__.update(
        dcp_spec_decode=patched and size > 1,
        dcp_world_size=size,
        dcp_rank=rank,
        cp_kv_cache_interleave_size=interleave,
        num_q_heads=HEADS_PER_RANK if size > 1 else q.shape[1],
        is_fp8_kvcache=kind == "fp8",
        compilation_config=SimpleNamespace(cudagraph_mode=SimpleNamespace(has_full_cudagraphs=lambda: False)),
        cg_buf_tile_scheduler_metadata=None,
        cg_buf_num_splits=None,
        dcp_rows_seq_lens=torch.zeros(reqs * (k + 1), dtype=torch.int32, device=DEVICE),
        dcp_rows_block_table=None,
    )
    from vllm.v1.attention.backends.utils import get_dcp_local_seq_lens

    local = get_dcp_local_seq_lens(seq_lens, size, rank, interleave) if size > 1 else seq_lens
    kwargs = {
        "block_table_tensor": block_ids.to(DEVICE, torch.int32),
        "seq_lens_device": local,
        "max_seq_len": max(SEQ_LENS),
        "query_start_loc_cpu": qsl,
        "query_start_loc_device": qsl.to(DEVICE),
        "num_decode_tokens": reqs * (k + 1),
        "dcp_tot_seq_lens_device": seq_lens if size > 1 else None,
    }
    if "max_query_len" in inspect.signature(builder._build_decode).parameters:  # 0.33
        kwargs["max_query_len"] = k + 1
    meta = builder._build_decode(**kwargs)
    impl = object.__new__(flashmla.FlashMLAImpl)
    impl.__dict__.update(
        kv_cache_dtype="fp8" if kind == "fp8" else "auto",
        scale=SCALE,
        kv_lora_rank=LORA,
        need_to_return_lse_for_decode=True,
    )
    layer = SimpleNamespace(
        _q_scale=torch.tensor([q_scale], dtype=torch.float32, device=DEVICE),
        _k_scale=torch.tensor([k_scale], dtype=torch.float32, device=DEVICE),
    )
    out, lse = flashmla.FlashMLAImpl.forward_mqa(
        impl, q.to(DEVICE), cache, SimpleNamespace(decode=meta, num_decodes=reqs), layer
    )
    rows, heads = reqs * (k + 1), q.shape[1]
    if lse.dim() == 3:  # FlashMLA's [batch, heads, q_len] (0.26 returns it as is; 0.33 flattens it to [tokens, heads])
        lse = lse.transpose(1, 2)
    return out.reshape(rows, heads, LORA), lse.reshape(rows, heads).float(), meta


def merge(outs, lses):
    """vLLM's DCP merge: each rank's output corrected by the all-gathered LSEs (correct_attn_out), then summed."""
    try:  # 0.33 moved the DCP merge into its own module
        from vllm.v1.attention.ops.dcp import CPTritonContext, correct_attn_out
    except ImportError:  # 0.26
        from vllm.v1.attention.ops.common import CPTritonContext, correct_attn_out

    stacked = torch.stack(lses)
    total, lse = None, None
    for rank, out in enumerate(outs):
        corrected, lse = correct_attn_out(out.clone(), stacked, rank, CPTritonContext())
        total = corrected.float() if total is None else total + corrected.float()
    return total, lse


def err(x, ref):
    return float((x.float().cpu() - ref).abs().max() / ref.abs().max())


def run_case(flashmla, size, interleave, kind, k, patched=True, seed=0):
    heads = HEADS_PER_RANK * size
    kv, q, kv_ref, q_ref, k_scale, q_scale = make_data(k, heads, kind, seed)
    ref_out, ref_lse = reference(q_ref, kv_ref, k)
    gen = torch.Generator().manual_seed(seed + 1)
    width = -(-max(SEQ_LENS) // BLOCK)  # enough for the unsharded cache; a shard uses the first 1/N
    block_ids = (torch.randperm(len(SEQ_LENS) * width, generator=gen) + 1).reshape(len(SEQ_LENS), width)
    # DCP 1: the same kernel on the whole KV, one k+1-token row per request (the unpatched path's DCP-1 behaviour).
    one = shard(kv, 1, 0, 1, block_ids)
    base_out, base_lse, _ = decode(flashmla, one, q, block_ids, k, kind, 1, 0, 1, k_scale, q_scale)
    outs, lses, metas = [], [], []
    for rank in range(size):
        cache = shard(kv, size, rank, interleave, block_ids)
        out, lse, meta = decode(
            flashmla, cache, q, block_ids, k, kind, size, rank, interleave, k_scale, q_scale, patched
        )
        outs.append(out)
        lses.append(lse)
        metas.append(meta)
    merged, merged_lse = merge(outs, lses)
    finite = torch.isfinite(ref_lse)
    return {
        "base_err": err(base_out, ref_out),
        "base_lse_err": float((base_lse.cpu() - ref_lse)[finite].abs().max()),
        "err": err(merged, ref_out),
        "lse_err": float((merged_lse.float().cpu() - ref_lse)[finite].abs().max()),
        "metas": metas,
    }


def tolerance(got: dict, kind: str) -> float:
    return max(4 * got["base_err"], FLOOR[kind])


def record_errors(record_property, got: dict, kind: str) -> None:
    """The measured errors and the tolerances beside them, in the junit XML (`--junitxml`): what a run states."""
    for key in ("err", "base_err", "lse_err", "base_lse_err"):
        record_property(key, f"{got[key]:.3e}")
    record_property("tolerance", f"{tolerance(got, kind):.3e}")
    record_property("lse_tolerance", f"{max(4 * got['base_lse_err'], LSE_FLOOR[kind]):.3e}")


CASES = [(n, i, kind, 3) for n in (2, 4, 8) for i in (1, 64) for kind in ("bf16", "fp8")] + [
    (4, 16, "bf16", 7),
    (8, 1, "fp8", 1),
    (2, 64, "bf16", 0),
]


@pytest.mark.parametrize("size, interleave, kind, k", CASES)
def test_sharded_verify_decode_equals_whole_kv_attention(flashmla, size, interleave, kind, k, record_property):
    got = run_case(flashmla, size, interleave, kind, k)
    record_errors(record_property, got, kind)
    # The rows the patched builder gave each rank: one per verify token, with bench.models.dcp_local's lengths.
    for rank, meta in enumerate(got["metas"]):
        want = [r.local_len for r in verify_rows(SEQ_LENS, [k + 1] * len(SEQ_LENS), size, rank, interleave)]
        assert meta.seq_lens.tolist() == want
        assert meta.block_table.shape[0] == len(want)
    assert got["err"] <= tolerance(got, kind), got
    assert got["lse_err"] <= max(4 * got["base_lse_err"], LSE_FLOOR[kind]), got


def test_the_unpatched_row_per_request_fails_the_same_check(flashmla, record_property):
    """The control: N = 2, interleave 1, where every rank's whole-request mask is wrong (bench.models.dcp_local), decoded
    without the per-token rows. Its error must exceed the tolerance tenfold, or the check above proves nothing."""
    k = 3
    assert any(
        whole_request_mask(n, k + 1, 2, r, 1) != [x.local_len for x in verify_rows([n], [k + 1], 2, r, 1)]
        for n in SEQ_LENS
        for r in range(2)
    )
    got = run_case(flashmla, 2, 1, "bf16", k, patched=False)
    record_errors(record_property, got, "bf16")
    assert got["err"] > 10 * tolerance(got, "bf16"), got
