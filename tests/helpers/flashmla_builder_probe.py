"""Run inside a process whose PYTHONPATH puts an unpacked vLLM (0.26.0 or 0.33.0) first, patched or not, on CPU.

Constructs `FlashMLAMetadataBuilder` through its real `__init__` for each case: FlashMLA's own, the real
`MLACommonMetadataBuilder.__init__` it calls and the real `AttentionMetadataBuilder._init_reorder_batch_threshold`.
What needs a GPU or a running engine is stood in for, and only that: the VllmConfig is a namespace holding the
fields those initialisers read (the CUDA graph mode is vLLM's own enum), the DCP group is a namespace with the
case's world size and rank, `num_compute_units` (CUDA device properties) returns 132, and on 0.33 the layer's
`MLADCPManager` (collectives over the DCP group) is a subclass that only records the workspace it is given. Prints (JSON) the
builder's reorder threshold and, where the patch made them, its per-row buffers.
"""

import json
import sys
from types import SimpleNamespace

import torch
import vllm
from vllm.config.compilation import CUDAGraphMode
from vllm.model_executor.layers.attention import mla_attention
from vllm.v1.attention.backends.mla import flashmla

MAX_NUM_SEQS = 16

try:  # 0.33: the builder hands its gather workspace to the layer's DCP manager
    from vllm.v1.attention.ops.dcp import MLADCPManager

    class RecordingDCPManager(MLADCPManager):
        def __init__(self):  # no process group: nothing of the real one's state
            self.workspace_rows = None

        def init_kv_gather(self, workspace, workspace_size):
            self.workspace_rows = workspace.shape[0]

except ImportError:  # 0.26: no manager
    RecordingDCPManager = None  # type: ignore[assignment,misc]


def vllm_config(dcp, pcp, k, parallel_drafting, v2_runner, graphs, cache_dtype):
    # Kimi K2.6's MLA dimensions: 0.26 reads them from the model's config, 0.33 from the attention layer.
    dims = {
        "q_lora_rank": 1536,
        "kv_lora_rank": 512,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
    }
    hf = SimpleNamespace(**dims)
    parallel = SimpleNamespace(
        decode_context_parallel_size=dcp,
        prefill_context_parallel_size=pcp,
        cp_kv_cache_interleave_size=1,
        tensor_parallel_size=1,
    )
    model = SimpleNamespace(
        hf_text_config=hf,
        hf_config=hf,
        dtype=torch.bfloat16,
        max_model_len=4096,
        use_mla=True,
        get_num_attention_heads=lambda parallel_config: 8,
        get_head_size=lambda: 576,
    )
    prefill_backend = SimpleNamespace(clone=lambda: SimpleNamespace())
    layer = SimpleNamespace(prefill_backend=prefill_backend, **dims)
    if RecordingDCPManager is not None:
        layer.dcp_manager = RecordingDCPManager()
    spec = None if k is None else SimpleNamespace(num_speculative_tokens=k, parallel_drafting=parallel_drafting)
    return SimpleNamespace(
        model_config=model,
        parallel_config=parallel,
        compilation_config=SimpleNamespace(
            cudagraph_mode=CUDAGraphMode[graphs],
            static_forward_context={"layer.0": layer},
        ),
        scheduler_config=SimpleNamespace(max_num_seqs=MAX_NUM_SEQS, max_num_batched_tokens=8192),
        cache_config=SimpleNamespace(cache_dtype=cache_dtype, block_size=64),
        attention_config=SimpleNamespace(use_prefill_query_quantization=False),
        speculative_config=spec,
        use_v2_model_runner=v2_runner,  # read by 0.33's max_decode_query_len
    )


def run(dcp, group, rank, pcp, k, parallel_drafting, v2_runner, graphs, cache_dtype):
    dcp_group = SimpleNamespace(world_size=group, rank_in_group=rank)
    for module in (mla_attention, flashmla):
        if hasattr(module, "get_dcp_group"):
            module.get_dcp_group = lambda: dcp_group
    flashmla.num_compute_units = lambda index=None: 132
    config = vllm_config(dcp, pcp, k, parallel_drafting, v2_runner, graphs, cache_dtype)
    spec = SimpleNamespace(block_size=64)
    builder = flashmla.FlashMLAMetadataBuilder(spec, ["layer.0"], config, torch.device("cpu"))

    def shape(name):
        t = getattr(builder, name, None)
        return None if t is None else list(t.shape)

    rows = getattr(builder, "dcp_rows_seq_lens", None)
    return {
        "threshold": builder.reorder_batch_threshold,
        "dcp_spec_decode": getattr(builder, "dcp_spec_decode", None),
        "dcp_rank": getattr(builder, "dcp_rank", None),
        "dcp_world_size": builder.dcp_world_size,
        "rows_seq_lens": shape("dcp_rows_seq_lens"),
        "rows_dtype": None if rows is None else str(rows.dtype),
        "rows_block_table": shape("dcp_rows_block_table"),
        "num_splits": shape("cg_buf_num_splits"),
        "is_fp8_kvcache": builder.is_fp8_kvcache,
        "dcp_manager_workspace_rows": getattr(getattr(builder, "dcp_manager", None), "workspace_rows", None),
    }


cases = json.loads(sys.argv[1])
print(
    json.dumps(
        {
            "vllm_version": vllm.__version__,
            "flashmla_file": flashmla.__file__,
            "max_num_seqs": MAX_NUM_SEQS,
            "results": [run(**c) for c in cases],
        }
    )
)
