"""A loopback decode-context-parallel (DCP) group: vLLM's own DCP code on one process, as rank 0 of N identical ranks.

Why: a DCP-N deployment of Kimi K2.6 needs 8 GPUs; one is lent. With this group installed, vLLM runs its real DCP
path (`--decode-context-parallel-size N`, `get_dcp_group().world_size == N`, this process rank 0): the KV cache is
sharded by token (`get_dcp_local_seq_lens`, the interleave), the metadata builders and the draft speculator build
DCP metadata, the decode kernel runs over the gathered heads and the rank's 1/N of the context. Only the
collectives are local: what N identical ranks would exchange.

- `all_gather(x, dim)`: N copies of x concatenated along dim (what N ranks holding x would gather).
- `reduce_scatter(x, dim)`: rank 0's share of the sum of N identical inputs: N x the first 1/N of x along dim.
  In `cp_lse_ag_out_rs` each rank scales its partial output by exp(lse_r - lse_total); with N identical LSEs that
  is 1/N, so the N-fold sum returns the rank's own attention output, as a real merge of equal shards would.
- `all_reduce(x)`: N x x.

What is relaxed, only while BENCH_DCP_LOOPBACK=N is set in the server's environment (the suite sets it for a point
whose DCP size does not divide the server's tensor-parallel size, `bench.config.plan`):
- `ParallelConfig`'s check "tp_size must be divisible by dcp_size": the config is built with DCP 1 and then set to
  N, only when the check would refuse N; `VllmConfig` re-validates its `parallel_config` field the same way;
- `initialize_model_parallel` builds its groups with DCP 1, then the DCP group is replaced by the loopback group.
`dcp_comm_backend = "a2a"` calls `torch.distributed.all_to_all_single` on the group's process group directly,
which a loopback cannot answer: the plugin refuses it with a clear error.

Runs inside vLLM's processes (every one: API server, engine core, workers): imports nothing from the rest of the
suite. Installing twice in one process is a no-op. `torch` and vLLM are imported only by `install()`.
"""

from __future__ import annotations

import collections
import functools
import logging
import os
from typing import Any

ENV = "BENCH_DCP_LOOPBACK"  # plugin.ENV_DCP_LOOPBACK
MARK = "_bench_dcp_loopback"
logger = logging.getLogger("vllm.bench_profiling.dcp_loopback")  # a child of plugin.LOGGER_NAME
# Calls of each collective in this process up to when the engine record is written (after warm-up): warm-up and
# graph capture call Python, a FULL graph's replay does not, and under PIECEWISE graphs attention (with its
# collectives) runs eagerly, so the count would go on growing with every step.
CALLS: collections.Counter[str] = collections.Counter()
_INSTALLED: dict[str, Any] = {}


class LoopbackError(RuntimeError):
    """What the loopback group cannot do (said in vLLM's log and traceback with its reason)."""


def size_from_env(environ: dict[str, str] | None = None) -> int:
    """N from BENCH_DCP_LOOPBACK (0 when unset); a value that is not an integer >= 2 is an error."""
    raw = (environ if environ is not None else os.environ).get(ENV, "").strip()
    if not raw:
        return 0
    try:
        n = int(raw)
    except ValueError:
        raise LoopbackError(f"{ENV}={raw!r}: expected the DCP size, an integer >= 2") from None
    if n < 2:
        raise LoopbackError(f"{ENV}={raw!r}: expected the DCP size, an integer >= 2")
    return n


class LoopbackGroup:
    """Stands in for vLLM's DCP `GroupCoordinator`: `world_size` N, `rank_in_group` 0, collectives in-process.
    Everything else (process groups, names, destroy) is the real one-rank group's."""

    def __init__(self, inner: Any, world_size: int):
        if world_size < 1:
            raise LoopbackError(f"loopback DCP group of size {world_size}")
        self._inner = inner
        self.world_size = world_size
        self.rank_in_group = 0
        setattr(self, MARK, True)

    def __getattr__(self, name: str) -> Any:  # only for what is not defined here
        return getattr(self._inner, name)

    def all_gather(self, input_: Any, dim: int = -1) -> Any:
        CALLS["all_gather"] += 1
        if self.world_size == 1:
            return input_
        import torch

        return torch.cat([input_] * self.world_size, dim=dim)

    def reduce_scatter(self, input_: Any, dim: int = -1) -> Any:
        CALLS["reduce_scatter"] += 1
        if self.world_size == 1:
            return input_
        size = input_.shape[dim]
        if size % self.world_size:
            raise LoopbackError(f"reduce_scatter: dimension {dim} of size {size} does not split {self.world_size} ways")
        return input_.narrow(dim, 0, size // self.world_size) * self.world_size

    def all_reduce(self, input_: Any) -> Any:
        CALLS["all_reduce"] += 1
        return input_ * self.world_size if self.world_size > 1 else input_

    def all_gatherv(self, *args: Any, **kwargs: Any) -> Any:
        raise LoopbackError("all_gatherv (uneven sizes) is not answered by the loopback DCP group")

    def reduce_scatterv(self, *args: Any, **kwargs: Any) -> Any:
        raise LoopbackError("reduce_scatterv (uneven sizes) is not answered by the loopback DCP group")

    def __repr__(self) -> str:
        return f"LoopbackGroup(world_size={self.world_size}, rank_in_group=0, inner={self._inner!r})"


def relaxed_parallel_init(orig: Any, n: int) -> Any:
    """`ParallelConfig.__init__` that builds a config asking for DCP n with DCP 1 when its check would refuse n
    (tp % n != 0), then sets n. Any other config is built as before."""

    @functools.wraps(orig)
    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        dcp = kwargs.get("decode_context_parallel_size", 1)
        tp = kwargs.get("tensor_parallel_size", 1)
        if args or dcp != n or tp % n == 0:
            orig(self, *args, **kwargs)
            return
        if kwargs.get("dcp_comm_backend") == "a2a":
            raise LoopbackError(
                "dcp_comm_backend='a2a' calls torch.distributed.all_to_all_single on the DCP process group, which a "
                "loopback DCP group cannot answer: use the default 'ag_rs'"
            )
        orig(self, *args, **{**kwargs, "decode_context_parallel_size": 1})
        self.decode_context_parallel_size = n
        logger.info("bench DCP loopback: ParallelConfig tp=%d with decode_context_parallel_size=%d (loopback)", tp, n)

    setattr(init, MARK, True)
    return init


def relaxed_vllm_init(orig: Any, n: int) -> Any:
    """`VllmConfig.__init__` that re-validates a loopback `ParallelConfig` (DCP n, tp % n != 0) as DCP 1 (pydantic
    re-runs the field's checks), then sets n back on it. Any other config is built as before."""

    @functools.wraps(orig)
    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        pc = kwargs.get("parallel_config")
        loop = (
            not args
            and pc is not None
            and getattr(pc, "decode_context_parallel_size", 1) == n
            and getattr(pc, "tensor_parallel_size", 1) % n != 0
        )
        if not loop or pc is None:
            orig(self, *args, **kwargs)
            return
        pc.decode_context_parallel_size = 1
        try:
            orig(self, *args, **kwargs)
        finally:
            pc.decode_context_parallel_size = n
        self.parallel_config.decode_context_parallel_size = n

    setattr(init, MARK, True)
    return init


def loopback_initialize(orig: Any, state: Any, n: int) -> Any:
    """`initialize_model_parallel` that builds the groups with DCP 1 when asked for DCP n, then installs a loopback
    DCP group of size n in `state` (the `parallel_state` module)."""

    @functools.wraps(orig)
    def initialize(*args: Any, **kwargs: Any) -> Any:
        args_list = list(args)
        if len(args_list) > 3:
            dcp = args_list[3]
            args_list[3] = 1
        else:
            dcp = kwargs.get("decode_context_model_parallel_size", 1)
            kwargs["decode_context_model_parallel_size"] = 1
        result = orig(*args_list, **kwargs)
        if (dcp or 1) == n:
            state._DCP = LoopbackGroup(state._DCP, n)
            logger.info("bench DCP loopback: DCP group of %d identical ranks installed in pid %d", n, os.getpid())
        elif (dcp or 1) != 1:
            raise LoopbackError(f"{ENV}={n} but vLLM asked for a DCP group of {dcp}")
        return result

    setattr(initialize, MARK, True)
    return initialize


def install(n: int) -> None:
    """Relax the config check and wrap the group set-up for DCP n in this process (idempotent)."""
    if _INSTALLED:
        return
    from vllm.config import parallel as parallel_cfg
    from vllm.config import vllm as vllm_cfg
    from vllm.distributed import parallel_state as state

    for cls, relax in ((parallel_cfg.ParallelConfig, relaxed_parallel_init), (vllm_cfg.VllmConfig, relaxed_vllm_init)):
        if not getattr(cls.__init__, MARK, False):
            _INSTALLED[f"{cls.__name__}.__init__"] = (cls, "__init__", cls.__init__)
            cls.__init__ = relax(cls.__init__, n)  # type: ignore[method-assign]
    if not getattr(state.initialize_model_parallel, MARK, False):
        _INSTALLED["initialize_model_parallel"] = (state, "initialize_model_parallel", state.initialize_model_parallel)
        state.initialize_model_parallel = loopback_initialize(state.initialize_model_parallel, state, n)
    logger.info("bench DCP loopback active in pid %d: DCP %d on one process", os.getpid(), n)


def uninstall() -> None:
    """Undo `install` (tests)."""
    for owner, name, orig in _INSTALLED.values():
        setattr(owner, name, orig)
    _INSTALLED.clear()
    CALLS.clear()


def summary() -> dict[str, Any]:
    """For the effective-configuration record: the loopback size and the collectives' Python calls so far."""
    n = size_from_env() if os.environ.get(ENV) else 0
    return {"world_size": n, "calls": dict(CALLS)} if n else {}
