"""A stand-in for bench.load.loadgen.run_closed_loop (patched into bench.run.trial): it runs the closed loop's own rules
(warm-up count, the window rule's `more`) without a server, one scripted record per request, and lets a test
inject a fault after the first measured request. Where the real loop runs: tests/integration/test_sweep_cpu.py."""

from __future__ import annotations

import types
from collections.abc import Callable

from bench.load.loadgen import RequestRecord


def scripted_record(index: int, phase: str, prompt_len: int, max_tokens: int, ok: bool = True) -> RequestRecord:
    """Request `index`: sent at 1 + index s, tokens at +0.5 s and +1 s (2 each), ended at +1 s."""
    rec = RequestRecord(index, phase, prompt_len, max_tokens, send_time=1.0 + index)
    rec.end_time, rec.chunk_times, rec.chunk_tokens = 2.0 + index, [1.5 + index, 2.0 + index], [2, 2]
    rec.prompt_tokens, rec.output_tokens, rec.status = prompt_len, 4, "ok" if ok else "error"
    return rec


def fake_closed_loop(calls: list[dict], fault: Callable[[int, int], None] = lambda call, i: None):
    """run_closed_loop's stand-in; `calls` gets {"warmup", "measure", "prompts"} per call; `fault(call, i)` runs
    after measured request i of call number `call` (raise there to script a hang, a death, a bench bug)."""

    def run(base_url, model, loop, *, records, on_measure_start, **_):
        call = {"warmup": loop.warmup, "measure": 0, "prompts": [], "offsets": None}
        calls.append(call)
        for i in range(loop.warmup):
            prompt = loop.prompt("warmup", i)
            call["prompts"].append(prompt)
            records.append(scripted_record(len(records), "warmup", len(prompt), loop.max_tokens))
        on_measure_start()
        call["offsets"] = list(loop.stagger([r for r in records if r.phase == "warmup"]))
        state = types.SimpleNamespace(records=records, token_times=[], token_counts=[])
        i = 0
        while loop.more(i, state):
            prompt = loop.prompt("measure", i)
            call["prompts"].append(prompt)
            records.append(scripted_record(len(records), "measure", len(prompt), loop.max_tokens))
            call["measure"] += 1
            fault(len(calls) - 1, i)
            i += 1
        return records

    return run
