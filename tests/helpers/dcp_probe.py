"""Run inside a process whose PYTHONPATH puts an unpacked vLLM 0.26.0 first (TRITON_INTERPRET=1).

Calls the real DraftModelSpeculator._build_draft_attn_metadata with block tables of cp_size > 1 on CPU tensors,
for every DCP rank, and prints (JSON) what it passed to build_attn_metadata: seq_lens and dcp_local_seq_lens.
The real prepare_dcp_local_seq_lens Triton kernel runs under the Triton interpreter: vLLM swaps triton for a
placeholder on CPU, so the module is rebound to real triton and the kernel re-jitted (docs/facts.md).
"""

import json
import sys
from types import SimpleNamespace

import torch
import triton
import triton.language as tl
import vllm
from vllm.v1.worker.gpu import cp_utils
from vllm.v1.worker.gpu.input_batch import InputBuffers
from vllm.v1.worker.gpu.spec_decode import speculator as spec_mod
from vllm.v1.worker.gpu.spec_decode.eagle.speculator import EagleSpeculator

if not isinstance(cp_utils._dcp_local_seq_lens_kernel, triton.JITFunction):
    cp_utils.triton, cp_utils.tl = triton, tl
    kernel = cp_utils._dcp_local_seq_lens_kernel
    cp_utils._dcp_local_seq_lens_kernel = triton.jit(getattr(kernel, "fn", kernel))

calls = []
spec_mod.build_attn_metadata = lambda **kw: calls.append(kw) or {}


def build(seq_lens, cp_size, cp_rank, cp_interleave, num_reqs_padded):
    max_reqs = 16
    s = object.__new__(EagleSpeculator)  # EAGLE3 uses it; the method is inherited
    s.arange = torch.arange(max_reqs + 1, dtype=torch.int32)
    s.input_buffers = InputBuffers(max_num_reqs=max_reqs, max_num_tokens=64, device=torch.device("cpu"))
    s.input_buffers.seq_lens[: len(seq_lens)] = torch.tensor(seq_lens, dtype=torch.int32)
    s.block_tables = SimpleNamespace(
        input_block_tables=[torch.zeros(max_reqs, 8, dtype=torch.int32)],
        slot_mappings=torch.zeros(1, 64, dtype=torch.int64),
        cp_size=cp_size,
        cp_rank=cp_rank,
        cp_interleave=cp_interleave,
    )
    s.attn_groups, s.draft_max_seq_len, s.kv_cache_config = [], 4096, None
    calls.clear()
    s._build_draft_attn_metadata(
        num_reqs=len(seq_lens), num_reqs_padded=num_reqs_padded, num_tokens_padded=num_reqs_padded
    )
    (kw,) = calls
    local = kw.get("dcp_local_seq_lens")
    return {"seq_lens": kw["seq_lens"].tolist(), "dcp_local_seq_lens": None if local is None else local.tolist()}


cases = json.loads(sys.argv[1])
print(
    json.dumps(
        {"vllm_version": vllm.__version__, "speculator_file": spec_mod.__file__, "results": [build(**c) for c in cases]}
    )
)
