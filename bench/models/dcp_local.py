"""DCP-local token arithmetic, as vLLM shards a sequence's KV cache over decode-context-parallel ranks.

vLLM (0.26.0 and later, `v1/worker/gpu/block_table.py` `_compute_slot_mappings_kernel`) gives the token at
position p to rank `(p // I) % N` (N ranks, interleave size I) and stores it at that rank's local index
`(p // (N * I)) * I + p % I`, that is after every earlier token the rank holds: a rank's local KV is the
subsequence of positions it owns, in order. `v1/attention/backends/utils.py` `get_dcp_local_seq_lens` gives the
local length of a sequence of length L on rank r in closed form (`local_len` below).

The patch `dcp-spec-decode` (patches/0.26, patches/0.33; docs/dcp-spec-decode.md) gives each speculative verify
token its own FlashMLA decode row whose length is the local length of that token's position + 1: the local
tokens at or before it. `verify_rows` is that per-token arithmetic in plain Python, the reference its tests
(tests/unit/test_dcp_local.py brute-forces it against an explicit sharding; the patch-wheel tests compare the
patched vLLM function with it) and the GPU correctness test use.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


def _check(size: int, interleave: int, rank: int | None = None) -> None:
    if size < 1 or interleave < 1:
        raise ValueError(f"DCP size {size} and interleave {interleave} must be >= 1")
    if rank is not None and not 0 <= rank < size:
        raise ValueError(f"rank {rank} is not in 0..{size - 1}")


def owner(position: int, size: int, interleave: int) -> int:
    """The DCP rank holding the KV of the token at `position`."""
    _check(size, interleave)
    return (position // interleave) % size


def local_index(position: int, size: int, interleave: int) -> int:
    """Where the owning rank stores the token at `position` among its own tokens (vLLM's slot mapping)."""
    _check(size, interleave)
    return (position // (size * interleave)) * interleave + position % interleave


def local_len(length: int, size: int, rank: int, interleave: int) -> int:
    """How many of the first `length` tokens of a sequence rank `rank` holds (vLLM's `get_dcp_local_seq_lens`)."""
    _check(size, interleave, rank)
    length = max(length, 0)
    period = size * interleave
    return (length // period) * interleave + min(max(length % period - rank * interleave, 0), interleave)


@dataclass(frozen=True)
class Row:
    """One decode row of the patched FlashMLA batch: a query token of request `request` (None: padding past the
    last request's tokens) at sequence `position`, attending to the first `local_len` tokens of the rank's KV."""

    request: int | None
    position: int | None
    local_len: int


def verify_rows(
    seq_lens: Sequence[int],
    query_lens: Sequence[int],
    size: int,
    rank: int,
    interleave: int,
    num_rows: int | None = None,
) -> list[Row]:
    """One row per query token of a decode batch on DCP rank `rank`.

    Request j has `query_lens[j]` query tokens, the last `query_lens[j]` of its `seq_lens[j]` tokens (the query
    included, as vLLM counts it): positions `seq_lens[j] - query_lens[j]` .. `seq_lens[j] - 1`. A token at
    position p may see the rank's local tokens at positions <= p: `local_len(p + 1)` of them. `num_rows` (default:
    the batch's tokens) may add padding rows, which get length 0, as CUDA-graph padding does.
    """
    if len(seq_lens) != len(query_lens):
        raise ValueError(f"{len(seq_lens)} sequence lengths but {len(query_lens)} query lengths")
    rows = []
    for j, (length, q) in enumerate(zip(seq_lens, query_lens, strict=True)):
        if q < 0 or q > length:
            raise ValueError(f"request {j}: query length {q} outside 0..{length}")
        for position in range(length - q, length):
            rows.append(Row(j, position, local_len(position + 1, size, rank, interleave)))
    total = len(rows) if num_rows is None else num_rows
    if total < len(rows):
        raise ValueError(f"{num_rows} rows cannot hold the batch's {len(rows)} query tokens")
    return rows + [Row(None, None, 0)] * (total - len(rows))


def whole_request_mask(seq_len: int, query_len: int, size: int, rank: int, interleave: int) -> list[int]:
    """What FlashMLA's causal mask gives the query tokens of one request run as one q-token row (vLLM's unpatched
    decode path): query i of q sees the rank's first `local_len(L) - (q - 1 - i)` local tokens. Compared with
    `verify_rows` it shows the constraint the patch works around: on an interleaved shard these counts are wrong
    (docs/dcp-spec-decode.md)."""
    local = local_len(seq_len, size, rank, interleave)
    return [max(local - (query_len - 1 - i), 0) for i in range(query_len)]
