"""bench/models/dcp_local.py against an explicit interleaved sharding of token positions (brute force): each rank's KV is
the list of positions it owns, in order, built position by position from the ownership rule alone."""

from __future__ import annotations

import itertools

import pytest

from bench.models.dcp_local import Row, local_index, local_len, owner, verify_rows, whole_request_mask

SIZES = (1, 2, 4, 8)
INTERLEAVES = (1, 2, 3, 16, 64)


def shard(length: int, size: int, interleave: int) -> list[list[int]]:
    """Each rank's KV as the positions it holds, in storage order: deal out groups of `interleave` consecutive
    tokens to ranks 0, 1, ..., size - 1, 0, 1, ... (no formula shared with bench.models.dcp_local)."""
    ranks: list[list[int]] = [[] for _ in range(size)]
    rank, in_group = 0, 0
    for position in range(length):
        ranks[rank].append(position)
        in_group += 1
        if in_group == interleave:
            rank, in_group = (rank + 1) % size, 0
    return ranks


@pytest.mark.parametrize("size, interleave", list(itertools.product(SIZES, INTERLEAVES)))
def test_owner_index_and_length_match_the_explicit_sharding(size, interleave):
    length = 3 * size * interleave + 7
    ranks = shard(length, size, interleave)
    assert sum(len(r) for r in ranks) == length
    for rank, positions in enumerate(ranks):
        for i, p in enumerate(positions):
            assert owner(p, size, interleave) == rank
            assert local_index(p, size, interleave) == i  # stored right after the rank's earlier tokens
        for prefix in range(length + 1):
            assert local_len(prefix, size, rank, interleave) == sum(p < prefix for p in positions), (rank, prefix)


def brute_rows(seq_lens, query_lens, size, rank, interleave):
    """Per query token: the request, the position, and how many of the rank's tokens lie at or before it."""
    out = []
    for j, (length, q) in enumerate(zip(seq_lens, query_lens, strict=True)):
        held = shard(length, size, interleave)[rank]
        out += [(j, p, sum(x <= p for x in held)) for p in range(length - q, length)]
    return out


BATCHES = [
    ([1], [1]),
    ([4], [4]),  # the whole sequence is the query (a fresh request's first verify)
    ([10, 4, 7], [4, 4, 1]),
    ([8192 + 3, 8192 + 4, 8192 + 5, 8192 + 6], [4, 4, 4, 4]),
    ([17, 64, 65, 129, 300], [2, 2, 2, 2, 2]),
    ([1000, 33, 5], [8, 8, 5]),
    ([63, 64, 65], [0, 3, 3]),  # a zero-length request: no rows
]


@pytest.mark.parametrize("size", (2, 4, 8))
@pytest.mark.parametrize("interleave", (1, 2, 16, 64))
@pytest.mark.parametrize("seq_lens, query_lens", BATCHES)
def test_verify_rows_match_brute_force(size, interleave, seq_lens, query_lens):
    for rank in range(size):
        rows = verify_rows(seq_lens, query_lens, size, rank, interleave)
        assert [(r.request, r.position, r.local_len) for r in rows] == brute_rows(
            seq_lens, query_lens, size, rank, interleave
        )
    # Across ranks, each token sees every earlier token exactly once.
    per_rank = [verify_rows(seq_lens, query_lens, size, r, interleave) for r in range(size)]
    for rows in zip(*per_rank, strict=True):
        assert sum(r.local_len for r in rows) == rows[0].position + 1


@pytest.mark.parametrize("k", (0, 1, 3, 7))
def test_rows_per_k_and_padding(k):
    seq_lens, q = [50, 51, 52], [k + 1] * 3
    rows = verify_rows(seq_lens, q, 4, 1, 2, num_rows=3 * (k + 1) + 5)
    assert len(rows) == 3 * (k + 1) + 5
    assert rows[-5:] == [Row(None, None, 0)] * 5
    assert [r.request for r in rows[: 3 * (k + 1)]] == [j for j in range(3) for _ in range(k + 1)]
    assert [r.position for r in rows[: k + 1]] == list(range(50 - (k + 1), 50))


def test_the_whole_request_mask_is_wrong_on_an_interleaved_shard():
    """The constraint behind the patch: one q-token row per request masks 'all but the last q - 1 - i' local keys,
    which holds only where the rank owns every one of the last q positions."""
    # N = 2, I = 1, L = 10, q = 4: rank 0 holds positions 0, 2, 4, 6, 8; the query at position 6 may see 0, 2, 4, 6.
    assert [r.local_len for r in verify_rows([10], [4], 2, 0, 1)] == [4, 4, 5, 5]
    assert whole_request_mask(10, 4, 2, 0, 1) == [2, 3, 4, 5]
    # Without DCP both agree (N = 1): that is why the unpatched decode path is right at DCP 1.
    for length, q in ((10, 4), (8195, 4), (5, 5)):
        assert [r.local_len for r in verify_rows([length], [q], 1, 0, 1)] == whole_request_mask(length, q, 1, 0, 1)
    # With an interleave larger than q the last q tokens often share one owner, yet other ranks still differ.
    wrong = [
        (n, i, r)
        for n, i in itertools.product((2, 4, 8), (1, 16, 64))
        for r in range(n)
        if [x.local_len for x in verify_rows([8195], [4], n, r, i)] != whole_request_mask(8195, 4, n, r, i)
    ]
    assert wrong, "some rank must disagree at every size and interleave tested"
    assert {(n, i) for n, i, _ in wrong} == set(itertools.product((2, 4, 8), (1, 16, 64)))


def test_bad_inputs():
    with pytest.raises(ValueError, match="must be >= 1"):
        local_len(5, 0, 0, 1)
    with pytest.raises(ValueError, match="rank 4 is not in 0..3"):
        local_len(5, 4, 4, 1)
    with pytest.raises(ValueError, match="query length 5 outside 0..4"):
        verify_rows([4], [5], 2, 0, 1)
    with pytest.raises(ValueError, match="cannot hold"):
        verify_rows([4], [4], 2, 0, 1, num_rows=3)
    with pytest.raises(ValueError, match="2 sequence lengths but 1 query lengths"):
        verify_rows([4, 5], [1], 2, 0, 1)
