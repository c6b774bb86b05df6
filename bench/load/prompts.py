"""Which prompts a point sends: every prompt of a results directory is its own, unless the profile asks for reuse.

vLLM's prefix cache is on by default: a prompt sent twice (or two prompts sharing their first KV blocks) is served
from the cache the second time, faster than the workload says. The suite's old seed (run seed + input length +
1000 x trial) ignored the point and the run, so 8x1024 re-sent 1x1024's prompts and two runs sent the same ones;
committed server logs showed prefix-cache hit rates of 18-52% (docs/measurement.md). Now a prompt is named by the
run's salt (a random string written into the manifest: a resumed or repeated run with that salt sends the same
prompts), the point id, the trial, the attempt (a re-measured window), the phase and its index; its token ids
are drawn from a generator seeded by that name. `[run] prompt_reuse = true` names prompts by the run seed,
input length, trial, phase and index only (the old behaviour: points of one input length share prompts), for
studying the prefix cache itself; prefix-cache hits are then not flagged. Dataset conversations (text workloads)
are kept apart the same way by another mechanism: a stretch of one seeded order per (point, trial, attempt)
(bench.config.plan.Plan.sample_start, bench.workloads.conversation.Dataset.take).
"""

from __future__ import annotations

import hashlib
import secrets

SALT_BYTES = 6


def new_salt() -> str:
    return secrets.token_hex(SALT_BYTES)


def prompt_name(
    *,
    salt: str,
    point_id: str,
    trial: int,
    attempt: int,
    phase: str,
    index: int,
    reuse: bool,
    seed: int,
    input_len: int,
) -> str:
    """The string a prompt is drawn from (bench.load.loadgen.make_prompt seeds its generator with it)."""
    if reuse:
        return f"reuse/{seed}/{input_len}/{trial}/{phase}/{index}"
    return f"{salt}/{point_id}/{trial}/{attempt}/{phase}/{index}"


def int_seed(name: str) -> int:
    """A 60-bit integer seed from a name (dataset sampling and arrival schedules take integers)."""
    return int(hashlib.sha256(name.encode()).hexdigest()[:15], 16)
