"""Run inside a process whose PYTHONPATH puts an unpacked vLLM (0.26.0 or 0.33.0) with the dcp-spec-decode patch
first, on CPU.

Calls the patched module's `dcp_spec_decode_rows` and the FlashMLA metadata builder's `_dcp_decode_rows` (on a
stand-in `self` holding only what the method reads) for each case, every DCP rank, and prints (JSON) the request
and DCP-local length of every row, the block-table row each decode row got, and the errors for too many rows and
for a block table of another width.
"""

import json
import sys
from types import SimpleNamespace

import torch
import vllm
from vllm.v1.attention.backends.mla import flashmla


def run(seq_lens, query_lens, size, rank, interleave, num_rows):
    qsl = torch.tensor([0, *torch.tensor(query_lens).cumsum(0).tolist()], dtype=torch.int32)
    lens = torch.tensor(seq_lens, dtype=torch.int32)
    req, local = flashmla.dcp_spec_decode_rows(qsl, lens, num_rows, size, rank, interleave)
    # Block table: request j's row holds 1000 * j + column, so a copied row names its request.
    width = 5
    table = torch.tensor([[1000 * j + c for c in range(width)] for j in range(len(seq_lens))], dtype=torch.int32)
    builder = SimpleNamespace(
        dcp_rows_seq_lens=torch.full((num_rows + 3,), -1, dtype=torch.int32),
        dcp_rows_block_table=None,
        dcp_world_size=size,
        dcp_rank=rank,
        cp_kv_cache_interleave_size=interleave,
    )
    rows_table, rows_lens = flashmla.FlashMLAMetadataBuilder._dcp_decode_rows(builder, table, lens, qsl, num_rows)
    same_buffers = (
        rows_lens.data_ptr() == builder.dcp_rows_seq_lens.data_ptr()
        and rows_table.data_ptr() == builder.dcp_rows_block_table.data_ptr()
    )
    too_many = None
    try:
        flashmla.FlashMLAMetadataBuilder._dcp_decode_rows(builder, table, lens, qsl, num_rows + 4)
    except ValueError as exc:
        too_many = str(exc)
    # A wider block table must not replace the persistent buffer (a captured FULL graph reads it): an error, the
    # buffer kept.
    allocated = builder.dcp_rows_block_table
    wider = torch.cat([table, table[:, :1]], dim=1)
    width_change = None
    try:
        flashmla.FlashMLAMetadataBuilder._dcp_decode_rows(builder, wider, lens, qsl, num_rows)
    except ValueError as exc:
        width_change = str(exc)
    same_buffers = same_buffers and builder.dcp_rows_block_table is allocated
    return {
        "request": req.tolist(),
        "local_len": local.tolist(),
        "local_dtype": str(local.dtype),
        "builder_local_len": rows_lens.tolist(),
        "builder_table_first_column": rows_table[:, 0].tolist(),
        "builder_table_width": rows_table.shape[1],
        "persistent_buffers": same_buffers,
        "too_many_rows": too_many,
        "width_change": width_change,
    }


cases = json.loads(sys.argv[1])
print(
    json.dumps(
        {"vllm_version": vllm.__version__, "flashmla_file": flashmla.__file__, "results": [run(**c) for c in cases]}
    )
)
